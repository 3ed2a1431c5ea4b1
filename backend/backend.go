package backend

import (
	"fmt"
	"sort"
	"sync"
)

// Storage is a block of device memory holding Len elements of one DType.
type Storage interface {
	Device() Device
	DType() DType
	Len() int
}

// PeakResetter is a Backend whose MemStats peak can be restarted from the
// memory allocated now, so that one phase of a process (a benchmark) can
// measure its own peak.
type PeakResetter interface {
	ResetPeak()
}

// Ref is a position in a Storage: kernels read and write elements
// S[Off], S[Off+1], ...
type Ref struct {
	S   Storage
	Off int
}

// Nil reports whether r refers to nothing (an optional operand left out).
func (r Ref) Nil() bool { return r.S == nil }

// MemStats describes a device's memory pool, in bytes.
type MemStats struct {
	Allocated int64 // held by live tensors
	Reserved  int64 // held by the pool, including cached free blocks
	Peak      int64 // highest Allocated seen
	Copied    int64 // host<->device bytes moved since start
	Total     int64 // the device's memory capacity; 0 where unknown
}

// Backend is one device's kernel set. Sizes are in elements. Unless a
// kernel's doc says otherwise, outputs are overwritten and operands do not
// alias. Float operands are F32, or BF16 where they are activations or
// their gradients (autocast's bf16 activations): the kernels compute in
// F32 and round what they store to BF16. Parameters (LayerNorm's w and b,
// embedding tables), their gradients and a kernel's statistics (mean,
// rstd, log-sum-exp, losses) stay F32.
type Backend interface {
	Device() Device
	// Alloc returns uninitialised storage for n elements, from the pool.
	Alloc(dt DType, n int) Storage
	// Free returns storage to the pool. It must not be used afterwards.
	Free(s Storage)
	MemStats() MemStats

	// Upload copies host bytes to dst: len(src)/dtype size elements of
	// dst's dtype, little-endian (AsBytes views a typed slice this way).
	// Download copies len(dst) bytes' worth of elements back to the host.
	Upload(dst Ref, src []byte)
	Download(dst []byte, src Ref)
	// Copy copies n elements; Cast converts n elements between dtypes.
	Copy(dst, src Ref, n int)
	Cast(dst, src Ref, n int)
	Fill(dst Ref, v float32, n int)

	// MatMul computes, for each batch b,
	// C[b] = alpha * op(A[b]) @ op(B[b]) + beta * C[b] (+ bias broadcast over rows).
	// A and B are both F32, or both BF16 with alpha 1 (products accumulate
	// in F32); C is F32, or BF16 (bf16 activations: the F32 result, with
	// beta's C widened, rounded once); bias is F32 or C's dtype.
	MatMul(p MatMul, a, b, c, bias Ref)

	// Binary computes dst[i] = a[i] op b[i] for n elements. dst may alias a or b.
	Binary(op BinaryOp, dst, a, b Ref, n int)
	// Axpy computes dst[i] += alpha * x[i].
	Axpy(dst, x Ref, alpha float32, n int)
	// Scale computes dst[i] = alpha * src[i]; dst may alias src.
	Scale(dst, src Ref, alpha float32, n int)
	// Unary computes dst[i] = op(src[i]); dst may alias src.
	Unary(op UnaryOp, dst, src Ref, n int)

	// SumRows reduces a rows×cols matrix over its rows: dst[j] = beta*dst[j] + sum_i src[i*cols+j].
	SumRows(dst, src Ref, rows, cols int, beta float32)
	// SumCols reduces over columns: dst[i] = alpha * sum_j src[i*cols+j].
	SumCols(dst, src Ref, rows, cols int, alpha float32)
	// SumSquares writes dst[0] = beta*dst[0] + sum_i src[i]^2 (dst a
	// single F32 element; with beta 0, dst is not read).
	SumSquares(dst, src Ref, n int, beta float32)

	// Softmax over the last axis of rows×cols; SoftmaxBackward gives
	// dx = y * (dy - sum(dy*y)).
	Softmax(dst, src Ref, rows, cols int)
	SoftmaxBackward(dx, y, dy Ref, rows, cols int)

	// LayerNorm normalises each row, saving mean and rstd (rows each) for
	// the backward pass. w is required; b may be Nil.
	LayerNorm(out, mean, rstd, x, w, b Ref, rows, cols int, eps float32)
	// LayerNormBackward writes dx, plus dres where dres is not Nil (the
	// gradient x gathered from its other uses, a residual stream's, so that
	// adding it costs no pass of its own; dres must not overlap dx), and
	// accumulates into dw and db (db may be Nil). Where drop.Dst is not
	// Nil, it also writes dx masked by drop.Mask there (the gradient of a
	// dropout whose output x is, so that the dropout's backward pass costs
	// no pass of its own either).
	LayerNormBackward(dx, dres, dw, db, dout, x, mean, rstd, w Ref, rows, cols int, drop DropoutOut)

	// AddLayerNorm is DropoutAdd(sum, x, y, rows·cols, m) followed by
	// LayerNorm(out, mean, rstd, sum, w, b, rows, cols, eps), in one pass
	// and with the same bits: a residual add (a plain one where m keeps
	// everything: Threshold 0, Scale 1) fused with the LayerNorm after it.
	AddLayerNorm(sum, out, mean, rstd, x, y, w, b Ref, rows, cols int, eps float32, m DropoutMask)

	// DropoutAdd writes out[i] = x[i] + y[i]·s[i], where s[i] is m.Scale
	// where m keeps element i and 0 where it does not (so a dropped
	// infinity or NaN stays NaN, as multiplying by a mask would); with x
	// Nil, out[i] = y[i]·s[i] (a dropout). The product is rounded before
	// the sum. out may alias x or y.
	DropoutAdd(out, x, y Ref, n int, m DropoutMask)

	// GELU is the tanh approximation; GELUBackward writes dx = dy * gelu'(x).
	GELU(dst, src Ref, n int)
	GELUBackward(dx, x, dy Ref, n int)

	// Attention is causal multi-head self-attention over a packed
	// qkv [B, T, 3C] (q, k, v each C wide, heads contiguous hd=C/H slices),
	// writing out [B, T, C] and saving what the backward pass needs in
	// saved (p.SavedLen() elements: the log-sum-exp of each score row, so
	// no T×T matrix outlives the call).
	Attention(p Attention, out, saved, qkv Ref)
	// AttentionBackward writes dqkv from dout, the forward's out and saved.
	AttentionBackward(p Attention, dqkv, dout, out, saved, qkv Ref)
	// AttentionKV is inference attention against a key/value cache. For
	// packed qkv [B, T, 3C] at positions [Pos, Pos+T), it writes k and v into
	// the caches kc and vc ([B, MaxT, C]) at those positions, then attends
	// causally over positions [0, Pos+t] for each new position t, writing out [B, T, C].
	AttentionKV(p AttentionKV, out, qkv, kc, vc Ref)

	// CrossEntropy computes per-row -log softmax(logits)[target] for
	// logits [N, V], writing losses [N] and the log-sum-exp of each row into lse [N].
	// Targets (I32) outside [0, V) are ignored: their loss is 0 (use -1 to mask).
	CrossEntropy(losses, lse, logits, targets Ref, n, v int)
	// CrossEntropyBackward writes dlogits = dloss[0]*scale * (softmax(logits) - onehot(target)),
	// where dloss is the gradient of a scalar loss and scale is the weight of each row in it
	// (1/N for a mean). Rows with an out-of-range target get zero gradient.
	// dlogits may be logits (the gradient written over them).
	CrossEntropyBackward(dlogits, logits, lse, targets, dloss Ref, scale float32, n, v int)
	// CrossEntropyFused is CrossEntropy's losses and
	// CrossEntropyBackward's dlogits in one pass over the logits (a
	// training step's classifier), the same values as the two calls
	// (without lse): dloss must hold, when the call runs, the gradient the
	// loss will be differentiated with. dlogits may be logits.
	CrossEntropyFused(losses, dlogits, logits, targets, dloss Ref, scale float32, n, v int)

	// Embedding gathers rows: out[i] = table[ids[i]], each row dim wide.
	Embedding(out, table, ids Ref, n, dim int)
	// EmbeddingBackward accumulates dtable[ids[i]] += dout[i].
	EmbeddingBackward(dtable, dout, ids Ref, n, dim int)

	// AdamW updates params in place (decoupled weight decay).
	AdamW(p AdamW, param, grad, m, v Ref, n int)
	// TrackLoss and ClipCoef keep a trainer's per-step bookkeeping on the
	// device, so that a step reads nothing back. stats is F32 [4] or [5]:
	// the loss summed since last read, the first step whose loss was not
	// finite (-1: none), the last gradient norm, the first step whose
	// gradients were not finite (-1: none), and, for a step replayed from
	// a graph, the step clock (StepClock). A negative step means the
	// clock's: stats[4], the step's number from 1 (ScalerCoef: stats[4]-1,
	// its index from 0). TrackLoss adds x[0]*scale to
	// stats[0] and records step in stats[1] the first time x[0] is not
	// finite. ClipCoef computes the norm sqrt(sumsq[0]) in float64 into
	// stats[2], and into coef[0] the factor that clips it to maxNorm:
	// maxNorm/(norm+1e-6) where maxNorm > 0 and norm > maxNorm, else 1;
	// where the norm is not finite, coef[0] is the norm (AdamW then
	// skips) and step goes into stats[3] the first time.
	TrackLoss(stats, x Ref, scale float32, step int)
	ClipCoef(coef, stats, sumsq Ref, maxNorm float64, step int)
	// ScalerCoef is ClipCoef for fp16's dynamic loss scaling, with the
	// scaler's state on the device (see Scaler): sumsq is of the scaled
	// gradients. Where their norm is finite, coef[0] unscales and clips
	// them (the clip factor of the unscaled norm, divided by the scale),
	// and the scaler counts a clean step (growing the scale after
	// GrowthInterval of them) and writes the step's learning rate and
	// AdamW constants into the state; otherwise coef[0] is the norm (AdamW
	// skips), the scale halves and the step counts as skipped. stats[2]
	// gets the unscaled norm; stats[3] is left alone (a skipped fp16 step
	// is the scaler's business). step is the optimizer step's index from
	// 0.
	ScalerCoef(coef, stats, sumsq Ref, maxNorm float64, step int, s Scaler)
	// StepClock starts a step replayed from a graph, whose launches cannot
	// be given its number: with i = stats[4] the step's index from 0, it
	// sets stats[4] = i+1 (the number the step's bookkeeping reads), and
	// unless sched is Nil writes AdamW's three constants for update t =
	// i+1 at the learning rate lrs[min(i, nlr-1)] into sched (as
	// ScalerCoef does into Scaler.State from ScalerLR on; see AdamW.Sched).
	StepClock(stats, sched, lrs Ref, nlr int, beta1, beta2 float32)
	// StepDropoutKey writes, for a step replayed from a graph, the key of
	// its dropout masks into key (two I32, low half first):
	// DropoutKey(seed, i), i = stats[4]-1 the step's index after
	// StepClock. Every micro-step reads the one key: masks are keyed by
	// each element's place in the global batch.
	StepDropoutKey(key, stats Ref, seed uint64)
}

