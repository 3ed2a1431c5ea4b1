package kernels

import (
	"fmt"
	"math"
	"sync"

	"github.com/fleetml/fleet/backend"
)

// Launcher runs one kernel launch. The same op functions below drive a
// real GPU and the CPU emulation harness through it.
//
// Buffers are of the launcher's type B and opaque to this package: each op
// passes them through as they came (a device pointer, an emulator buffer),
// and B's zero value stands for an optional operand left out, which the
// launcher must pass to the kernel as a null pointer. The arguments come
// in the kernel's parameter order, scalars as the C types of its
// parameters (see Args). Kernels are named by their full symbol, e.g.
// "fleet_softmax_bf16". The arguments are a value, so a launch allocates
// nothing.
type Launcher[B comparable] interface {
	Launch(kernel string, grid, block [3]int, sharedBytes int, args Args[B]) error
}

// SMCounter is implemented by a Launcher that knows its device's number
// of streaming multiprocessors. Grid-stride kernels cap their grids at
// BlocksPerSM blocks per SM; a Launcher without the method is taken to
// drive DefaultSMCount SMs. The SM count changes only launch shapes, never
// results: every reduction is split by the shape of its operands alone.
type SMCounter interface {
	SMCount() int
}

// Launch-shape constants shared by the op functions.
const (
	// BlockSize is the number of threads in every block these ops launch.
	BlockSize = 256
	// BlocksPerSM caps grid-stride grids: 8 blocks of 256 threads fill an
	// H100/H200 SM's 2048 threads.
	BlocksPerSM = 8
	// DefaultSMCount is an H100 SXM's or an H200's SM count.
	DefaultSMCount = 132
	// ChunkRows is how many rows each partial sum of SumRows and of
	// LayerNormBackward's dw and db covers.
	ChunkRows = 256
	// sumSquaresPerPart is the fewest elements per SumSquares partial sum;
	// maxSumSquaresParts bounds the number of partials.
	sumSquaresPerPart  = 16 * BlockSize
	maxSumSquaresParts = 1024
	// maxGridY is CUDA's limit on gridDim.y.
	maxGridY = 65535
)

var block1D = [3]int{BlockSize, 1, 1}

// TensorCorer is implemented by a Launcher that knows whether its device
// multiplies bf16 on tensor cores with mma.sync m16n8k16 (compute
// capability 8.0 on). Attention with bf16 products (BF16 storage, or F32
// with Attention.Round BF16) runs on the tensor-core kernels there, and on
// the CUDA-core kernels, in F32 arithmetic, elsewhere; a Launcher without
// the method is taken to have them.
type TensorCorer interface {
	TensorCores() bool
}

func tensorCores(l any) bool {
	if s, ok := l.(TensorCorer); ok {
		return s.TensorCores()
	}
	return true
}

func smCount(l any) int {
	if s, ok := l.(SMCounter); ok && s.SMCount() > 0 {
		return s.SMCount()
	}
	return DefaultSMCount
}

// gridFor returns the number of blocks for units of work, perBlock of them
// per block, capped at BlocksPerSM blocks per SM (the kernels loop over the
// rest). units must be positive.
func gridFor[B comparable](l Launcher[B], units int64, perBlock int) [3]int {
	g := (units + int64(perBlock) - 1) / int64(perBlock)
	g = min(g, int64(smCount(l)*BlocksPerSM))
	return [3]int{int(max(g, 1)), 1, 1}
}

// suffix names a storage dtype in kernel names.
func suffix(dt backend.DType) string {
	switch dt {
	case backend.F32:
		return "f32"
	case backend.BF16:
		return "bf16"
	case backend.F16:
		return "f16"
	case backend.I32:
		return "i32"
	}
	return dt.String()
}

// names holds the kernel names made so far: "fleet_<op>_<dt>", or with a
// second dtype "fleet_<op>_<dt>_<dt2>" (a cast). A launch looks its name
// up instead of concatenating it, which would allocate every launch.
var names = struct {
	sync.RWMutex
	m map[nameKey]string
}{m: map[nameKey]string{}}

type nameKey struct {
	op      string
	dt, dt2 backend.DType
}

