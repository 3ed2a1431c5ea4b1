// Package model holds fleet's models: decoder-only Transformers of two
// families (Config.Arch), and a recurrent model beside them. gpt.go is
// the GPT of nanoGPT and GPT-2, meant to be read top to bottom: token and
// learned position embeddings, pre-LayerNorm blocks of causal
// self-attention and a 4× MLP with tanh-GELU, a final LayerNorm, and a
// language-model head tied to the token embedding. llama.go builds
// today's blocks from the same parts: RMSNorm, rotary position
// embeddings, grouped-query attention (with optional q/k/v biases and
// QK-norm), SwiGLU and an untied or tied head. A Transformer family
// differs only in the modules it builds (nn.Norm, nn.FeedForward, the
// attention's options): the embedding, Block.Forward and the head are
// defined once, and training (GPT.Forward), pipeline stages (stages.go)
// and generation with a key/value cache (generate.go) all run them, each
// under a Pass of its own that says where the dropout masks come from and
// holds the cache. lstm.go is the recurrent family (Arch "lstm"): the
// embedding, LSTM layers and the head, with a forward pass of its own and
// its state carried in generation.
package model

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// Config is a model's shape. The JSON names follow nanoGPT's config keys;
// the fields after Bias are a family's pieces, zero in a GPT-2 (and left
// out of its JSON, so GPT-2 checkpoints read as they always have).
type Config struct {
	VocabSize int     `json:"vocab_size"`
	BlockSize int     `json:"block_size"`
	NLayer    int     `json:"n_layer"`
	NHead     int     `json:"n_head"`
	NEmbd     int     `json:"n_embd"`
	Dropout   float32 `json:"dropout"`
	// Bias: GPT-2's biases (every Linear and LayerNorm); in a Llama, the
	// attention's (q, k, v and the output projection: Hugging Face's
	// attention_bias).
	Bias bool `json:"bias"`

	// Arch is the family: "gpt2" (or empty), "llama" or "lstm".
	Arch string `json:"arch,omitempty"`
	// NKVHead is the number of key/value heads (0: NHead), HeadDim the
	// width of a head (0: NEmbd/NHead), MLPHidden the feed-forward's
	// hidden width (0: 4·NEmbd for GPT-2 and ReLU², about 8/3·NEmbd for
	// SwiGLU).
	NKVHead   int `json:"n_kv_head,omitempty"`
	HeadDim   int `json:"head_dim,omitempty"`
	MLPHidden int `json:"mlp_hidden,omitempty"`
	// RopeTheta is the rotary embeddings' base (0: 10000), RopeScaling
	// Llama 3.1's frequency scaling (nil: none).
	RopeTheta   float64      `json:"rope_theta,omitempty"`
	RopeScaling *RopeScaling `json:"rope_scaling,omitempty"`
	// NormEps is the norms' epsilon (0: 1e-5).
	NormEps float64 `json:"norm_eps,omitempty"`
	// QKNorm normalises each head of q and k (Qwen3); QKVBias gives q, k
	// and v biases without the output projection's (Qwen2); UntiedHead
	// gives the head a weight of its own (llama, lstm).
	QKNorm     bool `json:"qk_norm,omitempty"`
	QKVBias    bool `json:"qkv_bias,omitempty"`
	UntiedHead bool `json:"untied_head,omitempty"`
	// MLP is a Llama's feed-forward: MLPSwiGLU (or empty) or MLPReLU2.
	MLP string `json:"mlp,omitempty"`
}

// LayerNorm epsilon and initialisation scale, as in GPT-2.
const (
	lnEps   = 1e-5
	initStd = 0.02
)