// Scaler is fp16's dynamic loss scaling kept on the device, with PyTorch
// GradScaler's rules, for ScalerCoef: the state the host reads only at
// read points, and what the step's update needs, so that no step waits
// for the device to decide whether it is skipped.
type Scaler struct {
	// State is ScalerStateLen F32 elements on the device: see the
	// Scaler* indices.
	State Ref
	// LRs is the learning-rate schedule, NLR F32 elements: a step that is
	// not skipped takes LRs[min(step - skipped, NLR-1)], as the schedule
	// does not advance on skipped steps.
	LRs            Ref
	NLR            int
	GrowthInterval int
	// SeedFactor times the scale is the next backward pass's seed (the
	// loss's gradient: 1/accumulation steps).
	SeedFactor   float32
	Beta1, Beta2 float32 // AdamW's, for its bias corrections
}

// The elements of Scaler.State.
const (
	ScalerScale   = iota // the loss scale
	ScalerTracker        // clean steps since the scale last changed
	ScalerSkipped        // steps skipped in the whole run
	ScalerSeed           // the backward pass's seed: scale × SeedFactor
	ScalerLR             // this step's learning rate, then AdamW's step size and 1/sqrt(1-b2^t), the three AdamW.Sched reads
	ScalerStepSize
	ScalerInvBC2Sqrt
	ScalerAdamSteps // updates taken: t of the last update
	ScalerStateLen
)