// name returns the kernel name of op for dt (and dt2 where not 0).
func name(op string, dt, dt2 backend.DType) string {
	k := nameKey{op, dt, dt2}
	names.RLock()
	s, ok := names.m[k]
	names.RUnlock()
	if ok {
		return s
	}
	s = "fleet_" + op + "_" + suffix(dt)
	if dt2 != 0 {
		s += "_" + suffix(dt2)
	}
	names.Lock()
	names.m[k] = s
	names.Unlock()
	return s
}

// kernel returns "fleet_<op>_<dtype>", or an error when dt is not among
// those the op has kernels for.
func kernel(op string, dt backend.DType, have ...backend.DType) (string, error) {
	for _, h := range have {
		if h == dt {
			return name(op, dt, 0), nil
		}
	}
	return "", fmt.Errorf("kernels: %s: no kernel for %v storage", op, dt)
}

// checkSizes fails unless every size is in [0, limit].
func checkSizes(op string, limit int64, sizes ...int) error {
	for _, s := range sizes {
		if s < 0 || int64(s) > limit {
			return fmt.Errorf("kernels: %s: size %d out of range [0, %d]", op, s, limit)
		}
	}
	return nil
}

// checkInt fails unless every size fits a kernel's int parameter (row and
// column counts; element offsets inside kernels are long long).
func checkInt(op string, sizes ...int) error { return checkSizes(op, math.MaxInt32, sizes...) }

var (
	floatTypes = []backend.DType{backend.F32, backend.BF16}
	f32Only    = []backend.DType{backend.F32}
)

// elementwise launches a grid-stride kernel over n elements.
func elementwise[B comparable](l Launcher[B], name string, n int, args Args[B]) error {
	if n < 0 {
		return fmt.Errorf("kernels: %s: negative size %d", name, n)
	}
	if n == 0 {
		return nil
	}
	return l.Launch(name, gridFor(l, int64(n), BlockSize), block1D, 0, args)
}

// Fill sets n elements of dst (F32, BF16, F16 or I32) to v, rounded to
// nearest even for 16-bit types and truncated toward zero for I32. As in the
// CPU backend, an F32 fill with zero stores +0 even for v = -0.
func Fill[B comparable](l Launcher[B], dt backend.DType, dst B, v float32, n int) error {
	k, err := kernel("fill", dt, backend.F32, backend.BF16, backend.F16, backend.I32)
	if err != nil {
		return err
	}
	if dt == backend.F32 && v == 0 {
		v = 0
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dst).Float(v).Long(int64(n)))
}

// Binary computes dst[i] = a[i] op b[i] for n F32 or BF16 elements; dst
// may alias a or b.
func Binary[B comparable](l Launcher[B], dt backend.DType, op backend.BinaryOp, dst, a, b B, n int) error {
	k, err := kernel("binary", dt, floatTypes...)
	if err != nil {
		return err
	}
	if op > backend.Div {
		return fmt.Errorf("kernels: binary: unknown op %d", op)
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dst, a, b).Int(int32(op)).Long(int64(n)))
}

// DropoutAdd computes dst[i] = x[i] + y[i]*m.Factor(i) for n F32 or BF16
// elements, or y[i]*m.Factor(i) where x is nil (backend.DropoutAdd); dst
// may alias x or y. base (the zero buffer for none) is m.Base.
func DropoutAdd[B comparable](l Launcher[B], dt backend.DType, dst, x, y B, n int, m backend.DropoutMask, base B) error {
	k, err := kernel("dropout_add", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dst, x, y).Long(int64(m.Seed)).Long(m.Offset).Int(int32(m.Site)).Uint(m.Threshold).Float(m.Scale).Long(int64(n)).Buf(base))
}

// StepDropoutKey writes a replayed step's dropout key
// (backend.Backend.StepDropoutKey; see step.cu).
func StepDropoutKey[B comparable](l Launcher[B], key, stats B, seed uint64) error {
	return l.Launch("fleet_step_dropout_key_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, *new(Args[B]).Buf(key, stats).Long(int64(seed)))
}

// Axpy computes dst[i] += alpha*x[i] for n F32 or BF16 elements.
func Axpy[B comparable](l Launcher[B], dt backend.DType, dst, x B, alpha float32, n int) error {
	k, err := kernel("axpy", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dst, x).Float(alpha).Long(int64(n)))
}