// Validate reports a configuration that cannot build a model.
func (c Config) Validate() error {
	switch {
	case c.VocabSize <= 0:
		return fmt.Errorf("vocab size must be positive, got %d", c.VocabSize)
	case c.BlockSize <= 0:
		return fmt.Errorf("block size must be positive, got %d", c.BlockSize)
	case c.NLayer <= 0:
		return fmt.Errorf("n_layer must be positive, got %d", c.NLayer)
	case c.NHead <= 0 && !c.IsLSTM(): // an LSTM has no heads
		return fmt.Errorf("n_head must be positive, got %d", c.NHead)
	case c.NEmbd <= 0:
		return fmt.Errorf("n_embd must be positive, got %d", c.NEmbd)
	case !c.IsLSTM() && c.HeadDim == 0 && c.NEmbd%c.NHead != 0:
		return fmt.Errorf("n_embd %d is not divisible by n_head %d", c.NEmbd, c.NHead)
	case c.Dropout < 0 || c.Dropout >= 1:
		return fmt.Errorf("dropout must be in [0, 1), got %v", c.Dropout)
	}
	f, err := c.family()
	if err != nil {
		return err
	}
	return f.validate(c)
}

// Block is one Transformer layer: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
type Block struct {
	LN1  nn.Norm
	Attn *nn.CausalSelfAttention
	LN2  nn.Norm
	MLP  nn.FeedForward

	layer int // its index in GPT.Blocks: its place in a KVCache
}

// Forward maps the residual stream x [B, T, C] through the layer. The pass
// p says where the dropout masks come from and, for inference, holds the
// key/value cache; nil is a pass without either.
func (b *Block) Forward(x *tensor.Tensor, p *Pass) *tensor.Tensor {
	x = b.Attn.Residual(x, b.LN1.Forward(x), p.kv(b.layer), p.masks())
	return b.MLP.Residual(x, b.LN2.Forward(x), p.masks())
}

// Pass is the state one forward pass reads and changes besides the
// weights. The model's paths run the same embedding, blocks and head,
// each under a Pass of its own: GPT.Forward under the model's, each
// pipeline stage (Staged.Forward) under the stage's, ForwardKV under one
// holding the cache. Passes share nothing, so stages can run at once.
type Pass struct {
	// Dropout is where the dropout layers draw their masks; nil turns
	// dropout off.
	Dropout *nn.Masks
	// Cache, for inference, holds the keys and values of positions
	// [0, Cache.Pos); the pass's input holds positions [Cache.Pos, Cache.Pos+T).
	Cache *KVCache

	posIDs map[[2]int]*tensor.Tensor // position ids [B, T] from 0, made once per shape
	recomp []tensor.RecomputeFunc    // [i]: block i's Forward under this pass, for tensor.RecomputeRNG
}

// GPT is the model, of either family.
type GPT struct {
	Config Config
	WTE    *nn.Embedding // token embedding
	WPE    *nn.Embedding // learned position embedding; nil with rotary embeddings
	Drop   *nn.Dropout
	Blocks []*Block
	LNF    nn.Norm
	// Head is the head's weight [vocab, C]: WTE.W where tied.
	Head *nn.Parameter
	Rope *nn.Rope // the rotary embeddings' table; nil in a GPT-2
	// RNN are an LSTM's layers (lstm.go), each followed by its dropout
	// RNNDrop; nil in a Transformer, which has Blocks and LNF instead.
	RNN     []*nn.LSTM
	RNNDrop []*nn.Dropout

	dropouts  []*nn.Dropout
	recompute bool // blocks run under tensor.RecomputeRNG
	pass      Pass // Forward's: dropout masks drawn in turn from one RNG
}

// New builds a GPT on dev with GPT-2's initialisation: weights from
// N(0, 0.02²), residual projections from N(0, (0.02/√(2·n_layer))²),
// zero biases, unit LayerNorm weights. The draws come from seed.
func New(cfg Config, dev tensor.Device, seed uint64) (*GPT, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var m *GPT
	err := tensor.Catch(func() {
		tensor.ProgramOf(dev).Persist(func() { m = build(cfg, dev, seed) })
	})
	return m, err
}

