package model

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// ArchLSTM is the recurrent family: a token embedding, NLayer LSTM layers
// of NEmbd units (every layer's input and hidden state are NEmbd wide, so
// the head can be tied to the embedding), and a head without a bias, tied
// or untied. Dropout (Config.Dropout) sits on every connection that is
// not recurrent: the embedding's output, between layers and before the
// head. It is trained on the trainer's windows like any model: each
// window is a sequence of its own, its state starting at zero, and the
// gradient flows back through all of its BlockSize steps (truncated
// backpropagation through time, one window long).
const ArchLSTM = "lstm"

type lstmFamily struct{}

// lstmEmbedStd is the standard deviation of an LSTM's embedding and head.
const lstmEmbedStd = 1

// IsLSTM reports whether c is a recurrent model.
func (c Config) IsLSTM() bool { return c.Arch == ArchLSTM }

func (lstmFamily) validate(c Config) error {
	var other []string
	for _, f := range []struct {
		set  bool
		name string
	}{{c.NKVHead != 0, "n_kv_head"}, {c.HeadDim != 0, "head_dim"}, {c.MLPHidden != 0, "mlp_hidden"},
		{c.RopeTheta != 0, "rope_theta"}, {c.RopeScaling != nil, "rope_scaling"}, {c.NormEps != 0, "norm_eps"},
		{c.QKNorm, "qk_norm"}, {c.QKVBias, "qkv_bias"}, {c.MLP != "", "mlp"}} {
		if f.set {
			other = append(other, f.name)
		}
	}
	if len(other) > 0 {
		return fmt.Errorf("%v are settings of arch %s; an %s model has none", other, ArchLlama, ArchLSTM)
	}
	return nil
}

// buildLSTM builds the recurrent model: the embedding (embed) and an
// untied head (head.weight) from N(0, 1), nn.Embedding's default, and
// layers lstm.{i} whose weights come from N(0, 1/(3·H)), the variance of
// PyTorch's U(−1/√H, 1/√H), with zero biases (where Config.Bias). At
// GPT-2's 0.02 for the embedding and the head, the reference 4-layer LSTM
// sat at the unigram loss (val 3.35 at step 300, against 2.28 at N(0, 1);
// torch.nn.LSTM with a 0.02 embedding did the same; docs/models.md).
func buildLSTM(m *GPT, in nn.Init) {
	cfg := m.Config
	H := cfg.NEmbd
	std := float32(1 / math.Sqrt(3*float64(H)))
	m.WTE = nn.NewEmbedding("embed", in, cfg.VocabSize, H, lstmEmbedStd)
	m.Drop = m.newDrop()
	for i := 0; i < cfg.NLayer; i++ {
		m.RNN = append(m.RNN, nn.NewLSTM(fmt.Sprintf("lstm.%d", i), in, H, H, cfg.Bias, std))
		m.RNNDrop = append(m.RNNDrop, m.newDrop())
	}
	m.Head = m.WTE.W
	if cfg.UntiedHead {
		m.Head = nn.NewParameter("head.weight", in.Normal(lstmEmbedStd, cfg.VocabSize, H))
	}
}

func (lstmFamily) build(m *GPT, in nn.Init) { buildLSTM(m, in) }

func (lstmFamily) hfFolder(*GPT, bool) (*checkpoint.File, []byte, error) {
	return nil, nil, fmt.Errorf("an %s model has no Hugging Face architecture to export as; its weights are the run's model.safetensors", ArchLSTM)
}

// forwardLSTM maps token ids [B, T] to logits [B, T, vocab] through the
// recurrent layers. With a cache (inference) each layer starts from the
// cache's state and leaves its last step's there.
func (m *GPT) forwardLSTM(idx *tensor.Tensor, p *Pass) *tensor.Tensor {
	x := m.embed(idx, p)
	for i, l := range m.RNN {
		var st *tensor.LSTMState
		if p.Cache != nil {
			st = p.Cache.State[i]
		}
		x = m.RNNDrop[i].Forward(l.Forward(x, st), p.masks())
	}
	return tensor.LinearT(x, m.Head.T)
}

// newLSTMState makes the cache's state of each layer, zeros [1, H].
func (m *GPT) newLSTMState(c *KVCache) {
	for range m.RNN {
		c.State = append(c.State, &tensor.LSTMState{
			H: tensor.Zeros(m.Device(), 1, m.Config.NEmbd), C: tensor.Zeros(m.Device(), 1, m.Config.NEmbd)})
	}
}

// resetLSTMState zeroes the cache's state: a sequence starting over.
func (c *KVCache) resetLSTMState() {
	for _, s := range c.State {
		tensor.Fill(s.H, 0)
		tensor.Fill(s.C, 0)
	}
}