// MatMul describes a (batched) matrix product. op(A) is M×K, op(B) is K×N,
// C is M×N row-major. Strides are in elements between batch items; a stride
// of 0 broadcasts one matrix over the batch.
//
// Round, BF16 or F16, asks for F32 operands to be rounded to that type (to
// nearest even) before the product, which accumulates in F32: autocast's
// product without a cast of its own. The result is the one casting A and B
// first gives, up to the order of the sums. Zero (Invalid) or F32 rounds
// nothing; operands stored in BF16 or F16 ignore it.
type MatMul struct {
	Batch, M, N, K            int
	TransA, TransB            bool
	StrideA, StrideB, StrideC int
	Alpha, Beta               float32
	Round                     DType
}

// Rounds reports the type p.Round rounds F32 operands to: BF16, F16, or
// F32 for none.
func (p MatMul) Rounds() DType {
	if p.Round == BF16 || p.Round == F16 {
		return p.Round
	}
	return F32
}

// Extents returns the number of elements A and B span: the last batch
// item's offset plus one matrix.
func (p MatMul) Extents() (a, b int) {
	a, b = p.M*p.K, p.K*p.N
	if p.Batch > 1 {
		a += (p.Batch - 1) * p.StrideA
		b += (p.Batch - 1) * p.StrideB
	}
	return a, b
}