func build(cfg Config, dev tensor.Device, seed uint64) *GPT {
	in := nn.Init{RNG: tensor.NewRNG(seed), Dev: dev}
	m := &GPT{Config: cfg, pass: Pass{Dropout: &nn.Masks{Stream: tensor.DropoutStream{Key: seed ^ 0x5eed}}}}
	f, _ := cfg.family() // (validated)
	f.build(m, in)
	m.SetTraining(true)
	return m
}

// newDrop is a dropout layer of the model's rate, counted among those
// SetTraining switches.
func (m *GPT) newDrop() *nn.Dropout {
	d := &nn.Dropout{P: m.Config.Dropout}
	m.dropouts = append(m.dropouts, d)
	return d
}

// buildGPT2 builds GPT-2's modules with its initialisation: weights from
// N(0, 0.02²), residual projections from N(0, (0.02/√(2·n_layer))²),
// zero biases, unit LayerNorm weights.
func buildGPT2(m *GPT, in nn.Init) {
	cfg := m.Config
	C := cfg.NEmbd
	residStd := float32(initStd / math.Sqrt(2*float64(cfg.NLayer)))
	m.WTE = nn.NewEmbedding("transformer.wte", in, cfg.VocabSize, C, initStd)
	m.WPE = nn.NewEmbedding("transformer.wpe", in, cfg.BlockSize, C, initStd)
	m.Head = m.WTE.W
	m.Drop = m.newDrop()
	for i := 0; i < cfg.NLayer; i++ {
		p := fmt.Sprintf("transformer.h.%d.", i)
		attn := &nn.CausalSelfAttention{
			CAttn:     nn.NewLinear(p+"attn.c_attn", in, C, 3*C, cfg.Bias, initStd),
			CProj:     nn.NewLinear(p+"attn.c_proj", in, C, C, cfg.Bias, residStd),
			NHead:     cfg.NHead,
			ResidDrop: m.newDrop(),
			AttnDrop:  m.newDrop(),
			Layer:     i,
		}
		mlp := &nn.MLP{
			CFC:   nn.NewLinear(p+"mlp.c_fc", in, C, 4*C, cfg.Bias, initStd),
			CProj: nn.NewLinear(p+"mlp.c_proj", in, 4*C, C, cfg.Bias, residStd),
			Drop:  m.newDrop(),
		}
		// The blocks' matrices, q, k and v fused in one.
		attn.CAttn.W.Parts, attn.CProj.W.Parts = []int{C, C, C}, []int{C}
		mlp.CFC.W.Parts, mlp.CProj.W.Parts = []int{4 * C}, []int{C}
		m.Blocks = append(m.Blocks, &Block{
			LN1:   nn.NewLayerNorm(p+"ln_1", in, C, cfg.Bias, lnEps),
			Attn:  attn,
			LN2:   nn.NewLayerNorm(p+"ln_2", in, C, cfg.Bias, lnEps),
			MLP:   mlp,
			layer: i,
		})
	}
	m.LNF = nn.NewLayerNorm("transformer.ln_f", in, C, cfg.Bias, lnEps)
}

// SetTraining turns dropout on (training) or off (evaluation) and returns
// the previous setting.
func (m *GPT) SetTraining(on bool) (was bool) {
	was = m.dropouts[0].Training
	for _, d := range m.dropouts {
		d.Training = on
	}
	return was
}

// SetDropout keys the next forward pass's dropout masks: key is the
// step's (backend.DropoutKey), and row0 the place of the input's first row
// in the step's global batch (data.MicroBatchFirst), so a run's masks do
// not depend on how many forward passes came before, nor on how the
// batch is split among micro-steps and ranks. Without it, each forward
// pass takes the sites after the last one's.
func (m *GPT) SetDropout(key uint64, row0 int64) { m.pass.Dropout.Seek(key, 0, row0) }

// SetDropoutBase makes the key an offset into a key read on the device
// when the step runs (two I32, written there every step: a step replayed
// from a graph); nil turns it off.
func (m *GPT) SetDropoutBase(base *tensor.Tensor) { m.pass.Dropout.Base = base }

