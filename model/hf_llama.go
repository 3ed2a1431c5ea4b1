package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/tensor"
)

// Hugging Face folders of the Llama family: LlamaForCausalLM,
// MistralForCausalLM (without sliding windows), Qwen2ForCausalLM,
// Qwen3ForCausalLM and ArceeForCausalLM (Llama's blocks with a ReLU²
// feed-forward). A folder holds config.json and the weights, one
// model.safetensors or shards listed by model.safetensors.index.json,
// under Hugging Face's names: nn.Linear weights [out, in], q_proj, k_proj
// and v_proj apart, gate_proj and up_proj apart. fleet's Llama keeps
// [in, out] weights with q, k and v in one projection (qkv_proj) and the
// gate and up in one (gate_up_proj); reading and writing a folder
// converts between the two.

// hfArchs are the architectures a folder may name, and what each implies.
var hfArchs = map[string]struct {
	qkvBias, qkNorm bool
	mlp             string // the feed-forward (MLPSwiGLU where empty)
}{
	"LlamaForCausalLM":   {},
	"MistralForCausalLM": {},
	"Qwen2ForCausalLM":   {qkvBias: true},
	"Qwen3ForCausalLM":   {qkNorm: true},
	"ArceeForCausalLM":   {mlp: MLPReLU2},
}

// hfConfig is the fields of a Hugging Face config.json that fleet reads.
type hfConfig struct {
	Architectures  []string        `json:"architectures"`
	VocabSize      int             `json:"vocab_size"`
	Hidden         int             `json:"hidden_size"`
	Intermediate   int             `json:"intermediate_size"`
	Layers         int             `json:"num_hidden_layers"`
	Heads          int             `json:"num_attention_heads"`
	KVHeads        *int            `json:"num_key_value_heads"`
	HeadDim        *int            `json:"head_dim"`
	MaxPositions   int             `json:"max_position_embeddings"`
	RMSNormEps     *float64        `json:"rms_norm_eps"`
	RopeTheta      *float64        `json:"rope_theta"`
	RopeScaling    json.RawMessage `json:"rope_scaling"`
	Tie            *bool           `json:"tie_word_embeddings"`
	AttentionBias  *bool           `json:"attention_bias"`
	MLPBias        *bool           `json:"mlp_bias"`
	HiddenAct      string          `json:"hidden_act"`
	SlidingWindow  *int            `json:"sliding_window"`
	UseSliding     *bool           `json:"use_sliding_window"`
	TorchDType     string          `json:"torch_dtype"`
	PartialRotary  *float64        `json:"partial_rotary_factor"`
	AttnLogitSoft  *float64        `json:"attn_logit_softcapping"`
	FinalLogitSoft *float64        `json:"final_logit_softcapping"`
}

// IsHFFolder reports whether path is a folder holding a config.json.
func IsHFFolder(path string) bool {
	st, err := os.Stat(filepath.Join(path, "config.json"))
	return err == nil && !st.IsDir()
}

