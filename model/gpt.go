// Package model holds fleet's models. gpt.go is the GPT of nanoGPT and
// GPT-2, meant to be read top to bottom: token and learned position
// embeddings, pre-LayerNorm blocks of causal self-attention and a 4× MLP
// with tanh-GELU, a final LayerNorm, and a language-model head tied to the
// token embedding.
package model

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// Config is a GPT's shape. The JSON names follow nanoGPT's config keys.
type Config struct {
	VocabSize int     `json:"vocab_size"`
	BlockSize int     `json:"block_size"`
	NLayer    int     `json:"n_layer"`
	NHead     int     `json:"n_head"`
	NEmbd     int     `json:"n_embd"`
	Dropout   float32 `json:"dropout"`
	Bias      bool    `json:"bias"`
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
	case c.NHead <= 0:
		return fmt.Errorf("n_head must be positive, got %d", c.NHead)
	case c.NEmbd <= 0:
		return fmt.Errorf("n_embd must be positive, got %d", c.NEmbd)
	case c.NEmbd%c.NHead != 0:
		return fmt.Errorf("n_embd %d is not divisible by n_head %d", c.NEmbd, c.NHead)
	case c.Dropout < 0 || c.Dropout >= 1:
		return fmt.Errorf("dropout must be in [0, 1), got %v", c.Dropout)
	}
	return nil
}

// Block is one Transformer layer: x + attn(ln_1(x)), then x + mlp(ln_2(x)).
type Block struct {
	LN1  *nn.LayerNorm
	Attn *nn.CausalSelfAttention
	LN2  *nn.LayerNorm
	MLP  *nn.MLP

	checkpointed tensor.CheckpointFunc // forward as one function value, made once
}

// Forward maps the residual stream x [B, T, C] through the layer.
func (b *Block) Forward(x *tensor.Tensor) *tensor.Tensor {
	x = tensor.Add(x, b.Attn.Forward(b.LN1.Forward(x)))
	return tensor.Add(x, b.MLP.Forward(b.LN2.Forward(x)))
}

// forwardArgs is Forward in the form tensor.Checkpoint calls.
func (b *Block) forwardArgs(in ...*tensor.Tensor) *tensor.Tensor { return b.Forward(in[0]) }

// GPT is the model.
type GPT struct {
	Config Config
	WTE    *nn.Embedding // token embedding, shared with the head
	WPE    *nn.Embedding // learned position embedding
	Drop   *nn.Dropout
	Blocks []*Block
	LNF    *nn.LayerNorm

	dropouts  []*nn.Dropout
	dropRNG   *tensor.RNG               // shared by every dropout layer
	recompute bool                      // blocks run under tensor.Checkpoint
	posIDs    map[[2]int]*tensor.Tensor // position ids [B, T] from 0, made once per shape
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
		tensor.Persist(func() { m = build(cfg, dev, seed) })
	})
	return m, err
}