// SetRecompute turns activation recomputation on or off (it is off by
// default). With it on, each block's forward pass keeps only its output:
// the backward pass runs the block again, with the same dropout masks and
// autocast policy, just before differentiating it (tensor.RecomputeRNG).
// On the CPU the gradients are the same bit for bit; a training step
// costs about one more forward pass of the blocks (about 1.3× the time)
// and its peak memory holds one block's activations instead of all of
// them. Evaluation (no gradients) is unaffected apart from freeing each
// block's temporaries as it goes.
func (m *GPT) SetRecompute(on bool) { m.recompute = on }

// Recompute reports whether activation recomputation is on.
func (m *GPT) Recompute() bool { return m.recompute }

// Parameters lists every parameter once, in checkpoint order: the
// embeddings, the blocks (an LSTM's layers), the final norm, and an
// untied head.
func (m *GPT) Parameters() []*nn.Parameter {
	ps := m.EmbedParams()
	for _, b := range m.Blocks {
		ps = append(ps, b.Parameters()...)
	}
	for _, l := range m.RNN {
		ps = append(ps, l.Parameters()...)
	}
	return append(ps, m.HeadParams()...)
}

// EmbedParams are the embeddings' parameters (the first stage's).
func (m *GPT) EmbedParams() []*nn.Parameter {
	if m.WPE == nil {
		return []*nn.Parameter{m.WTE.W}
	}
	return []*nn.Parameter{m.WTE.W, m.WPE.W}
}

// HeadParams are the final norm's parameters and an untied head's weight
// (the last stage's).
func (m *GPT) HeadParams() []*nn.Parameter {
	var ps []*nn.Parameter
	if m.LNF != nil { // an LSTM has none
		ps = m.LNF.Parameters()
	}
	if m.Tied() {
		return ps
	}
	return append(ps, m.Head)
}

// Tied reports whether the head's weight is the token embedding's.
func (m *GPT) Tied() bool { return m.Head == m.WTE.W }

// Parameters lists the block's parameters in checkpoint order.
func (b *Block) Parameters() []*nn.Parameter {
	ps := append(b.LN1.Parameters(), b.Attn.Parameters()...)
	ps = append(ps, b.LN2.Parameters()...)
	return append(ps, b.MLP.Parameters()...)
}

// NumParams counts the parameters (the tied head counted once).
func (m *GPT) NumParams() int {
	n := 0
	for _, p := range m.Parameters() {
		n += p.T.Numel()
	}
	return n
}

// FLOPsPerToken estimates training FLOPs per token as llm.c does (its
// gpt2_estimate_mfu): 6 per parameter plus attention's
// 6·n_layer·(heads × head width)·T, the causal half of the score and value
// products (the width is n_embd in a GPT-2). MFU is quoted in these units;
// FLOPsPerTokenPaLM gives the other common figure. An LSTM has no
// attention: 6 per parameter (each of its weights is read by one product
// per token).
func (m *GPT) FLOPsPerToken(T int) float64 {
	c := m.Config
	if m.RNN != nil {
		return 6 * float64(m.NumParams())
	}
	return 6*float64(m.NumParams()) + 6*float64(c.NLayer*c.NHead*c.headDim()*T)
}

// FLOPsPerTokenPaLM is the PaLM paper's estimate (its appendix B): 6 per
// parameter plus 12·n_layer·(heads × head width)·T, attention counted over
// every (query, key) pair, as if it were not causal.
func (m *GPT) FLOPsPerTokenPaLM(T int) float64 {
	c := m.Config
	if m.RNN != nil {
		return 6 * float64(m.NumParams())
	}
	return 6*float64(m.NumParams()) + 12*float64(c.NLayer*c.NHead*c.headDim()*T)
}

// To moves the model to dev.
func (m *GPT) To(dev tensor.Device) {
	for _, p := range m.Parameters() {
		p.To(dev)
	}
	m.pass.freePositions()
	if m.Rope != nil {
		m.Rope.Free()
	}
}