// GELUProducts is a Backend whose matrix products can apply GELU, or
// GELU's gradient, in their own epilogue (cuBLASLt's), so that a GPT's MLP
// costs no GELU launches. GELUEpilogues reports whether it can now. For
// both products p.Batch is 1, p.Beta 0 and p.Alpha 1, and op(A) and op(B)
// are as in MatMul (with p.Round). MatMulGELU writes pre = op(A)·op(B) +
// bias (bias may be Nil) and out = gelu(pre); MatMulGELUGrad writes
// out = (op(A)·op(B)) ⊙ gelu'(pre). GELU is the tanh approximation, as
// GELU and GELUBackward.
type GELUProducts interface {
	GELUEpilogues() bool
	MatMulGELU(p MatMul, a, b, out, pre, bias Ref)
	MatMulGELUGrad(p MatMul, a, b, out, pre Ref)
}

// BiasGELUer is a Backend with a fused bias and GELU, for products that
// cannot add a bias in their epilogue: BiasGELU adds bias [cols] to each
// row of pre [rows, cols] in place and writes h = gelu(pre) (the tanh
// approximation, as GELU), in one pass.
type BiasGELUer interface {
	BiasGELU(pre, h, bias Ref, rows, cols int)
}

// BiasGradProducts is a Backend whose products can also write a bias's
// gradient (cuBLASLt's bias-gradient epilogue): MatMulBiasGrad is MatMul
// (one product, alpha 1, B not transposed, no bias) that also writes
// dbias[j] = Σ_k op(B)[k, j], B's column sums over the product's K
// (overwritten), so that a Linear's weight and bias gradients come from
// one pass over the output's gradient. It reports false, having done
// nothing, where it cannot (the caller then computes them apart).
type BiasGradProducts interface {
	MatMulBiasGrad(p MatMul, a, b, c, dbias Ref) bool
}

