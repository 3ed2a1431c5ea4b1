package model

import (
	"fmt"
	"strings"

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

// LoadWeights reads weights saved by SaveWeights or by Hugging Face
// (prefixed "transformer." names or the hub's unprefixed ones). Buffers
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

// SetWeights copies the tensors of f into the parameters.
func (m *GPT) SetWeights(f *checkpoint.File) error {
	byName := map[string]checkpoint.Tensor{}
	for name, t := range f.Tensors {
		if strings.HasSuffix(name, ".attn.bias") || strings.HasSuffix(name, ".attn.masked_bias") || name == "lm_head.weight" {
			continue
		}
		if !strings.HasPrefix(name, "transformer.") {
			name = "transformer." + name
		}
		byName[name] = t
	}
	for _, p := range m.Parameters() {
		t, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("missing tensor %s", p.Name)
		}
		if !tensor.Shape(t.Shape).Equal(p.T.Shape()) {
			return fmt.Errorf("tensor %s has shape %v, model expects %v", p.Name, t.Shape, p.T.Shape())
		}
		v, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("tensor %s: %w", p.Name, err)
		}
		p.T.SetFloat32s(v)
	}
	return nil
}