func build(cfg Config, dev tensor.Device, seed uint64) *GPT {
	in := nn.Init{RNG: tensor.NewRNG(seed), Dev: dev}
	C := cfg.NEmbd
	residStd := float32(initStd / math.Sqrt(2*float64(cfg.NLayer)))
	m := &GPT{Config: cfg, dropRNG: tensor.NewRNG(seed ^ 0x5eed)}
	newDrop := func() *nn.Dropout {
		d := &nn.Dropout{P: cfg.Dropout, RNG: m.dropRNG}
		m.dropouts = append(m.dropouts, d)
		return d
	}
	m.WTE = nn.NewEmbedding("transformer.wte", in, cfg.VocabSize, C, initStd)
	m.WPE = nn.NewEmbedding("transformer.wpe", in, cfg.BlockSize, C, initStd)
	m.Drop = newDrop()
	for i := 0; i < cfg.NLayer; i++ {
		p := fmt.Sprintf("transformer.h.%d.", i)
		m.Blocks = append(m.Blocks, &Block{
			LN1: nn.NewLayerNorm(p+"ln_1", in, C, cfg.Bias, lnEps),
			Attn: &nn.CausalSelfAttention{
				CAttn:     nn.NewLinear(p+"attn.c_attn", in, C, 3*C, cfg.Bias, initStd),
				CProj:     nn.NewLinear(p+"attn.c_proj", in, C, C, cfg.Bias, residStd),
				NHead:     cfg.NHead,
				ResidDrop: newDrop(),
			},
			LN2: nn.NewLayerNorm(p+"ln_2", in, C, cfg.Bias, lnEps),
			MLP: &nn.MLP{
				CFC:   nn.NewLinear(p+"mlp.c_fc", in, C, 4*C, cfg.Bias, initStd),
				CProj: nn.NewLinear(p+"mlp.c_proj", in, 4*C, C, cfg.Bias, residStd),
				Drop:  newDrop(),
			},
		})
	}
	m.LNF = nn.NewLayerNorm("transformer.ln_f", in, C, cfg.Bias, lnEps)
	m.SetTraining(true)
	return m
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

// SetDropoutSeed reseeds the dropout masks, e.g. per optimizer step, so a
// run's masks do not depend on how many forward passes came before.
func (m *GPT) SetDropoutSeed(seed uint64) { m.dropRNG.State = seed }

// SetRecompute turns activation recomputation on or off (it is off by
// default). With it on, each block's forward pass keeps only its output:
// the backward pass runs the block again, with the same dropout masks and
// autocast policy, just before differentiating it (tensor.CheckpointRNG).
// On the CPU the gradients are the same bit for bit; a training step
// costs about one more forward pass of the blocks (about 1.3× the time)
// and its peak memory holds one block's activations instead of all of
// them. Evaluation (no gradients) is unaffected apart from freeing each
// block's temporaries as it goes.
func (m *GPT) SetRecompute(on bool) {
	m.recompute = on
	for _, b := range m.Blocks {
		if on && b.checkpointed == nil {
			b.checkpointed = b.forwardArgs
		}
	}
}

// Recompute reports whether activation recomputation is on.
func (m *GPT) Recompute() bool { return m.recompute }

// Parameters lists every parameter once, in checkpoint order.
func (m *GPT) Parameters() []*nn.Parameter {
	ps := []*nn.Parameter{m.WTE.W, m.WPE.W}
	for _, b := range m.Blocks {
		ps = append(ps, b.LN1.Parameters()...)
		ps = append(ps, b.Attn.Parameters()...)
		ps = append(ps, b.LN2.Parameters()...)
		ps = append(ps, b.MLP.Parameters()...)
	}
	return append(ps, m.LNF.Parameters()...)
}

// NumParams counts the parameters (the tied head counted once).
func (m *GPT) NumParams() int {
	n := 0
	for _, p := range m.Parameters() {
		n += p.T.Numel()
	}
	return n
}

// FLOPsPerToken estimates training FLOPs per token: 6 per parameter plus
// attention's 12·n_layer·n_embd·T (the PaLM appendix estimate).
func (m *GPT) FLOPsPerToken(T int) float64 {
	c := m.Config
	return 6*float64(m.NumParams()) + 12*float64(c.NLayer*c.NEmbd*T)
}

// To moves the model to dev.
func (m *GPT) To(dev tensor.Device) {
	for _, p := range m.Parameters() {
		p.To(dev)
	}
	for k, t := range m.posIDs {
		t.Free()
		delete(m.posIDs, k)
	}
}

// positionsFrom0 returns the persistent position ids [B, T] (0..T-1 in each
// row) on the model's device, uploading them only the first time a shape
// is seen: training asks for the same shape every step.
func (m *GPT) positionsFrom0(B, T int) *tensor.Tensor {
	k := [2]int{B, T}
	if t, ok := m.posIDs[k]; ok {
		return t
	}
	if m.posIDs == nil {
		m.posIDs = map[[2]int]*tensor.Tensor{}
	}
	var t *tensor.Tensor
	tensor.Persist(func() { t = positions(m.Device(), B, T, 0) })
	m.posIDs[k] = t
	return t
}

// Device is where the parameters live.
func (m *GPT) Device() tensor.Device { return m.WTE.W.T.Device() }

// positions returns I32 position ids [B, T] counting from start.
func positions(dev tensor.Device, B, T, start int) *tensor.Tensor {
	ids := make([]int32, B*T)
	for i := range ids {
		ids[i] = int32(start + i%T)
	}
	return tensor.FromInt32s(dev, ids, B, T)
}

// Forward maps token ids [B, T] (I32) to logits [B, T, vocab].
func (m *GPT) Forward(idx *tensor.Tensor) *tensor.Tensor {
	B, T := idx.Dim(0), idx.Dim(1)
	if T > m.Config.BlockSize {
		panic(&tensor.Error{Op: "gpt", Msg: fmt.Sprintf("sequence of %d exceeds block size %d", T, m.Config.BlockSize)})
	}
	x := tensor.Add(m.WTE.Forward(idx), m.WPE.Forward(m.positionsFrom0(B, T)))
	x = m.Drop.Forward(x)
	for _, b := range m.Blocks {
		if m.recompute {
			x = tensor.CheckpointRNG(m.dropRNG, b.checkpointed, x)
		} else {
			x = b.Forward(x)
		}
	}
	return tensor.LinearT(m.LNF.Forward(x), m.WTE.W.T)
}

// Loss is the mean cross-entropy of predicting targets [B, T] from idx [B, T].
func (m *GPT) Loss(idx, targets *tensor.Tensor) *tensor.Tensor {
	return tensor.CrossEntropy(m.Forward(idx), targets)
}