// Device is where the parameters live.
func (m *GPT) Device() tensor.Device { return m.WTE.W.T.Device() }

// Forward maps token ids [B, T] (I32) to logits [B, T, vocab]. Without
// recomputation each residual add runs with the LayerNorm after it in one
// pass (nn.Dropout.ResidualLN): the embeddings' dropout with the first
// block's first LayerNorm, each block's attention add with its second,
// its MLP add with the next block's first (the last block's with the
// final LayerNorm). The values are those of the ops one after the other.
func (m *GPT) Forward(idx *tensor.Tensor) *tensor.Tensor {
	p := &m.pass
	if m.RNN != nil {
		return m.forwardLSTM(idx, p)
	}
	if !m.recompute {
		return m.forwardFused(idx, p)
	}
	x := m.embed(idx, p)
	x = m.blocks(x, 0, len(m.Blocks), p)
	return m.head(x, m.Head.T)
}

// forwardFused is Forward with the adds fused with the LayerNorms.
func (m *GPT) forwardFused(idx *tensor.Tensor, p *Pass) *tensor.Tensor {
	next := func(i int) nn.Norm {
		if i < len(m.Blocks) {
			return m.Blocks[i].LN1
		}
		return m.LNF
	}
	x, h := m.Drop.ResidualLN(nil, m.embedSum(idx, p), p.masks(), next(0))
	for i, b := range m.Blocks {
		x, h = b.forwardLN(x, h, p, next(i+1))
	}
	return tensor.LinearT(h, m.Head.T)
}

// forwardLN is Forward for a residual stream x whose LN1 is h already:
// it returns the block's output and next of it.
func (b *Block) forwardLN(x, h *tensor.Tensor, p *Pass, next nn.Norm) (*tensor.Tensor, *tensor.Tensor) {
	x, h2 := b.Attn.ResidualLN(x, h, p.kv(b.layer), p.masks(), b.LN2)
	return b.MLP.ResidualLN(x, h2, p.masks(), next)
}

// Loss is the mean cross-entropy of predicting targets [B, T] from idx [B, T].
func (m *GPT) Loss(idx, targets *tensor.Tensor) *tensor.Tensor {
	return tensor.CrossEntropyInPlace(m.Forward(idx), targets) // the logits feed nothing else
}

// embed maps token ids [B, T] to the residual stream [B, T, C]: token
// plus position embeddings (where learned), then dropout. The positions
// count from 0, or from p.Cache.Pos with a cache.
func (m *GPT) embed(idx *tensor.Tensor, p *Pass) *tensor.Tensor {
	return m.Drop.Forward(m.embedSum(idx, p), p.masks())
}

// embedSum is embed before the dropout.
func (m *GPT) embedSum(idx *tensor.Tensor, p *Pass) *tensor.Tensor {
	B, T := idx.Dim(0), idx.Dim(1)
	start := 0
	if p.Cache != nil {
		start = p.Cache.Pos
	}
	if start+T > m.Config.BlockSize {
		msg := fmt.Sprintf("sequence of %d exceeds block size %d", T, m.Config.BlockSize)
		if start > 0 {
			msg = fmt.Sprintf("positions [%d, %d) exceed block size %d", start, start+T, m.Config.BlockSize)
		}
		panic(&tensor.Error{Op: "gpt", Msg: msg})
	}
	if m.WPE == nil { // rotary embeddings: the attention rotates q and k
		return activations(m.WTE.Forward(idx))
	}
	var pos *tensor.Tensor
	if p.Cache == nil {
		pos = p.positionsFrom0(m.Device(), B, T)
	} else {
		pos = positions(m.Device(), B, T, start)
	}
	return activations(tensor.Add(m.WTE.Forward(idx), m.WPE.Forward(pos)))
}