// Scale computes dst[i] = alpha*src[i] for n F32 or BF16 elements; dst may
// alias src.
func Scale[B comparable](l Launcher[B], dt backend.DType, dst, src B, alpha float32, n int) error {
	k, err := kernel("scale", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dst, src).Float(alpha).Long(int64(n)))
}

// Unary computes dst[i] = op(src[i]) for n F32 or BF16 elements; dst may
// alias src.
func Unary[B comparable](l Launcher[B], dt backend.DType, op backend.UnaryOp, dst, src B, n int) error {
	k, err := kernel("unary", dt, floatTypes...)
	if err != nil {
		return err
	}
	if op > backend.Sqrt {
		return fmt.Errorf("kernels: unary: unknown op %d", op)
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dst, src).Int(int32(op)).Long(int64(n)))
}

// Cast converts n elements from src (of type from: F32, BF16, F16 or I32)
// into dst (of type to: F32, BF16 or F16), bit for bit as the CPU backend.
// Equal types are a copy, which the caller does with a memcpy; Cast
// refuses them.
func Cast[B comparable](l Launcher[B], to, from backend.DType, dst, src B, n int) error {
	ok := func(dt backend.DType, set ...backend.DType) bool {
		for _, s := range set {
			if s == dt {
				return true
			}
		}
		return false
	}
	if to == from || !ok(from, backend.F32, backend.BF16, backend.F16, backend.I32) || !ok(to, backend.F32, backend.BF16, backend.F16) {
		return fmt.Errorf("kernels: cast: no kernel from %v to %v", from, to)
	}
	return elementwise(l, name("cast", from, to), n, *new(Args[B]).Buf(dst, src).Long(int64(n)))
}

// GELU computes dst = gelu(src) (tanh approximation) for n F32 or BF16
// elements; dst may alias src.
func GELU[B comparable](l Launcher[B], dt backend.DType, dst, src B, n int) error {
	k, err := kernel("gelu", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dst, src).Long(int64(n)))
}

// BiasGELU adds bias [cols] to each row of pre [rows, cols] in place and
// writes h = gelu(pre), F32 or BF16, in one pass (fleet_bias_gelu_<dt>).
func BiasGELU[B comparable](l Launcher[B], dt backend.DType, pre, h, bias B, rows, cols int) error {
	k, err := kernel("bias_gelu", dt, floatTypes...)
	if err != nil {
		return err
	}
	if rows < 0 || cols < 1 || int64(rows)*int64(cols) > math.MaxInt32 {
		return fmt.Errorf("bias_gelu: bad shape %d×%d", rows, cols)
	}
	return elementwise(l, k, rows*cols, *new(Args[B]).Buf(pre, h, bias).Int(int32(rows), int32(cols)))
}