// ReadHFConfig reads the config.json of a Hugging Face folder of the
// Llama family into a Config, refusing, by field, what fleet does not
// run. The model's context (BlockSize) is max_position_embeddings, or
// blockSize where that is positive and shorter.
func ReadHFConfig(dir string, blockSize int) (Config, error) {
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return Config{}, fmt.Errorf("%s is empty", path)
	}
	var h hfConfig
	if err := json.Unmarshal(b, &h); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	c, err := h.config(blockSize)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func (h hfConfig) config(blockSize int) (Config, error) {
	if len(h.Architectures) != 1 {
		return Config{}, fmt.Errorf("architectures %v: want one of %s", h.Architectures, archNames())
	}
	arch, ok := hfArchs[h.Architectures[0]]
	if !ok {
		return Config{}, fmt.Errorf("architectures %v: fleet reads %s", h.Architectures, archNames())
	}
	c := Config{Arch: ArchLlama, VocabSize: h.VocabSize, NEmbd: h.Hidden, NLayer: h.Layers, NHead: h.Heads,
		MLPHidden: h.Intermediate, BlockSize: h.MaxPositions, QKVBias: arch.qkvBias, QKNorm: arch.qkNorm, RopeTheta: 10000,
		MLP: arch.mlp}
	act := "silu" // the activation the architecture's feed-forward has
	if arch.mlp == MLPReLU2 {
		act = "relu2"
	}
	if blockSize > 0 && blockSize < c.BlockSize {
		c.BlockSize = blockSize
	}
	if h.KVHeads != nil {
		c.NKVHead = *h.KVHeads
	}
	if h.HeadDim != nil {
		c.HeadDim = *h.HeadDim
	}
	if h.RMSNormEps != nil {
		c.NormEps = *h.RMSNormEps
	}
	if h.RopeTheta != nil {
		c.RopeTheta = *h.RopeTheta
	}
	c.UntiedHead = h.Tie == nil || !*h.Tie // these architectures' default: untied
	if h.AttentionBias != nil && *h.AttentionBias {
		if arch.qkvBias {
			return Config{}, errors.New("attention_bias: true is not Qwen2's (whose q, k and v have biases, the output none)")
		}
		c.Bias = true
	}
	switch {
	case h.MLPBias != nil && *h.MLPBias:
		return Config{}, errors.New("mlp_bias: true is not supported (the feed-forward has no biases)")
	case h.HiddenAct != "" && h.HiddenAct != act:
		return Config{}, fmt.Errorf("hidden_act %q is not supported (%s's is %s)", h.HiddenAct, h.Architectures[0], act)
	case h.UseSliding != nil && *h.UseSliding:
		return Config{}, errors.New("use_sliding_window: true is not supported (attention is over the whole context)")
	case h.SlidingWindow != nil && h.Architectures[0] == "MistralForCausalLM" && *h.SlidingWindow < c.BlockSize:
		return Config{}, fmt.Errorf("sliding_window %d is not supported (attention is over the whole context of %d)", *h.SlidingWindow, c.BlockSize)
	case h.PartialRotary != nil && *h.PartialRotary != 1:
		return Config{}, fmt.Errorf("partial_rotary_factor %v is not supported", *h.PartialRotary)
	case h.AttnLogitSoft != nil || h.FinalLogitSoft != nil:
		return Config{}, errors.New("logit soft-capping is not supported")
	}
	if s := strings.TrimSpace(string(h.RopeScaling)); s != "" && s != "null" {
		var rs struct {
			Type string `json:"rope_type"`
			Old  string `json:"type"`
			RopeScaling
		}
		if err := json.Unmarshal(h.RopeScaling, &rs); err != nil {
			return Config{}, fmt.Errorf("rope_scaling: %w", err)
		}
		t := rs.Type
		if t == "" {
			t = rs.Old // older configs' name for it
		}
		if t != "llama3" {
			return Config{}, fmt.Errorf("rope_scaling of type %q is not supported (llama3 is)", t)
		}
		c.RopeScaling = &rs.RopeScaling
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

func archNames() string {
	names := make([]string, 0, len(hfArchs))
	for n := range hfArchs {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// ReadHFTensors reads the weights of a Hugging Face folder: one
// model.safetensors, or the shards model.safetensors.index.json lists.
func ReadHFTensors(dir string) (map[string]checkpoint.Tensor, error) {
	index := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(index); err == nil {
		var ix struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &ix); err != nil {
			return nil, fmt.Errorf("%s: %w", index, err)
		}
		files := map[string]bool{}
		for _, f := range ix.WeightMap {
			files[f] = true
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%s lists no weights", index)
		}
		out := map[string]checkpoint.Tensor{}
		for f := range files {
			if f != filepath.Base(f) {
				return nil, fmt.Errorf("%s: shard %q is not a file of the folder", index, f)
			}
			cf, err := checkpoint.Load(filepath.Join(dir, f))
			if err != nil {
				return nil, err
			}
			for n, t := range cf.Tensors {
				if ix.WeightMap[n] == f {
					out[n] = t
				}
			}
		}
		for n, f := range ix.WeightMap {
			if _, ok := out[n]; !ok {
				return nil, fmt.Errorf("%s: %s lists %s, which it does not hold", index, f, n)
			}
		}
		return out, nil
	}
	cf, err := checkpoint.Load(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	return cf.Tensors, nil
}

// LoadHF builds the model of a Hugging Face folder on dev with its
// weights (ReadHFConfig, ReadHFTensors, FromHF).
func LoadHF(dir string, blockSize int, dev tensor.Device) (*GPT, error) {
	c, err := ReadHFConfig(dir, blockSize)
	if err != nil {
		return nil, err
	}
	ts, err := ReadHFTensors(dir)
	if err != nil {
		return nil, err
	}
	fleet, err := FromHF(c, ts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	m, err := New(c, dev, 0)
	if err != nil {
		return nil, err
	}
	if err := m.SetWeights(&checkpoint.File{Tensors: fleet}); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

// FromHF converts Hugging Face tensors to fleet's Llama parameters:
// q, k and v fused (transposed, side by side) into qkv_proj, gate and up
// into gate_up_proj, the other Linears transposed. A tied head's
// lm_head.weight, if the file has one, is dropped. Tensors it does not
// know are kept under their names (SetWeights ignores them). A part that
// is missing, or whose shape does not fit its fellows, is an error naming
// it.
func FromHF(c Config, ts map[string]checkpoint.Tensor) (map[string]checkpoint.Tensor, error) {
	out := map[string]checkpoint.Tensor{}
	used := map[string]bool{}
	take := func(name string) (checkpoint.Tensor, bool) {
		t, ok := ts[name]
		used[name] = ok || used[name]
		return t, ok
	}
	qkvBias := c.Bias || c.QKVBias
	for i := 0; i < c.NLayer; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		for _, f := range []struct {
			name      string
			want      bool
			transpose bool
			parts     []string
		}{
			{p + "self_attn.qkv_proj.weight", true, true, []string{p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"}},
			{p + "self_attn.qkv_proj.bias", qkvBias, false, []string{p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"}},
			{p + "mlp.gate_up_proj.weight", !c.reLU2(), true, []string{p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}},
			{p + "mlp.up_proj.weight", c.reLU2(), true, []string{p + "mlp.up_proj.weight"}},
			{p + "self_attn.o_proj.weight", true, true, []string{p + "self_attn.o_proj.weight"}},
			{p + "mlp.down_proj.weight", true, true, []string{p + "mlp.down_proj.weight"}},
		} {
			if !f.want {
				continue
			}
			if err := fuse(out, f.name, take, f.transpose, f.parts...); err != nil {
				return nil, err
			}
		}
	}
	if !c.UntiedHead {
		used["lm_head.weight"] = true
	}
	for n, t := range ts {
		if !used[n] {
			out[n] = t
		}
	}
	return out, nil
}

// fuse puts the tensors parts (Linear weights [out, in], transposed to
// [in, out] where transpose, or biases) side by side along their output
// axis into out[name].
func fuse(out map[string]checkpoint.Tensor, name string, take func(string) (checkpoint.Tensor, bool), transpose bool, parts ...string) error {
	var vals [][]float32
	var outs []int
	in := -1
	for _, p := range parts {
		t, ok := take(p)
		if !ok {
			return fmt.Errorf("missing tensor %s", p)
		}
		v, err := t.Float32s()
		if err != nil {
			return fmt.Errorf("tensor %s: %w", p, err)
		}
		if want := 1 + btoi(transpose); len(t.Shape) != want || (transpose && in >= 0 && t.Shape[1] != in) {
			return fmt.Errorf("tensor %s has shape %v, which does not fit %s", p, t.Shape, strings.Join(parts, ", "))
		}
		if transpose {
			in = t.Shape[1]
		}
		vals, outs = append(vals, v), append(outs, t.Shape[0])
	}
	total := 0
	for _, o := range outs {
		total += o
	}
	if !transpose {
		var v []float32
		for _, p := range vals {
			v = append(v, p...)
		}
		out[name] = checkpoint.F32Tensor([]int{total}, v)
		return nil
	}
	v := make([]float32, in*total)
	col := 0
	for k, p := range vals {
		for o := 0; o < outs[k]; o++ {
			for i := 0; i < in; i++ {
				v[i*total+col+o] = p[o*in+i]
			}
		}
		col += outs[k]
	}
	out[name] = checkpoint.F32Tensor([]int{in, total}, v)
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ToHF converts fleet's Llama parameters (or their gradients: any
// tensors under the parameters' names) to Hugging Face's: qkv_proj split
// into q_proj, k_proj and v_proj, gate_up_proj into gate_proj and up_proj
// (ReLU²'s up_proj is one already), every Linear weight transposed to
// [out, in]. A tied head writes no
// lm_head.weight (tie_word_embeddings says so).
func ToHF(c Config, ts map[string]checkpoint.Tensor) (map[string]checkpoint.Tensor, error) {
	out := map[string]checkpoint.Tensor{}
	H, KVH, HD, hid := c.NHead, c.kvHeads(), c.headDim(), c.mlpHidden()
	for name, t := range ts {
		v, err := t.Float32s()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		switch {
		case strings.HasSuffix(name, "self_attn.qkv_proj.weight"):
			p := strings.TrimSuffix(name, "qkv_proj.weight")
			split(out, t.Shape, v, true, []string{p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"}, []int{H * HD, KVH * HD, KVH * HD})
		case strings.HasSuffix(name, "self_attn.qkv_proj.bias"):
			p := strings.TrimSuffix(name, "qkv_proj.bias")
			split(out, t.Shape, v, false, []string{p + "q_proj.bias", p + "k_proj.bias", p + "v_proj.bias"}, []int{H * HD, KVH * HD, KVH * HD})
		case strings.HasSuffix(name, "mlp.gate_up_proj.weight"):
			p := strings.TrimSuffix(name, "gate_up_proj.weight")
			split(out, t.Shape, v, true, []string{p + "gate_proj.weight", p + "up_proj.weight"}, []int{hid, hid})
		case strings.HasSuffix(name, "o_proj.weight") || strings.HasSuffix(name, "down_proj.weight") || strings.HasSuffix(name, "mlp.up_proj.weight"):
			split(out, t.Shape, v, true, []string{name}, []int{t.Shape[1]})
		default:
			out[name] = checkpoint.F32Tensor(slices.Clone(t.Shape), v)
		}
	}
	return out, nil
}

// split cuts v ([in, Σ widths] where transpose, else [Σ widths]) along
// its output axis into out[names[k]], transposed to [widths[k], in].
func split(out map[string]checkpoint.Tensor, shape []int, v []float32, transpose bool, names []string, widths []int) {
	if !transpose {
		off := 0
		for k, n := range names {
			out[n] = checkpoint.F32Tensor([]int{widths[k]}, slices.Clone(v[off:off+widths[k]]))
			off += widths[k]
		}
		return
	}
	in, total := shape[0], shape[1]
	col := 0
	for k, n := range names {
		w := make([]float32, widths[k]*in)
		for o := 0; o < widths[k]; o++ {
			for i := 0; i < in; i++ {
				w[o*in+i] = v[i*total+col+o]
			}
		}
		out[n] = checkpoint.F32Tensor([]int{widths[k], in}, w)
		col += widths[k]
	}
}
