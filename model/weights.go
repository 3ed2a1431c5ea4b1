package model

import (
	"fmt"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/tensor"
)

// WeightsFile converts the parameters to a safetensors file with Hugging
// Face GPT-2 names (the tied head is stored once, as transformer.wte.weight).
func (m *GPT) WeightsFile(meta map[string]string) *checkpoint.File {
	f := &checkpoint.File{Metadata: meta, Tensors: map[string]checkpoint.Tensor{}}
	for _, p := range m.Parameters() {
		f.Tensors[p.Name] = checkpoint.F32Tensor(p.T.Shape(), p.T.Float32s())
	}
	return f
}

// SaveWeights writes the weights atomically to path.
func (m *GPT) SaveWeights(path string, meta map[string]string) error {
	return checkpoint.Save(path, m.WeightsFile(meta))
}

// LoadWeights reads weights saved by SaveWeights or, for a GPT-2, by
// Hugging Face (prefixed "transformer." names or the hub's unprefixed
// ones). Buffers
// that are not weights (attn.bias, attn.masked_bias) and lm_head.weight
// (tied) are ignored. Every parameter must be present with its shape.
func (m *GPT) LoadWeights(path string) error {
	f, err := checkpoint.Load(path)
	if err != nil {
		return err
	}
	if err := m.SetWeights(f); err != nil {
		return fmt.Errorf("load weights %s: %w", path, err)
	}
	return nil
}

// SetWeights copies the tensors of f into the parameters. A GPT-2's names
// may be fleet's (Hugging Face's prefixed ones) or the hub's unprefixed
// ones; non-weight buffers are ignored, and an lm_head.weight must equal
// wte. A Llama's and an LSTM's are fleet's own.
func (m *GPT) SetWeights(f *checkpoint.File) error {
	if m.Config.Family() != ArchGPT2 {
		return m.setWeights(f.Tensors)
	}
	byName, head := hfWeights(f)
	if err := m.setWeights(byName); err != nil {
		return err
	}
	return checkHead(head, byName["transformer.wte.weight"])
}

// setWeights copies the tensors byName names into the parameters.
func (m *GPT) setWeights(byName map[string]checkpoint.Tensor) error {
	for _, p := range m.Parameters() {
		t, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("missing tensor %s (the model has %d layers, bias=%v)", p.Name, m.Config.NLayer, m.Config.Bias)
		}
		if !tensor.Shape(t.Shape).Equal(p.T.Shape()) {
			return fmt.Errorf("tensor %s has shape %v, the config (%s) gives %v", p.Name, t.Shape, m.Config.short(), p.T.Shape())
		}
		switch t.DType {
		case checkpoint.F32, checkpoint.F16, checkpoint.BF16, checkpoint.F64:
		default:
			return fmt.Errorf("tensor %s has dtype %s, want a float type (F32, F16, BF16, F64)", p.Name, t.DType)
		}
		v, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("tensor %s: %w", p.Name, err)
		}
		p.T.SetFloat32s(v)
	}
	return nil
}

// short describes the config's shape for errors.
func (c Config) short() string {
	s := fmt.Sprintf("vocab %d, block %d, %d layers, %d embd, bias=%v", c.VocabSize, c.BlockSize, c.NLayer, c.NEmbd, c.Bias)
	if c.IsLlama() {
		s = fmt.Sprintf("arch %s, %s, %d heads of %d, %d key/value heads, mlp %s, mlp_hidden %d, qk_norm=%v, qkv_bias=%v, untied_head=%v",
			c.Arch, s, c.NHead, c.headDim(), c.kvHeads(), c.mlpName(), c.mlpHidden(), c.QKNorm, c.QKVBias, c.UntiedHead)
	}
	if c.IsLSTM() {
		s = fmt.Sprintf("arch %s, %s, untied_head=%v", c.Arch, s, c.UntiedHead)
	}
	return s
}