// OperandRounder is a Backend whose MatMul rounds F32 operands (Round)
// within the product itself, in no pass of its own over memory, as
// cuBLAS's fast compute modes do. Autocast gives such a backend its F32
// operands as they are; other backends get them cast first, since a cast
// made once serves the backward products too.
type OperandRounder interface {
	RoundsOperands() bool
}

// BinaryOp is an elementwise binary operation.
type BinaryOp uint8

// Binary operations.
const (
	Add BinaryOp = iota
	Sub
	Mul
	Div
)

// UnaryOp is an elementwise unary operation.
type UnaryOp uint8

// Unary operations.
const (
	Neg UnaryOp = iota
	Exp
	Log
	Tanh
	Sqrt
)

// Attention describes a causal self-attention call.
type Attention struct {
	B, T, C, H int
	// KVH, where not 0, is the number of key/value heads, dividing H:
	// query head h reads key/value head h/(H/KVH) (grouped-query
	// attention; 1: multi-query). qkv is then [B, T, C + 2·KVH·C/H].
	// Only a LlamaBlocks backend takes it.
	KVH int
	// Round, where BF16 or F16, lets a backend that rounds operands
	// within its products (an OperandRounder) compute the products on F32
	// storage with q, k, v, dout and the probabilities rounded to that
	// type, as autocast's attention has them (CUDA: on tensor cores).
	// Others, and Round 0, compute as stored.
	Round DType
	// Drop, where its Threshold is not 0, is dropout on the attention
	// probabilities (training only, as nanoGPT's attn_dropout): the
	// softmax's probability of query i and key j in window b, head h is
	// multiplied by Drop's factor of element ((b·H + h)·T + i)·T + j
	// (Offset, the batch's first window times H·T·T, added), in the
	// product with V and in the backward pass, while the log-sum-exp
	// saved is the softmax's. Both passes must get the same Drop.
	Drop DropoutMask
}

// Dropped reports whether a drops attention probabilities.
func (a Attention) Dropped() bool { return a.Drop.Threshold != 0 }

// SavedLen is the number of elements Attention saves for its backward pass:
// one log-sum-exp per score row, B·H·T.
func (a Attention) SavedLen() int { return a.B * a.H * a.T }

// AttentionKV describes an inference attention call against a cache.
type AttentionKV struct {
	B, T, C, H int
	KVH        int // as Attention's; the caches are [B, MaxT, KVH·C/H]
	Pos, MaxT  int
}

// AdamW holds one AdamW step's hyperparameters. Step counts from 1 and
// drives bias correction.
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Step                               int
	// GradScale, where not Nil, is an F32 scalar on the device that the
	// gradients are multiplied by first (a clip coefficient); one that
	// is not finite skips the step (param, m and v stay as they are).
	GradScale Ref
	// DecayEnd, where positive, ends the weight decay: elements from
	// DecayEnd on take none (a packed buffer, its decayed parameters
	// first, updated in one launch).
	DecayEnd int
	// Sched, where not Nil, is three F32 on the device that replace LR
	// and Step: the learning rate, the step size lr/(1-b1^t) and
	// 1/sqrt(1-b2^t), as ScalerCoef writes them (Scaler.State from
	// ScalerLR on); the decay is 1 - lr·WeightDecay.
	Sched Ref
	// Half, where not Nil, is BF16 with the parameters' n elements: the
	// updated parameters are written there too, rounded to nearest even,
	// in the same pass (a bf16 copy of the weights that the products
	// read, so that no forward pass casts them); a skipped step leaves it
	// as it is.
	Half Ref
}