// activations is the residual stream's first value x in the dtype the
// model's activations have: under Autocast(BF16), BF16 (bf16 activations,
// as autocast has them: every op after it reads and writes BF16 and
// computes in F32, the products read the weights' bf16 copies, and the
// loss comes out in F32); F32 otherwise. The embeddings are summed in F32
// and rounded once.
func activations(x *tensor.Tensor) *tensor.Tensor {
	if tensor.ProgramOf(x.Device()).AutocastDType() == tensor.BF16 {
		return tensor.Cast(x, tensor.BF16)
	}
	return x
}

// blocks runs blocks [lo, hi) on the residual stream x. With
// recomputation on, each runs under tensor.RecomputeRNG, which replays
// the pass's dropout masks in the backward pass; inference with a cache
// keeps nothing for a backward pass and runs them plainly.
func (m *GPT) blocks(x *tensor.Tensor, lo, hi int, p *Pass) *tensor.Tensor {
	for i := lo; i < hi; i++ {
		if m.recompute && p.Cache == nil {
			x = tensor.RecomputeRNG(p.rng(), p.recomputed(m, i), x)
		} else {
			x = m.Blocks[i].Forward(x, p)
		}
	}
	return x
}

// head maps the residual stream to logits: the final norm, then the
// output projection w ([vocab, C]: the head's weight, or a pipeline's
// copy of the tied embedding).
func (m *GPT) head(x, w *tensor.Tensor) *tensor.Tensor {
	return tensor.LinearT(m.LNF.Forward(x), w)
}

// masks is where the pass's dropout draws (nil: no dropout).
func (p *Pass) masks() *nn.Masks {
	if p == nil {
		return nil
	}
	return p.Dropout
}

// rng is the stream the pass's dropout takes its masks from, or nil.
func (p *Pass) rng() *tensor.DropoutStream {
	if p == nil || p.Dropout == nil {
		return nil
	}
	return &p.Dropout.Stream
}

// kv is layer i's part of the pass's cache, or nil without one.
func (p *Pass) kv(i int) *nn.KV {
	if p == nil || p.Cache == nil {
		return nil
	}
	return &nn.KV{K: p.Cache.K[i], V: p.Cache.V[i], Pos: p.Cache.Pos}
}

// recomputed is block i's Forward under p as the function
// tensor.RecomputeRNG calls, made the first time it is asked for, so that
// a steady-state step allocates nothing.
func (p *Pass) recomputed(m *GPT, i int) tensor.RecomputeFunc {
	if len(p.recomp) != len(m.Blocks) {
		p.recomp = make([]tensor.RecomputeFunc, len(m.Blocks))
	}
	if p.recomp[i] == nil {
		b := m.Blocks[i]
		p.recomp[i] = func(in ...*tensor.Tensor) *tensor.Tensor { return b.Forward(in[0], p) }
	}
	return p.recomp[i]
}

// positionsFrom0 returns the persistent position ids [B, T] (0..T-1 in
// each row) on dev, uploading them only the first time a shape is seen:
// training asks for the same shape every step.
func (p *Pass) positionsFrom0(dev tensor.Device, B, T int) *tensor.Tensor {
	k := [2]int{B, T}
	if t, ok := p.posIDs[k]; ok {
		return t
	}
	if p.posIDs == nil {
		p.posIDs = map[[2]int]*tensor.Tensor{}
	}
	var t *tensor.Tensor
	tensor.ProgramOf(dev).Persist(func() { t = positions(dev, B, T, 0) })
	p.posIDs[k] = t
	return t
}

// freePositions frees the position ids, e.g. when the model moves.
func (p *Pass) freePositions() {
	for k, t := range p.posIDs {
		t.Free()
		delete(p.posIDs, k)
	}
}

// positions returns I32 position ids [B, T] counting from start.
func positions(dev tensor.Device, B, T, start int) *tensor.Tensor {
	ids := make([]int32, B*T)
	for i := range ids {
		ids[i] = int32(start + i%T)
	}
	return tensor.FromInt32s(dev, ids, B, T)
}
