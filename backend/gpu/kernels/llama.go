package kernels

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/backend"
)

// The op functions of Llama-style blocks (backend.LlamaBlocks): RMSNorm,
// its fused residual add and its backward pass, rotary position
// embeddings with the optional QK-norm, SwiGLU, and ReLU². The kernels
// are in llama.cu (CUDA) and llama.cl (OpenCL); grouped-query attention
// is the attention kernels' (attention.go).

// RotaryMaxHD is the widest head Rotary and RotaryBackward take: a warp
// owns a head, each lane RotaryMaxHD/64 of its pairs.
const RotaryMaxHD = 256

// rotaryChunkRows is how many rows each of RotaryBackward's partial sums
// of the QK-norm weights' gradients covers (one block per chunk);
// tests lower it to reach several chunks with few rows.
var rotaryChunkRows = 64

// RMSNorm normalises each row of a rows×cols x into out (both of storage
// dt, F32 or BF16) by its root mean square, with F32 weight w, saving the
// F32 rstd [rows] (backend.LlamaBlocks.RMSNorm). One launch of
// fleet_rmsnorm_<dt>, a warp per row.
func RMSNorm[B comparable](l Launcher[B], dt backend.DType, out, rstd, x, w B, rows, cols int, eps float32) error {
	k, err := kernel("rmsnorm", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("rmsnorm", rows, cols); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, *new(Args[B]).Buf(out, rstd, x, w).Int(int32(rows), int32(cols)).Float(eps))
}

// AddRMSNorm is DropoutAdd (sum = x + y*m.Factor, x nil: y*m.Factor; base
// m.Base) then RMSNorm of sum (out, rstd), in one launch with the same
// bits (backend.LlamaBlocks.AddRMSNorm): fleet_add_rmsnorm_<dt>.
func AddRMSNorm[B comparable](l Launcher[B], dt backend.DType, sum, out, rstd, x, y, w B, rows, cols int, eps float32, m backend.DropoutMask, base B) error {
	k, err := kernel("add_rmsnorm", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("add_rmsnorm", rows, cols); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, *new(Args[B]).Buf(sum, out, rstd, x, y, w).Int(int32(rows), int32(cols)).Float(eps).
		Long(int64(m.Seed)).Long(m.Offset).Int(int32(m.Site)).Uint(m.Threshold).Float(m.Scale).Buf(base))
}

// RMSNormBackwardScratch is the number of F32 elements of scratch
// RMSNormBackward needs: a row of dw's partial sums per chunk of
// LNChunkRows rows. Its counters are LayerNormBackward's
// (LayerNormBackwardCounters), which every launch of either leaves zero.
func RMSNormBackwardScratch(rows, cols int) int { return lnChunks(rows) * cols }

// RMSNormBackward writes dx (plus dres, unless dres is nil; it must not
// overlap dx) and accumulates into dw for an RMSNorm over rows×cols, in
// one launch of fleet_rmsnorm_backward_<dt>, as LayerNormBackward: dx,
// dres, dout, x and ddrop have storage dt (F32 or BF16); rstd, w and dw
// are F32. Unless ddrop is nil, it also gets dx masked by m. scratch holds
// RMSNormBackwardScratch(rows, cols) F32 elements, done
// LayerNormBackwardCounters(cols) counters, zero. dw is summed over fixed
// chunks of LNChunkRows rows, then the chunks are added in order:
// deterministic, the only atomic an integer count of the chunks done.
func RMSNormBackward[B comparable](l Launcher[B], dt backend.DType, dx, dres, dw, dout, x, rstd, w, scratch, done B, rows, cols int, ddrop B, m backend.DropoutMask, base B) error {
	k, err := kernel("rmsnorm_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("rmsnorm backward", rows, cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return l.Launch(k, [3]int{lnChunks(rows), 1, 1}, block1D, 0, *new(Args[B]).Buf(dx, dres, dw, scratch, done, dout, x, rstd, w).
		Int(int32(rows), int32(cols), int32(lnChunkRows)).Buf(ddrop).Long(int64(m.Seed)).Long(m.Offset).Int(int32(m.Site)).Uint(m.Threshold).Float(m.Scale).Buf(base))
}