// Opener opens device number index of a kind.
type Opener func(index int) (Backend, error)

var (
	mu      sync.Mutex
	openers = map[string]Opener{}
	opened  = map[Device]Backend{}
	failed  = map[Device]error{}
	// named maps a kind to its devices' names, by index. It has its own
	// lock: Device.String reads it, and messages made under mu print
	// devices.
	namedMu sync.Mutex
	named   = map[string][]string{}
)

// Register makes a device kind available. It panics if kind is registered twice.
func Register(kind string, open Opener) {
	mu.Lock()
	defer mu.Unlock()
	if _, dup := openers[kind]; dup {
		panic("backend: Register called twice for " + kind)
	}
	openers[kind] = open
}

// RegisterNamed registers a kind whose devices are named rather than
// numbered ("sim:h200"): names[i] is the device of index i, and Device's
// String and ParseDevice use the names.
func RegisterNamed(kind string, names []string, open Opener) {
	Register(kind, open)
	namedMu.Lock()
	named[kind] = append([]string(nil), names...)
	namedMu.Unlock()
}

// deviceNames returns the names of a kind's devices (nil for a numbered
// kind).
func deviceNames(kind string) []string {
	namedMu.Lock()
	defer namedMu.Unlock()
	return named[kind]
}

// registered reports whether kind is registered.
func registered(kind string) bool {
	mu.Lock()
	defer mu.Unlock()
	_, ok := openers[kind]
	return ok
}

