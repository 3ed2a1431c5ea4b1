package model

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/tensor"
)

// hfWeights maps the tensors of a GPT-2 file to fleet's parameter names:
// unprefixed hub names get "transformer.", and the buffers that are not
// weights (h.N.attn.bias, h.N.attn.masked_bias) and lm_head.weight (tied
// to wte; returned apart) are dropped.
func hfWeights(f *checkpoint.File) (byName map[string]checkpoint.Tensor, head *checkpoint.Tensor) {
	byName = map[string]checkpoint.Tensor{}
	for name, t := range f.Tensors {
		if strings.HasSuffix(name, ".attn.bias") || strings.HasSuffix(name, ".attn.masked_bias") {
			continue
		}
		if name == "lm_head.weight" {
			head = &t
			continue
		}
		if !strings.HasPrefix(name, "transformer.") {
			name = "transformer." + name
		}
		byName[name] = t
	}
	return byName, head
}

// gpt2Heads is the head count of each GPT-2 width (head size 64).
var gpt2Heads = map[int]int{768: 12, 1024: 16, 1280: 20, 1600: 25}

// InferConfig infers a model's shape from the tensors of a GPT-2 file
// (fleet's or Hugging Face's names): the vocabulary and width from wte,
// the block size from wpe, the layers from h.N, and biases from ln_f.bias.
// The number of heads is nHead when positive, else GPT-2's for the width
// (64-wide heads); other widths need nHead.
func InferConfig(f *checkpoint.File, nHead int) (Config, error) {
	w, _ := hfWeights(f)
	var c Config
	wte, ok := w["transformer.wte.weight"]
	if !ok || len(wte.Shape) != 2 {
		return c, fmt.Errorf("no 2-D tensor transformer.wte.weight (or wte.weight): not a GPT-2 checkpoint")
	}
	c.VocabSize, c.NEmbd = wte.Shape[0], wte.Shape[1]
	wpe, ok := w["transformer.wpe.weight"]
	if !ok || len(wpe.Shape) != 2 || wpe.Shape[1] != c.NEmbd {
		return c, fmt.Errorf("no tensor transformer.wpe.weight of shape [T, %d]", c.NEmbd)
	}
	c.BlockSize = wpe.Shape[0]
	layers := map[int]bool{}
	for name := range w {
		rest, ok := strings.CutPrefix(name, "transformer.h.")
		if !ok {
			continue
		}
		i, _, _ := strings.Cut(rest, ".")
		n, err := strconv.Atoi(i)
		if err != nil || n < 0 {
			return c, fmt.Errorf("tensor %s: bad layer number", name)
		}
		layers[n] = true
	}
	c.NLayer = len(layers)
	for n := range layers {
		if n >= c.NLayer {
			return c, fmt.Errorf("layers are not numbered 0..%d: layer %d is present", c.NLayer-1, n)
		}
	}
	_, c.Bias = w["transformer.ln_f.bias"]
	c.NHead = nHead
	if c.NHead <= 0 {
		if c.NHead = gpt2Heads[c.NEmbd]; c.NHead == 0 {
			return c, setting.Errorf("n_embd %d is not a GPT-2 width, so the number of heads cannot be inferred; give {NHead}", c.NEmbd)
		}
	}
	return c, c.Validate()
}

// LoadGPT2 loads a GPT-2 safetensors file (fleet's, or Hugging Face's in
// either naming) onto dev, its shape inferred by InferConfig.
func LoadGPT2(path string, nHead int, dev tensor.Device) (*GPT, error) {
	f, err := checkpoint.Load(path)
	if err != nil {
		return nil, err
	}
	c, err := InferConfig(f, nHead)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m, err := New(c, dev, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := m.SetWeights(f); err != nil {
		return nil, fmt.Errorf("load weights %s: %w", path, err)
	}
	return m, nil
}

// HFConfig is the config.json with which transformers' GPT2LMHeadModel
// loads the weights that ExportHF writes.
func (c Config) HFConfig() map[string]any {
	eot := c.VocabSize - 1
	if c.VocabSize > 50256 {
		eot = 50256 // GPT-2's <|endoftext|>, below nanoGPT's padding to 50304
	}
	return map[string]any{
		"architectures":                   []string{"GPT2LMHeadModel"},
		"model_type":                      "gpt2",
		"vocab_size":                      c.VocabSize,
		"n_positions":                     c.BlockSize,
		"n_ctx":                           c.BlockSize,
		"n_embd":                          c.NEmbd,
		"n_layer":                         c.NLayer,
		"n_head":                          c.NHead,
		"n_inner":                         nil,
		"activation_function":             "gelu_new",
		"layer_norm_epsilon":              lnEps,
		"resid_pdrop":                     c.Dropout,
		"embd_pdrop":                      c.Dropout,
		"attn_pdrop":                      c.Dropout,
		"initializer_range":               initStd,
		"tie_word_embeddings":             true,
		"scale_attn_weights":              true,
		"torch_dtype":                     "float32",
		"bos_token_id":                    eot,
		"eos_token_id":                    eot,
		"summary_type":                    "cls_index",
		"summary_use_proj":                true,
		"summary_activation":              nil,
		"summary_proj_to_labels":          true,
		"summary_first_dropout":           0.1,
		"reorder_and_upcast_attn":         false,
		"scale_attn_by_inverse_layer_idx": false,
	}
}

// HFWeightsFile is WeightsFile as GPT2LMHeadModel loads it: a model
// without biases gets zero biases (GPT-2 always has them; zeros compute
// the same), and the metadata says format pt.
func (m *GPT) HFWeightsFile() *checkpoint.File {
	f := m.WeightsFile(map[string]string{"format": "pt"})
	if m.Config.Bias {
		return f
	}
	C := m.Config.NEmbd
	zeros := func(n int) checkpoint.Tensor { return checkpoint.F32Tensor([]int{n}, make([]float32, n)) }
	add := func(name string, n int) { f.Tensors[name] = zeros(n) }
	for i := 0; i < m.Config.NLayer; i++ {
		p := fmt.Sprintf("transformer.h.%d.", i)
		add(p+"ln_1.bias", C)
		add(p+"ln_2.bias", C)
		add(p+"attn.c_attn.bias", 3*C)
		add(p+"attn.c_proj.bias", C)
		add(p+"mlp.c_fc.bias", 4*C)
		add(p+"mlp.c_proj.bias", C)
	}
	add("transformer.ln_f.bias", C)
	return f
}

// HFConfigJSON is HFConfig encoded.
func (c Config) HFConfigJSON() []byte {
	b, _ := json.MarshalIndent(c.HFConfig(), "", "  ")
	return append(b, '\n')
}

// checkHead reports whether an lm_head.weight is the tied wte (fleet's
// model ties them; an untied head cannot be loaded).
func checkHead(head *checkpoint.Tensor, wte checkpoint.Tensor) error {
	if head == nil {
		return nil
	}
	if !slices.Equal(head.Shape, wte.Shape) {
		return fmt.Errorf("tensor lm_head.weight has shape %v, wte %v", head.Shape, wte.Shape)
	}
	a, err := head.Float32s()
	if err != nil {
		return fmt.Errorf("tensor lm_head.weight: %w", err)
	}
	b, err := wte.Float32s()
	if err != nil {
		return fmt.Errorf("tensor wte.weight: %w", err)
	}
	if !slices.Equal(a, b) {
		return fmt.Errorf("tensor lm_head.weight differs from wte.weight: an untied head is not supported (fleet ties them, as GPT-2 does)")
	}
	return nil
}