// GELUBackward computes dx = dy*gelu'(x) for n F32 or BF16 elements; dx
// may alias dy.
func GELUBackward[B comparable](l Launcher[B], dt backend.DType, dx, x, dy B, n int) error {
	k, err := kernel("gelu_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, *new(Args[B]).Buf(dx, x, dy).Long(int64(n)))
}

// AdamWConsts are one AdamW step's per-element constants, folded on the
// host from the hyperparameters exactly as the CPU backend folds them.
type AdamWConsts struct {
	B1, C1, B2, C2, InvBC2Sqrt, Eps, Decay, StepSize float32
}

// AdamWFold folds p into the constants the AdamW kernel takes.
func AdamWFold(p backend.AdamW) AdamWConsts {
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	return AdamWConsts{
		B1: p.Beta1, C1: 1 - p.Beta1, B2: p.Beta2, C2: 1 - p.Beta2,
		InvBC2Sqrt: float32(1 / math.Sqrt(bc2)), Eps: p.Eps,
		Decay: 1 - p.LR*p.WeightDecay, StepSize: float32(float64(p.LR) / bc1),
	}
}

// AdamW updates n F32 parameters in place, with their F32 gradients and
// moment estimates m and v (both updated). gradScale (nil: none) is a
// device F32 scalar the gradients are multiplied by; one that is not
// finite skips the step. Elements from p.DecayEnd on (where positive) take
// no weight decay.
func AdamW[B comparable](l Launcher[B], p backend.AdamW, param, grad, m, v, gradScale B, n int) error {
	var none B
	return AdamWSched(l, p, param, grad, m, v, gradScale, none, none, n)
}

// AdamWSched is AdamW with the learning rate and the step's constants
// read on the device from sched (three F32: lr, stepSize, invBC2Sqrt;
// nil: from p), as backend.AdamW.Sched says, and, where half is not nil,
// the updated parameters rounded to bf16 written there too
// (backend.AdamW.Half).
func AdamWSched[B comparable](l Launcher[B], p backend.AdamW, param, grad, m, v, gradScale, sched, half B, n int) error {
	var none B
	if p.Step <= 0 && sched != none {
		p.Step = 1 // the host's fold is unused; keep it finite
	}
	k := AdamWFold(p)
	return elementwise(l, "fleet_adamw_f32", n, *new(Args[B]).Buf(param, grad, m, v, gradScale).Float(k.B1, k.C1, k.B2, k.C2, k.InvBC2Sqrt, k.Eps, k.Decay, k.StepSize).Long(int64(p.DecayEnd)).Long(int64(n)).Buf(sched).Float(p.WeightDecay).Buf(half))
}

// TrackLoss adds x[0]*scale into stats[0] and records step in stats[1]
// the first time x[0] is not finite (see step.cu).
func TrackLoss[B comparable](l Launcher[B], stats, x B, scale float32, step int) error {
	return l.Launch("fleet_track_loss_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, *new(Args[B]).Buf(stats, x).Float(scale).Int(int32(step)))
}

// ClipCoef writes the gradient norm from its sum of squares into stats[2]
// and the coefficient that clips it to maxNorm into coef[0] (see step.cu).
func ClipCoef[B comparable](l Launcher[B], coef, stats, sumsq B, maxNorm float64, step int) error {
	return l.Launch("fleet_clip_coef_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, *new(Args[B]).Buf(coef, stats, sumsq).Double(maxNorm).Int(int32(step)))
}

// ScalerCoef is fp16's loss-scaling step on the device with the clip
// (backend.Scaler; see step.cu). state holds backend.ScalerStateLen F32,
// lrs s.NLR.
func ScalerCoef[B comparable](l Launcher[B], coef, stats, sumsq, state, lrs B, maxNorm float64, step int, s backend.Scaler) error {
	if s.NLR <= 0 {
		return fmt.Errorf("kernels: scaler: an empty learning-rate table")
	}
	return l.Launch("fleet_scaler_coef_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, *new(Args[B]).Buf(coef, stats, sumsq, state, lrs).Double(maxNorm).Int(int32(step), int32(s.NLR), int32(s.GrowthInterval)).Float(s.SeedFactor, s.Beta1, s.Beta2))
}

// StepClock starts a step replayed from a graph (backend.Backend.StepClock;
// see step.cu). sched may be the zero buffer.
func StepClock[B comparable](l Launcher[B], stats, sched, lrs B, nlr int, beta1, beta2 float32) error {
	if nlr <= 0 {
		var none B
		if sched != none {
			return fmt.Errorf("kernels: step clock: an empty learning-rate table")
		}
	}
	return l.Launch("fleet_step_clock_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, *new(Args[B]).Buf(stats, sched, lrs).Int(int32(nlr)).Float(beta1, beta2))
}

// rowsGrid is the grid of a warp-per-row kernel over rows rows.
func rowsGrid[B comparable](l Launcher[B], rows int) [3]int {
	return gridFor(l, int64(rows), BlockSize/32)
}

// chunkRows is ChunkRows; tests lower it to reach several chunks with
// few rows.
var chunkRows = ChunkRows

// chunks is the number of chunkRows-row partial sums over rows rows.
func chunks(rows int) int { return (rows + chunkRows - 1) / chunkRows }

// SumRowsScratch is the number of F32 elements of scratch SumRows needs.
func SumRowsScratch(rows, cols int) int { return chunks(rows) * cols }

// SumRows computes dst[j] = beta*dst[j] + sum_i src[i*cols+j] over a
// rows×cols src (F32 or BF16) into an F32 dst. beta == 0 overwrites dst
// whatever it held. scratch holds SumRowsScratch(rows, cols) F32 elements
// (it may be nil when that is 0). Column sums over fixed chunks of
// ChunkRows rows are added in chunk order: deterministic, no atomics.
func SumRows[B comparable](l Launcher[B], dt backend.DType, dst, src, scratch B, rows, cols int, beta float32) error {
	k, err := kernel("sumrows_partial", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("sumrows", rows, cols); err != nil {
		return err
	}
	if cols == 0 {
		return nil
	}
	nc := chunks(rows)
	if nc > maxGridY {
		return fmt.Errorf("kernels: sumrows: %d rows is over %d chunks of %d", rows, maxGridY, chunkRows)
	}
	if nc > 0 {
		grid := [3]int{(cols + 31) / 32, nc, 1}
		if err := l.Launch(k, grid, block1D, 0, *new(Args[B]).Buf(scratch, src).Int(int32(rows), int32(cols), int32(chunkRows))); err != nil {
			return err
		}
	}
	return l.Launch("fleet_colsum_f32", gridFor(l, int64(cols), BlockSize), block1D, 0, *new(Args[B]).Buf(dst, scratch).Int(int32(nc), int32(cols)).Float(beta))
}

// SumCols computes dst[i] = alpha * sum_j src[i*cols+j] for an F32
// rows×cols src.
func SumCols[B comparable](l Launcher[B], dt backend.DType, dst, src B, rows, cols int, alpha float32) error {
	k, err := kernel("sumcols", dt, f32Only...)
	if err != nil {
		return err
	}
	if err := checkInt("sumcols", rows, cols); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, *new(Args[B]).Buf(dst, src).Int(int32(rows), int32(cols)).Float(alpha))
}

// sumSquaresParts is the number of partial sums SumSquares splits n
// elements into: about one per sumSquaresPerPart elements, at most
// maxSumSquaresParts. It depends on n alone.
func sumSquaresParts(n int) int {
	return int(min(max((int64(n)+sumSquaresPerPart-1)/sumSquaresPerPart, 1), maxSumSquaresParts))
}

// SumSquaresScratch is the number of F32 elements of scratch SumSquares needs.
func SumSquaresScratch(n int) int {
	if n <= 0 {
		return 0
	}
	return sumSquaresParts(n)
}

// SumSquares writes dst[0] = beta*dst[0] + sum_i src[i]^2 over n F32
// elements (dst F32; with beta 0 it is not read). scratch holds
// SumSquaresScratch(n) F32 elements. Each of a fixed number of blocks (set
// by n) sums a grid-strided share, then one block adds the partials in a
// fixed tree: deterministic, no atomics.
func SumSquares[B comparable](l Launcher[B], dt backend.DType, dst, src, scratch B, n int, beta float32) error {
	k, err := kernel("sumsquares_partial", dt, f32Only...)
	if err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("kernels: sumsquares: negative size %d", n)
	}
	if n == 0 {
		if beta == 1 {
			return nil
		}
		// No partials: the finish scales dst alone.
		return l.Launch("fleet_sumsquares_finish_f32", [3]int{1, 1, 1}, block1D, 0, *new(Args[B]).Buf(dst, scratch).Int(int32(0)).Float(beta))
	}
	parts := sumSquaresParts(n)
	if err := l.Launch(k, [3]int{parts, 1, 1}, block1D, 0, *new(Args[B]).Buf(scratch, src).Long(int64(n))); err != nil {
		return err
	}
	return l.Launch("fleet_sumsquares_finish_f32", [3]int{1, 1, 1}, block1D, 0, *new(Args[B]).Buf(dst, scratch).Int(int32(parts)).Float(beta))
}

// Softmax computes a softmax over each row of a rows×cols F32 or BF16 src
// into dst (not aliased).
func Softmax[B comparable](l Launcher[B], dt backend.DType, dst, src B, rows, cols int) error {
	k, err := kernel("softmax", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("softmax", rows, cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, *new(Args[B]).Buf(dst, src).Int(int32(rows), int32(cols)))
}

// SoftmaxBackward computes dx = y*(dy - sum(dy*y)) over each row.
func SoftmaxBackward[B comparable](l Launcher[B], dt backend.DType, dx, y, dy B, rows, cols int) error {
	k, err := kernel("softmax_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("softmax backward", rows, cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, *new(Args[B]).Buf(dx, y, dy).Int(int32(rows), int32(cols)))
}

// LayerNorm normalises each row of a rows×cols x into out (both of storage
// dt, F32 or BF16), with F32 w, optional b (nil) and F32 mean and rstd
// (rows each; nil skips saving them).
func LayerNorm[B comparable](l Launcher[B], dt backend.DType, out, mean, rstd, x, w, b B, rows, cols int, eps float32) error {
	k, err := kernel("layernorm", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("layernorm", rows, cols); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, *new(Args[B]).Buf(out, mean, rstd, x, w, b).Int(int32(rows), int32(cols)).Float(eps))
}

// AddLayerNorm is DropoutAdd (sum = x + y*m.Factor, x nil: y*m.Factor; base
// m.Base) then LayerNorm of sum (out, mean, rstd), in one launch with the
// same bits (backend.Backend.AddLayerNorm).
func AddLayerNorm[B comparable](l Launcher[B], dt backend.DType, sum, out, mean, rstd, x, y, w, b B, rows, cols int, eps float32, m backend.DropoutMask, base B) error {
	k, err := kernel("add_layernorm", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("add_layernorm", rows, cols); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, *new(Args[B]).Buf(sum, out, mean, rstd, x, y, w, b).Int(int32(rows), int32(cols)).Float(eps).
		Long(int64(m.Seed)).Long(m.Offset).Int(int32(m.Site)).Uint(m.Threshold).Float(m.Scale).Buf(base))
}

// LNChunkRows is the rows each block of LayerNormBackward owns: its dx,
// and one partial sum of dw and db. 64 rows a block gives GPT-2's 16,384
// rows 256 blocks.
const LNChunkRows = 64

// lnChunkRows is LNChunkRows; tests lower it to reach several chunks
// with few rows.
var lnChunkRows = LNChunkRows

// lnChunks is the number of blocks, and partial sums, of LayerNormBackward
// over rows rows.
func lnChunks(rows int) int { return (rows + lnChunkRows - 1) / lnChunkRows }

// LayerNormBackwardScratch is the number of F32 elements of scratch
// LayerNormBackward needs: the partial sums of dw and db, a row of each per
// chunk of rows.
func LayerNormBackwardScratch(rows, cols int) int { return 2 * lnChunks(rows) * cols }

// LayerNormBackwardCounters is the number of 32-bit counters
// LayerNormBackward needs for cols columns (one per 32): they must be zero
// before the first launch, and every launch leaves them zero, so the
// caller keeps them for the device's life.
func LayerNormBackwardCounters(cols int) int { return (cols + 31) / 32 }

// LayerNormBackward writes dx (plus dres, unless dres is nil; it must not
// overlap dx) and accumulates into dw and db (db may be nil) for a
// LayerNorm over rows×cols, in one launch of fleet_layernorm_backward_<dt>:
// dx, dres, dout and x have storage dt (F32 or BF16); mean, rstd, w, dw
// and db are F32. Unless ddrop is nil, it also gets dx masked by m
// (storage dt). scratch holds LayerNormBackwardScratch(rows, cols) F32
// elements, done LayerNormBackwardCounters(cols) counters, zero. dw and db
// are summed over fixed chunks of LNChunkRows rows, then the chunks are
// added in order: deterministic, the only atomic an integer count of the
// chunks done.
func LayerNormBackward[B comparable](l Launcher[B], dt backend.DType, dx, dres, dw, db, dout, x, mean, rstd, w, scratch, done B, rows, cols int, ddrop B, m backend.DropoutMask, base B) error {
	k, err := kernel("layernorm_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("layernorm backward", rows, cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	grid := [3]int{lnChunks(rows), 1, 1}
	return l.Launch(k, grid, block1D, 0, *new(Args[B]).Buf(dx, dres, dw, db, scratch, done, dout, x, mean, rstd, w).
		Int(int32(rows), int32(cols), int32(lnChunkRows)).Buf(ddrop).Long(int64(m.Seed)).Long(m.Offset).Int(int32(m.Site)).Uint(m.Threshold).Float(m.Scale).Buf(base))
}

// CrossEntropy writes losses[r] = lse[r] - logits[r, targets[r]] and the
// log-sum-exp lse[r] of each row of n×v logits (F32 or BF16; losses and lse
// F32, targets I32). Rows whose target is outside [0, v) get loss 0.
func CrossEntropy[B comparable](l Launcher[B], dt backend.DType, losses, lse, logits, targets B, n, v int) error {
	k, err := kernel("crossentropy", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkSizes("crossentropy", math.MaxInt32-BlockSize, n, v); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return l.Launch(k, gridFor(l, int64(n), 1), block1D, 0, *new(Args[B]).Buf(losses, lse, logits, targets).Int(int32(n), int32(v)))
}

// CrossEntropyBackward writes dlogits = dloss[0]*scale*(softmax(logits) -
// onehot(target)) for n×v logits and dlogits of storage dt, using the
// forward's lse; rows with an out-of-range target get zeros.
func CrossEntropyBackward[B comparable](l Launcher[B], dt backend.DType, dlogits, logits, lse, targets, dloss B, scale float32, n, v int) error {
	k, err := kernel("crossentropy_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkSizes("crossentropy backward", math.MaxInt32-BlockSize, n, v); err != nil {
		return err
	}
	if n == 0 || v == 0 {
		return nil
	}
	return l.Launch(k, gridFor(l, int64(n), 1), block1D, 0, *new(Args[B]).Buf(dlogits, logits, lse, targets, dloss).Float(scale).Int(int32(n), int32(v)))
}

// CrossEntropyFusedCache bounds the bytes of the rows that
// CrossEntropyFused's blocks hold in flight (a block owns a row), so that
// each block's second sweep over its row finds it in L2: 24 MiB, under
// half of an H100's 50 MB L2 (an A100's is 40 MB).
const CrossEntropyFusedCache = 24 << 20

// CrossEntropyFused is CrossEntropy's losses and CrossEntropyBackward's
// dlogits (with g = dloss[0]*scale) in one launch, the same values as the
// two: the classifier of a training step, where dloss holds the gradient
// the loss will be differentiated with when the kernel runs. dlogits may
// be logits. The grid keeps CrossEntropyFusedCache bytes of rows in
// flight, at least one row per SM.
func CrossEntropyFused[B comparable](l Launcher[B], dt backend.DType, losses, dlogits, logits, targets, dloss B, scale float32, n, v int) error {
	k, err := kernel("crossentropy_fused", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkSizes("crossentropy fused", math.MaxInt32-BlockSize, n, v); err != nil {
		return err
	}
	if n == 0 || v == 0 {
		return nil
	}
	rows := max(int64(CrossEntropyFusedCache/(v*dt.Size())), int64(smCount(l)))
	grid := gridFor(l, min(int64(n), rows), 1)
	return l.Launch(k, grid, block1D, 0, *new(Args[B]).Buf(losses, dlogits, logits, targets, dloss).Float(scale).Int(int32(n), int32(v)))
}

// Embedding gathers out[i] = table[ids[i]] (rows dim wide) for n tokens
// from an F32 table of vocab rows into out of storage dt (F32 or BF16).
// A token whose id is outside [0, vocab) gets a row of zeros.
func Embedding[B comparable](l Launcher[B], dt backend.DType, out, table, ids B, n, dim, vocab int) error {
	k, err := kernel("embedding", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("embedding", n, dim, vocab); err != nil {
		return err
	}
	if n == 0 || dim == 0 {
		return nil
	}
	return l.Launch(k, gridFor(l, int64(n), 1), block1D, 0, *new(Args[B]).Buf(out, table, ids).Int(int32(n), int32(dim), int32(vocab)))
}

// EmbeddingBackward accumulates dtable[ids[i]] += dout[i] for i in token
// order, dtable F32 (vocab rows of dim), dout of storage dt (F32 or BF16).
// Tokens with ids outside [0, vocab) are skipped. Each element of dtable is
// owned by one thread: deterministic, no atomics, equal to the CPU's sums.
func EmbeddingBackward[B comparable](l Launcher[B], dt backend.DType, dtable, dout, ids B, n, dim, vocab int) error {
	k, err := kernel("embedding_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	if err := checkInt("embedding backward", n, dim, vocab); err != nil {
		return err
	}
	if n == 0 || dim == 0 || vocab == 0 {
		return nil
	}
	colBlocks := (dim + BlockSize - 1) / BlockSize
	buckets := min(vocab, maxGridY, max(1, smCount(l)*BlocksPerSM/colBlocks))
	return l.Launch(k, [3]int{colBlocks, buckets, 1}, block1D, 0, *new(Args[B]).Buf(dtable, dout, ids).Int(int32(n), int32(dim), int32(vocab)))
}