// rotaryCheck validates a Rotary call's shape.
func rotaryCheck(op string, p backend.Rotary) error {
	if p.B < 0 || p.T < 0 || p.H < 1 || p.KVH < 1 || p.HD < 2 || p.HD%2 != 0 || p.HD > RotaryMaxHD || p.Pos < 0 || p.Pos+p.T > p.MaxPos {
		return fmt.Errorf("kernels: %s: bad shape %+v (want H, KVH >= 1, an even head of at most %d, positions inside the table)", op, p, RotaryMaxHD)
	}
	if int64(p.B)*int64(p.T)*int64(p.H+2*p.KVH) > math.MaxInt32 || int64(p.MaxPos)*int64(p.HD) > math.MaxInt32 {
		return fmt.Errorf("kernels: %s: shape %+v too large", op, p)
	}
	return nil
}

// rotaryArgs are the shape arguments every rotary kernel ends with.
func rotaryArgs[B comparable](a *Args[B], p backend.Rotary) *Args[B] {
	return a.Int(int32(p.B), int32(p.T), int32(p.H), int32(p.KVH), int32(p.HD), int32(p.Pos), int32(p.MaxPos))
}

// Rotary applies rotary embeddings, after QK-norm where qw is not nil, to
// the q and k heads of a packed qkv (p.Width() wide rows) into out, and
// copies the v heads (backend.LlamaBlocks.Rotary): qkv and out have
// storage dt (F32 or BF16); rstd ([B·T·(H+KVH)], written with QK-norm),
// qw, kw ([HD]) and the table are F32. One launch of fleet_rotary_<dt>, a
// warp per (row, head).
func Rotary[B comparable](l Launcher[B], dt backend.DType, p backend.Rotary, out, rstd, qkv, qw, kw, table B) error {
	k, err := kernel("rotary", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := rotaryCheck("rotary", p); err != nil {
		return err
	}
	units := p.B * p.T * (p.H + 2*p.KVH)
	if units == 0 {
		return nil
	}
	a := *new(Args[B]).Buf(out, rstd, qkv, qw, kw, table)
	return l.Launch(k, gridFor(l, int64(units), BlockSize/32), block1D, 0, *rotaryArgs(&a, p).Float(p.Eps))
}

// RotaryBackwardScratch is the number of F32 elements of scratch
// RotaryBackward needs with QK-norm: per chunk of rows, the partial sums
// of dqw and of dkw.
func RotaryBackwardScratch(p backend.Rotary) int {
	rows := p.B * p.T
	return (rows + rotaryChunkRows - 1) / rotaryChunkRows * 2 * p.HD
}

// RotaryBackward writes dqkv from dout (backend.LlamaBlocks.RotaryBackward):
// the rotation's transpose, then, where qw is not nil, QK-norm's backward
// pass, accumulating into dqw and dkw. dqkv, dout and qkv have storage dt;
// rstd, qw, kw, dqw, dkw, the table and scratch (RotaryBackwardScratch(p)
// F32 elements; the zero buffer without QK-norm) are F32. One launch of
// fleet_rotary_backward_<dt> (a block per chunk of rotaryChunkRows rows,
// each warp a (row, head) at a time), which writes each chunk's partial
// sums; with QK-norm, then fleet_rotary_backward_dw_f32, which adds them
// into dqw and dkw in chunk order: deterministic, no atomics.
func RotaryBackward[B comparable](l Launcher[B], dt backend.DType, p backend.Rotary, dqkv, dqw, dkw, dout, qkv, rstd, qw, kw, table, scratch B) error {
	k, err := kernel("rotary_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := rotaryCheck("rotary backward", p); err != nil {
		return err
	}
	rows := p.B * p.T
	if rows == 0 {
		return nil
	}
	nc := (rows + rotaryChunkRows - 1) / rotaryChunkRows
	a := *new(Args[B]).Buf(dqkv, scratch, dout, qkv, rstd, qw, kw, table)
	if err := l.Launch(k, [3]int{nc, 1, 1}, block1D, 0, *rotaryArgs(&a, p).Int(int32(rotaryChunkRows))); err != nil {
		return err
	}
	var none B
	if qw == none {
		return nil
	}
	cols := 2 * p.HD // one warp per column of dqw, then of dkw
	return l.Launch("fleet_rotary_backward_dw_f32", gridFor(l, int64(cols), BlockSize/32), block1D, 0,
		*new(Args[B]).Buf(dqw, dkw, scratch).Int(int32(nc), int32(p.HD)))
}

// SwiGLU writes out[r, j] = silu(gu[r, j])·gu[r, hidden+j] for gu
// [rows, 2·hidden] and out [rows, hidden], both of storage dt (F32 or
// BF16) (backend.LlamaBlocks.SwiGLU): fleet_swiglu_<dt>, elementwise.
func SwiGLU[B comparable](l Launcher[B], dt backend.DType, out, gu B, rows, hidden int) error {
	k, err := kernel("swiglu", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("swiglu", rows, 2*hidden); err != nil {
		return err
	}
	return elementwise(l, k, rows*hidden, *new(Args[B]).Buf(out, gu).Int(int32(rows), int32(hidden)))
}

// SwiGLUBackward writes dgu [rows, 2·hidden] from dout [rows, hidden] and
// the forward's gu (backend.LlamaBlocks.SwiGLUBackward), all of storage
// dt: fleet_swiglu_backward_<dt>, elementwise.
func SwiGLUBackward[B comparable](l Launcher[B], dt backend.DType, dgu, gu, dout B, rows, hidden int) error {
	k, err := kernel("swiglu_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("swiglu backward", rows, 2*hidden); err != nil {
		return err
	}
	return elementwise(l, k, rows*hidden, *new(Args[B]).Buf(dgu, gu, dout).Int(int32(rows), int32(hidden)))
}

// ReLU2 writes out[i] = max(x[i], 0)² for n elements of storage dt (F32
// or BF16) (backend.LlamaBlocks.ReLU2): fleet_relu2_<dt>, elementwise.
func ReLU2[B comparable](l Launcher[B], dt backend.DType, out, x B, n int) error {
	k, err := kernel("relu2", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(out, x).Long(int64(n)))
}

// ReLU2Backward writes dx[i] = 2·max(x[i], 0)·dout[i] for n elements, all
// of storage dt (backend.LlamaBlocks.ReLU2Backward):
// fleet_relu2_backward_<dt>, elementwise.
func ReLU2Backward[B comparable](l Launcher[B], dt backend.DType, dx, x, dout B, n int) error {
	k, err := kernel("relu2_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dx, x, dout).Long(int64(n)))
}

// llamaFLOPs is FLOPs for the kernels of llama.cu (name without fleet_
// and the storage suffix), 0 for any other.
func llamaFLOPs(name string, arg func(param string) float64) float64 {
	qk := func() float64 { return arg("B") * arg("T") * (arg("H") + arg("KVH")) * arg("HD") }
	norm := 0.0 // QK-norm's, where its weights are given
	if arg("qw") != 0 {
		norm = 1
	}
	switch name {
	case "rmsnorm": // the square and its sum, then x·rstd·w
		return 4 * arg("rows") * arg("cols")
	case "add_rmsnorm": // the masked add, then the RMSNorm
		return 6 * arg("rows") * arg("cols")
	case "rmsnorm_backward": // dx: g·w·x̂ and its sum, rstd·(g·w − x̂·s), dres (the masked copy: one more); dw's partials; their sums
		return 12*arg("rows")*arg("cols") + math.Ceil(arg("rows")/max(arg("chunkRows"), 1))*arg("cols")
	case "rotary": // QK-norm (4 an element), then the rotation (3)
		return (3 + 4*norm) * qk()
	case "rotary_backward": // the rotation's transpose (3), then QK-norm's backward pass and its weights' partials (9)
		return (3 + 9*norm) * qk()
	case "rotary_backward_dw":
		return 2 * arg("nparts") * arg("HD")
	case "swiglu": // the exp, 1 + e, the division, two products
		return 5 * arg("rows") * arg("hidden")
	case "swiglu_backward":
		return 12 * arg("rows") * arg("hidden")
	case "relu2": // the max, the square
		return 2 * arg("n")
	case "relu2_backward": // the max, two products
		return 3 * arg("n")
	}
	return 0
}

// llamaExtent is Extent for the kernels of llama.cu (name without fleet_
// and the storage suffix), as their comments' Traffic lines say: each
// activation read or written once (a row's second read comes from
// cache), the weights and the rotary table's rows of the positions once a
// launch. A null pointer (an absent operand) costs nothing.
func llamaExtent(name, param string, arg func(param string) float64) (elems, passes float64, ok bool) {
	a := arg
	rc := func() float64 { return a("rows") * a("cols") }
	btw := func() float64 { return a("B") * a("T") * (a("H") + 2*a("KVH")) * a("HD") } // a packed qkv
	bth := func() float64 { return a("B") * a("T") * (a("H") + a("KVH")) }             // its q and k heads
	switch name + "." + param {
	case "rmsnorm.out", "rmsnorm.x",
		"add_rmsnorm.sum", "add_rmsnorm.out", "add_rmsnorm.x", "add_rmsnorm.y",
		"rmsnorm_backward.dx", "rmsnorm_backward.dres", "rmsnorm_backward.dout", "rmsnorm_backward.x", "rmsnorm_backward.ddrop":
		return rc(), 1, true
	case "rmsnorm.rstd", "add_rmsnorm.rstd", "rmsnorm_backward.rstd":
		return a("rows"), 1, true
	case "rmsnorm.w", "add_rmsnorm.w", "rmsnorm_backward.w":
		return a("cols"), 1, true
	case "add_rmsnorm.seedBase", "rmsnorm_backward.seedBase":
		return 2, 1, true
	case "rmsnorm_backward.dw": // accumulated: read and written
		return a("cols"), 2, true
	case "rmsnorm_backward.part": // the partials written and read
		return math.Ceil(a("rows")/max(a("chunkRows"), 1)) * a("cols"), 2, true
	case "rmsnorm_backward.done": // a counter per 32 columns, counted up and set back to 0
		return math.Ceil(a("cols") / 32), 2, true
	case "rotary.out", "rotary.qkv", "rotary_backward.dqkv", "rotary_backward.dout":
		return btw(), 1, true
	case "rotary_backward.qkv": // QK-norm's backward reads the q and k heads
		return bth() * a("HD"), 1, true
	case "rotary.rstd", "rotary_backward.rstd":
		return bth(), 1, true
	case "rotary.qw", "rotary.kw", "rotary_backward.qw", "rotary_backward.kw":
		return a("HD"), 1, true
	case "rotary.table", "rotary_backward.table": // the cos and sin of T positions
		return a("T") * a("HD"), 1, true
	case "rotary_backward.part": // written here, read by the dw kernel
		return math.Ceil(a("B")*a("T")/max(a("chunkRows"), 1)) * 2 * a("HD"), 1, true
	case "rotary_backward_dw.part":
		return a("nparts") * 2 * a("HD"), 1, true
	case "rotary_backward_dw.dqw", "rotary_backward_dw.dkw":
		return a("HD"), 2, true
	case "swiglu.gu", "swiglu_backward.gu", "swiglu_backward.dgu":
		return 2 * a("rows") * a("hidden"), 1, true
	case "swiglu.out", "swiglu_backward.dout":
		return a("rows") * a("hidden"), 1, true
	case "relu2.out", "relu2.x", "relu2_backward.dx", "relu2_backward.x", "relu2_backward.dout":
		return a("n"), 1, true
	}
	return 0, 0, false
}
