package kernels

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/backend"
)

// Launcher runs one kernel launch. The same op functions below drive a
// real GPU and the CPU emulation harness through it.
//
// Buffers are opaque to this package: each op passes them through as they
// came (a device pointer, an emulator buffer), and a nil buffer stands for
// an optional operand left out, which the launcher must pass to the kernel
// as a null pointer. Scalars are passed as int32 (C int), int64 (long long)
// or float32 (float), matching each kernel's parameter types. Kernels are
// named by their full symbol, e.g. "fleet_softmax_bf16".
type Launcher interface {
	Launch(kernel string, grid, block [3]int, sharedBytes int, args ...any) error
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

func smCount(l Launcher) int {
	if s, ok := l.(SMCounter); ok && s.SMCount() > 0 {
		return s.SMCount()
	}
	return DefaultSMCount
}

// gridFor returns the number of blocks for units of work, perBlock of them
// per block, capped at BlocksPerSM blocks per SM (the kernels loop over the
// rest). units must be positive.
func gridFor(l Launcher, units int64, perBlock int) [3]int {
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

// kernel returns "fleet_<op>_<dtype>", or an error when dt is not among
// those the op has kernels for.
func kernel(op string, dt backend.DType, have ...backend.DType) (string, error) {
	for _, h := range have {
		if h == dt {
			return "fleet_" + op + "_" + suffix(dt), nil
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
func elementwise(l Launcher, name string, n int, args ...any) error {
	if n < 0 {
		return fmt.Errorf("kernels: %s: negative size %d", name, n)
	}
	if n == 0 {
		return nil
	}
	return l.Launch(name, gridFor(l, int64(n), BlockSize), block1D, 0, args...)
}

// Fill sets n elements of dst (F32, BF16, F16 or I32) to v, rounded to
// nearest even for 16-bit types and truncated toward zero for I32. As in the
// CPU backend, an F32 fill with zero stores +0 even for v = -0.
func Fill(l Launcher, dt backend.DType, dst any, v float32, n int) error {
	k, err := kernel("fill", dt, backend.F32, backend.BF16, backend.F16, backend.I32)
	if err != nil {
		return err
	}
	if dt == backend.F32 && v == 0 {
		v = 0
	}
	return elementwise(l, k, n, dst, v, int64(n))
}

// Binary computes dst[i] = a[i] op b[i] for n F32 or BF16 elements; dst
// may alias a or b.
func Binary(l Launcher, dt backend.DType, op backend.BinaryOp, dst, a, b any, n int) error {
	k, err := kernel("binary", dt, floatTypes...)
	if err != nil {
		return err
	}
	if op > backend.Div {
		return fmt.Errorf("kernels: binary: unknown op %d", op)
	}
	return elementwise(l, k, n, dst, a, b, int32(op), int64(n))
}

// DropoutAdd computes dst[i] = x[i] + y[i]*m.Factor(i) for n F32 or BF16
// elements, or y[i]*m.Factor(i) where x is nil (backend.DropoutAdd); dst
// may alias x or y.
func DropoutAdd(l Launcher, dt backend.DType, dst, x, y any, n int, m backend.DropoutMask) error {
	k, err := kernel("dropout_add", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, dst, x, y, int64(m.Seed), int64(m.Threshold), m.Scale, int64(n))
}

// Axpy computes dst[i] += alpha*x[i] for n F32 or BF16 elements.
func Axpy(l Launcher, dt backend.DType, dst, x any, alpha float32, n int) error {
	k, err := kernel("axpy", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, dst, x, alpha, int64(n))
}

// Scale computes dst[i] = alpha*src[i] for n F32 or BF16 elements; dst may
// alias src.
func Scale(l Launcher, dt backend.DType, dst, src any, alpha float32, n int) error {
	k, err := kernel("scale", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, dst, src, alpha, int64(n))
}

// Unary computes dst[i] = op(src[i]) for n F32 or BF16 elements; dst may
// alias src.
func Unary(l Launcher, dt backend.DType, op backend.UnaryOp, dst, src any, n int) error {
	k, err := kernel("unary", dt, floatTypes...)
	if err != nil {
		return err
	}
	if op > backend.Sqrt {
		return fmt.Errorf("kernels: unary: unknown op %d", op)
	}
	return elementwise(l, k, n, dst, src, int32(op), int64(n))
}

// Cast converts n elements from src (of type from: F32, BF16, F16 or I32)
// into dst (of type to: F32, BF16 or F16), bit for bit as the CPU backend.
// Equal types are a copy, which the caller does with a memcpy; Cast
// refuses them.
func Cast(l Launcher, to, from backend.DType, dst, src any, n int) error {
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
	return elementwise(l, "fleet_cast_"+suffix(from)+"_"+suffix(to), n, dst, src, int64(n))
}

// GELU computes dst = gelu(src) (tanh approximation) for n F32 or BF16
// elements; dst may alias src.
func GELU(l Launcher, dt backend.DType, dst, src any, n int) error {
	k, err := kernel("gelu", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, dst, src, int64(n))
}

// GELUBackward computes dx = dy*gelu'(x) for n F32 or BF16 elements; dx
// may alias dy.
func GELUBackward(l Launcher, dt backend.DType, dx, x, dy any, n int) error {
	k, err := kernel("gelu_backward", dt, floatTypes...)
	if err != nil {
		return err
	}
	return elementwise(l, k, n, dx, x, dy, int64(n))
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
func AdamW(l Launcher, p backend.AdamW, param, grad, m, v, gradScale any, n int) error {
	return AdamWSched(l, p, param, grad, m, v, gradScale, nil, n)
}

// AdamWSched is AdamW with the learning rate and the step's constants
// read on the device from sched (three F32: lr, stepSize, invBC2Sqrt;
// nil: from p), as backend.AdamW.Sched says.
func AdamWSched(l Launcher, p backend.AdamW, param, grad, m, v, gradScale, sched any, n int) error {
	if p.Step <= 0 && sched != nil {
		p.Step = 1 // the host's fold is unused; keep it finite
	}
	k := AdamWFold(p)
	return elementwise(l, "fleet_adamw_f32", n, param, grad, m, v, gradScale,
		k.B1, k.C1, k.B2, k.C2, k.InvBC2Sqrt, k.Eps, k.Decay, k.StepSize, int64(p.DecayEnd), int64(n), sched, p.WeightDecay)
}

// TrackLoss adds x[0]*scale into stats[0] and records step in stats[1]
// the first time x[0] is not finite (see step.cu).
func TrackLoss(l Launcher, stats, x any, scale float32, step int) error {
	return l.Launch("fleet_track_loss_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, stats, x, scale, int32(step))
}

// ClipCoef writes the gradient norm from its sum of squares into stats[2]
// and the coefficient that clips it to maxNorm into coef[0] (see step.cu).
func ClipCoef(l Launcher, coef, stats, sumsq any, maxNorm float64, step int) error {
	return l.Launch("fleet_clip_coef_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, coef, stats, sumsq, maxNorm, int32(step))
}

// ScalerCoef is fp16's loss-scaling step on the device with the clip
// (backend.Scaler; see step.cu). state holds backend.ScalerStateLen F32,
// lrs s.NLR.
func ScalerCoef(l Launcher, coef, stats, sumsq, state, lrs any, maxNorm float64, step int, s backend.Scaler) error {
	if s.NLR <= 0 {
		return fmt.Errorf("kernels: scaler: an empty learning-rate table")
	}
	return l.Launch("fleet_scaler_coef_f32", [3]int{1, 1, 1}, [3]int{1, 1, 1}, 0, coef, stats, sumsq, state, lrs, maxNorm,
		int32(step), int32(s.NLR), int32(s.GrowthInterval), s.SeedFactor, s.Beta1, s.Beta2)
}

// rowsGrid is the grid of a warp-per-row kernel over rows rows.
func rowsGrid(l Launcher, rows int) [3]int { return gridFor(l, int64(rows), BlockSize/32) }

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
func SumRows(l Launcher, dt backend.DType, dst, src, scratch any, rows, cols int, beta float32) error {
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
		if err := l.Launch(k, grid, block1D, 0, scratch, src, int32(rows), int32(cols), int32(chunkRows)); err != nil {
			return err
		}
	}
	return l.Launch("fleet_colsum_f32", gridFor(l, int64(cols), BlockSize), block1D, 0, dst, scratch, int32(nc), int32(cols), beta)
}

// SumCols computes dst[i] = alpha * sum_j src[i*cols+j] for an F32
// rows×cols src.
func SumCols(l Launcher, dt backend.DType, dst, src any, rows, cols int, alpha float32) error {
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
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, dst, src, int32(rows), int32(cols), alpha)
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
func SumSquares(l Launcher, dt backend.DType, dst, src, scratch any, n int, beta float32) error {
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
		return l.Launch("fleet_sumsquares_finish_f32", [3]int{1, 1, 1}, block1D, 0, dst, scratch, int32(0), beta)
	}
	parts := sumSquaresParts(n)
	if err := l.Launch(k, [3]int{parts, 1, 1}, block1D, 0, scratch, src, int64(n)); err != nil {
		return err
	}
	return l.Launch("fleet_sumsquares_finish_f32", [3]int{1, 1, 1}, block1D, 0, dst, scratch, int32(parts), beta)
}

// Softmax computes a softmax over each row of a rows×cols F32 or BF16 src
// into dst (not aliased).
func Softmax(l Launcher, dt backend.DType, dst, src any, rows, cols int) error {
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
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, dst, src, int32(rows), int32(cols))
}

// SoftmaxBackward computes dx = y*(dy - sum(dy*y)) over each row.
func SoftmaxBackward(l Launcher, dt backend.DType, dx, y, dy any, rows, cols int) error {
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
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, dx, y, dy, int32(rows), int32(cols))
}

// LayerNorm normalises each row of a rows×cols x into out (both of storage
// dt, F32 or BF16), with F32 w, optional b (nil) and F32 mean and rstd
// (rows each; nil skips saving them).
func LayerNorm(l Launcher, dt backend.DType, out, mean, rstd, x, w, b any, rows, cols int, eps float32) error {
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
	return l.Launch(k, rowsGrid(l, rows), block1D, 0, out, mean, rstd, x, w, b, int32(rows), int32(cols), eps)
}

// LayerNormBackwardScratch is the number of F32 elements of scratch
// LayerNormBackward needs: the partial sums, then a counter per 32 columns.
func LayerNormBackwardScratch(rows, cols int) int { return 2*chunks(rows)*cols + (cols+31)/32 }

// LayerNormBackward writes dx (plus dres, unless dres is nil; it must not
// overlap dx) and accumulates into dw and db (db may be nil) for a
// LayerNorm over rows×cols, in two launches: dx, dres, dout and x have
// storage dt (F32 or BF16); mean, rstd, w, dw and db are F32. Unless ddrop
// is nil, it also gets dx masked by m (storage dt), in the dx launch. scratch holds
// LayerNormBackwardScratch(rows, cols) F32 elements. dw and db are summed
// over fixed chunks of ChunkRows rows, then the chunks are added in order:
// deterministic, the only atomic an integer count of the chunks done.
func LayerNormBackward(l Launcher, dt backend.DType, dx, dres, dw, db, dout, x, mean, rstd, w, scratch any, rows, cols int, ddrop any, m backend.DropoutMask) error {
	kdx, err := kernel("layernorm_backward_dx", dt, floatTypes...)
	if err != nil {
		return err
	}
	kdw, _ := kernel("layernorm_backward_dwdb", dt, floatTypes...)
	if err := checkInt("layernorm backward", rows, cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	nc := chunks(rows)
	if nc > maxGridY {
		return fmt.Errorf("kernels: layernorm backward: %d rows is over %d chunks of %d", rows, maxGridY, chunkRows)
	}
	if err := l.Launch(kdx, rowsGrid(l, rows), block1D, 0, dx, dres, scratch, int32(nc), dout, x, mean, rstd, w, int32(rows), int32(cols),
		ddrop, int64(m.Seed), int64(m.Threshold), m.Scale); err != nil {
		return err
	}
	grid := [3]int{(cols + 31) / 32, nc, 1}
	return l.Launch(kdw, grid, block1D, 0, dw, db, scratch, dout, x, mean, rstd, int32(rows), int32(cols), int32(chunkRows))
}

// CrossEntropy writes losses[r] = lse[r] - logits[r, targets[r]] and the
// log-sum-exp lse[r] of each row of n×v logits (F32 or BF16; losses and lse
// F32, targets I32). Rows whose target is outside [0, v) get loss 0.
func CrossEntropy(l Launcher, dt backend.DType, losses, lse, logits, targets any, n, v int) error {
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
	return l.Launch(k, gridFor(l, int64(n), 1), block1D, 0, losses, lse, logits, targets, int32(n), int32(v))
}

// CrossEntropyBackward writes dlogits = dloss[0]*scale*(softmax(logits) -
// onehot(target)) for n×v logits and dlogits of storage dt, using the
// forward's lse; rows with an out-of-range target get zeros.
func CrossEntropyBackward(l Launcher, dt backend.DType, dlogits, logits, lse, targets, dloss any, scale float32, n, v int) error {
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
	return l.Launch(k, gridFor(l, int64(n), 1), block1D, 0, dlogits, logits, lse, targets, dloss, scale, int32(n), int32(v))
}

// Embedding gathers out[i] = table[ids[i]] (rows dim wide) for n tokens
// from an F32 table of vocab rows into out of storage dt (F32 or BF16).
// A token whose id is outside [0, vocab) gets a row of zeros.
func Embedding(l Launcher, dt backend.DType, out, table, ids any, n, dim, vocab int) error {
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
	return l.Launch(k, gridFor(l, int64(n), 1), block1D, 0, out, table, ids, int32(n), int32(dim), int32(vocab))
}

// EmbeddingBackward accumulates dtable[ids[i]] += dout[i] for i in token
// order, dtable F32 (vocab rows of dim), dout of storage dt (F32 or BF16).
// Tokens with ids outside [0, vocab) are skipped. Each element of dtable is
// owned by one thread: deterministic, no atomics, equal to the CPU's sums.
func EmbeddingBackward(l Launcher, dt backend.DType, dtable, dout, ids any, n, dim, vocab int) error {
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
	return l.Launch(k, [3]int{colBlocks, buckets, 1}, block1D, 0, dtable, dout, ids, int32(n), int32(dim), int32(vocab))
}