// Kinds lists the registered device kinds.
func Kinds() []string {
	mu.Lock()
	defer mu.Unlock()
	var ks []string
	for k := range openers {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Get returns the backend for d, opening it on first use. A device that
// failed to open keeps failing with the same reason.
func Get(d Device) (Backend, error) {
	mu.Lock()
	defer mu.Unlock()
	if b, ok := opened[d]; ok {
		return b, nil
	}
	if err, ok := failed[d]; ok {
		return nil, err
	}
	open, ok := openers[d.Kind]
	if !ok {
		return nil, fmt.Errorf("device %s: no backend registered for %q", d, d.Kind)
	}
	b, err := open(d.Index)
	if err != nil {
		err = fmt.Errorf("device %s: %w", d, err)
		failed[d] = err
		return nil, err
	}
	opened[d] = b
	return b, nil
}

// AsyncUploader is a backend that can copy from host memory without
// waiting. UploadAsync queues the copy after the work already issued (dst
// may be memory that work still reads) and returns at once; the copy then
// runs while later work is issued. Before issuing work that reads dst, call
// the Upload's Ready; before changing src, its Wait. Where the backend needs
// page-locked memory for this, PinnedAlloc provides it.
type AsyncUploader interface {
	PinnedAlloc(n int) ([]byte, error)
	PinnedFree(b []byte) error
	UploadAsync(dst Ref, src []byte) Upload
}

// Upload is a copy UploadAsync queued.
type Upload interface {
	// Ready makes the work issued from now on wait for the copy.
	Ready() error
	// Wait blocks until the copy is done and its source may change.
	Wait() error
}

// DoneUpload is an Upload that finished before it was returned.
type DoneUpload struct{}

// Ready implements Upload.
func (DoneUpload) Ready() error { return nil }

// Wait implements Upload.
func (DoneUpload) Wait() error { return nil }

// Timer is a Backend whose work runs asynchronously (a GPU) and which can
// time it in queue order: Mark records a point after the work queued so
// far, Elapsed is the device time in milliseconds between two points
// (waiting for the later one), and ReleaseMark recycles a point. Host
// clocks time synchronous backends (the CPU) exactly, so they need none.
type Timer interface {
	Mark() (Mark, error)
	Elapsed(from, to Mark) (float64, error)
	ReleaseMark(m Mark)
}

// Mark is a Timer's recorded point.
type Mark uintptr

// HostMemory is a Backend whose storage is host memory the caller may
// read and write directly (the CPU): HostFloat32s is a view of n F32
// elements of r, with no copy. Data-parallel training all-reduces such
// gradients in place.
type HostMemory interface {
	HostFloat32s(r Ref, n int) []float32
}

// Simulated is a Backend whose device executes nothing (a simulated GPU):
// its memory accounts are real, but tensors hold no data and what is read
// back is zeros, so losses mean nothing. Trainers report them as n/a,
// skip their non-finite checks and write no weights.
type Simulated interface {
	Simulated() bool
}

// PeerCopier is a Backend that copies from another device's storage
// device to device, with no trip through the host (between GPUs of one
// machine). CopyFrom copies n elements of src, storage of backend from,
// into dst (both of one dtype), in order after the work queued so far on
// both devices and before the work queued later on either, so that src
// may be freed and dst read at once. It reports false, having done
// nothing, where from is not a device it can copy from; the caller then
// copies through the host.
type PeerCopier interface {
	CopyFrom(dst Ref, from Backend, src Ref, n int) bool
}

// Queue is a Backend whose work can be joined by libraries that take raw
// device addresses and a stream (NCCL): Address is the device address of
// r's element, and OnQueue runs fn where the device's context is current,
// with the handle of the stream the backend's own work is queued on, so
// that what fn enqueues runs after that work and before what follows.
type Queue interface {
	Address(r Ref) uintptr
	OnQueue(fn func(stream uintptr) error) error
}

// CommQueue is a Queue whose device has a second stream for collectives,
// so that they overlap the compute stream's work (DDP's all-reduce with
// the rest of backward). OnCommQueue runs fn as OnQueue does, but with the
// communication stream, which first waits (on the device, not the host)
// for the work queued so far on the compute stream. JoinComm makes the
// compute stream wait for the work queued so far on the communication
// stream, and returns a probe of that work.
type CommQueue interface {
	Queue
	OnCommQueue(fn func(stream uintptr) error) error
	JoinComm() (CommProbe, error)
}

// Grapher is a Backend that can record the work queued on its compute
// stream into a graph and queue the whole graph again with one call (CUDA
// graphs), so that a training step's hundreds of launches cost the host
// one. Between BeginCapture and EndCapture the work is recorded, not run,
// and nothing may wait for the device; the graph then reads and writes
// the same device addresses every time it is launched, so what it reads
// must be written in place before each launch and its memory must not be
// reused by anything else.
type Grapher interface {
	BeginCapture() error
	EndCapture() (Graph, error)
}

// Graph is captured work: Launch queues it all on the compute stream,
// Free releases it.
type Graph interface {
	Launch() error
	Free() error
}

// CommProbe tells whether the communication work queued before it was
// made has finished, without waiting: a watchdog may call Done from any
// goroutine, also while another waits for the device. Release frees it
// (once; Done must not be called after).
type CommProbe interface {
	Done() (bool, error)
	Release()
}

// ThreadBudget is a Backend whose kernels run on host threads (the CPU),
// so that devices sharing a machine's cores (pipeline stages, each on its
// own goroutine) can divide them. Threads is the number of threads its
// kernels use at once, the calling goroutine included; SetThreads changes
// it (n < 1 means 1). SetThreads may be called at any time when no kernel
// of this backend is running, before or after kernels have run. A
// kernel's results do not depend on the thread count.
type ThreadBudget interface {
	Threads() int
	SetThreads(n int)
}

// MemoryLimiter is a Backend whose memory capacity can be set below the
// machine's (the CPU's, to behave like a smaller device): an allocation
// past it fails with ErrOutOfMemory, and MemStats' Total reports it. 0
// lifts the limit.
type MemoryLimiter interface {
	SetMemoryLimit(bytes int64)
}
