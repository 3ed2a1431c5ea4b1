package model

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// The model families (Config.Arch). A family builds its modules and
// checks the settings that are its own; everything that runs a
// Transformer (Forward, the stages, generation) is the same for both of
// its families. The recurrent family (lstm.go) has its own forward pass
// and generation, and no pipeline stages.
const (
	ArchGPT2  = "gpt2"
	ArchLlama = "llama"
)

// A Llama's feed-forwards (Config.MLP): SwiGLU (Llama's, Qwen's: gate
// and up projections, silu(gate)·up, the down projection), or ReLU²
// (modded-nanogpt's and Arcee's: an up projection, max(x, 0)², the down
// projection).
const (
	MLPSwiGLU = "swiglu"
	MLPReLU2  = "relu2"
)

// family is one Arch's builder, and its Hugging Face folder's writer
// (HFFolder).
type family interface {
	validate(c Config) error
	build(m *GPT, in nn.Init)
	hfFolder(m *GPT, bf16 bool) (*checkpoint.File, []byte, error)
}

type gpt2Family struct{}
type llamaFamily struct{}

// family is c's family, or an error naming the unknown Arch.
func (c Config) family() (family, error) {
	switch c.Arch {
	case "", ArchGPT2:
		return gpt2Family{}, nil
	case ArchLlama:
		return llamaFamily{}, nil
	case ArchLSTM:
		return lstmFamily{}, nil
	}
	return nil, fmt.Errorf("arch must be %s, %s or %s, got %q", ArchGPT2, ArchLlama, ArchLSTM, c.Arch)
}

// Family is c's Arch by name: gpt2 where it is empty.
func (c Config) Family() string {
	if c.Arch == "" {
		return ArchGPT2
	}
	return c.Arch
}

// IsLlama reports whether c is a Llama-style model.
func (c Config) IsLlama() bool { return c.Arch == ArchLlama }

func (gpt2Family) validate(c Config) error {
	var llamaOnly []string
	for _, f := range []struct {
		set  bool
		name string
	}{{c.NKVHead != 0, "n_kv_head"}, {c.HeadDim != 0, "head_dim"}, {c.MLPHidden != 0, "mlp_hidden"},
		{c.RopeTheta != 0, "rope_theta"}, {c.RopeScaling != nil, "rope_scaling"}, {c.NormEps != 0, "norm_eps"},
		{c.QKNorm, "qk_norm"}, {c.QKVBias, "qkv_bias"}, {c.UntiedHead, "untied_head"}, {c.MLP != "", "mlp"}} {
		if f.set {
			llamaOnly = append(llamaOnly, f.name)
		}
	}
	if len(llamaOnly) > 0 {
		return fmt.Errorf("%v are settings of arch %s; a %s model has none", llamaOnly, ArchLlama, ArchGPT2)
	}
	return nil
}

func (gpt2Family) build(m *GPT, in nn.Init) { buildGPT2(m, in) }

// hfFolder is GPT2LMHeadModel's files, in F32.
func (gpt2Family) hfFolder(m *GPT, _ bool) (*checkpoint.File, []byte, error) {
	return m.HFWeightsFile(), m.Config.HFConfigJSON(), nil
}

func (llamaFamily) validate(c Config) error {
	switch kv, hd := c.kvHeads(), c.headDim(); {
	case kv <= 0 || c.NHead%kv != 0:
		return fmt.Errorf("n_kv_head %d must divide n_head %d", c.NKVHead, c.NHead)
	case hd <= 0 || hd%2 != 0:
		return fmt.Errorf("head_dim %d must be even and positive (rotary embeddings pair a head's halves)", hd)
	case c.MLPHidden < 0:
		return fmt.Errorf("mlp_hidden must not be negative, got %d", c.MLPHidden)
	case c.RopeTheta < 0 || c.NormEps < 0:
		return fmt.Errorf("rope_theta %v and norm_eps %v must not be negative", c.RopeTheta, c.NormEps)
	case c.MLP != "" && c.MLP != MLPSwiGLU && c.MLP != MLPReLU2:
		return fmt.Errorf("mlp must be %s or %s, got %q", MLPSwiGLU, MLPReLU2, c.MLP)
	}
	if s := c.RopeScaling; s != nil {
		if s.Factor <= 0 || s.LowFreqFactor <= 0 || s.HighFreqFactor <= s.LowFreqFactor || s.OriginalMaxPositions <= 0 {
			return fmt.Errorf("rope_scaling %+v: want factor > 0, 0 < low_freq_factor < high_freq_factor, original_max_position_embeddings > 0", *s)
		}
	}
	return nil
}

// kvHeads is the number of key/value heads.
func (c Config) kvHeads() int {
	if c.NKVHead == 0 {
		return c.NHead
	}
	return c.NKVHead
}

// headDim is a head's width.
func (c Config) headDim() int {
	if c.HeadDim == 0 {
		return c.NEmbd / c.NHead
	}
	return c.HeadDim
}

// mlpHidden is the feed-forward's hidden width: MLPHidden, or GPT-2's
// 4·NEmbd for ReLU² (two matrices) and 8/3·NEmbd rounded up to a
// multiple of 8 for SwiGLU (about the same parameters in three).
func (c Config) mlpHidden() int {
	if c.MLPHidden > 0 {
		return c.MLPHidden
	}
	if c.reLU2() {
		return 4 * c.NEmbd
	}
	return (8*c.NEmbd/3 + 7) / 8 * 8
}

// reLU2 reports whether the feed-forward is ReLU²'s.
func (c Config) reLU2() bool { return c.MLP == MLPReLU2 }

// mlpName is the feed-forward's name: MLP, or swiglu where it is empty.
func (c Config) mlpName() string {
	if c.MLP == "" {
		return MLPSwiGLU
	}
	return c.MLP
}

// normEps is the norms' epsilon.
func (c Config) normEps() float32 {
	if c.NormEps == 0 {
		return lnEps
	}
	return float32(c.NormEps)
}

// RopeScaling is Llama 3.1's scaling of the rotary frequencies
// (rope_scaling of type llama3 in a Hugging Face config): wavelengths
// longer than OriginalMaxPositions/LowFreqFactor are divided by Factor,
// those shorter than OriginalMaxPositions/HighFreqFactor kept, and those
// between interpolated.
type RopeScaling struct {
	Factor               float64 `json:"factor"`
	LowFreqFactor        float64 `json:"low_freq_factor"`
	HighFreqFactor       float64 `json:"high_freq_factor"`
	OriginalMaxPositions int     `json:"original_max_position_embeddings"`
}

// InvFreq is the rotary embeddings' inverse frequency of each pair of a
// head, as Hugging Face computes it in float32: theta^(−2j/head_dim), then
// Llama 3.1's scaling where the config has it.
func (c Config) InvFreq() []float32 {
	hd, theta := c.headDim(), c.RopeTheta
	if theta == 0 {
		theta = 10000
	}
	f := make([]float32, hd/2)
	for j := range f {
		e := float32(2*j) / float32(hd)
		f[j] = 1 / float32(math.Pow(theta, float64(e)))
	}
	if s := c.RopeScaling; s != nil {
		old := float64(s.OriginalMaxPositions)
		lowWave, highWave := old/s.LowFreqFactor, old/s.HighFreqFactor
		for j, v := range f {
			wave := 2 * math.Pi / float64(v)
			switch {
			case wave > lowWave:
				f[j] = float32(float64(v) / s.Factor)
			case wave >= highWave:
				smooth := (old/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				f[j] = float32((1-smooth)*float64(v)/s.Factor + smooth*float64(v))
			}
		}
	}
	return f
}

// buildLlama builds a Llama-style model: token embedding
// (model.embed_tokens), blocks of RMSNorm, grouped-query attention with
// rotary embeddings (q, k and v in one projection, self_attn.qkv_proj;
// QK-norm where asked) and SwiGLU (gate and up in one projection,
// mlp.gate_up_proj) or ReLU² (mlp.up_proj), a final RMSNorm (model.norm)
// and an untied or tied head (lm_head). The initialisation is GPT-2's: N(0, 0.02²), the
// residual projections N(0, (0.02/√(2·n_layer))²), unit norm weights,
// zero biases.
func buildLlama(m *GPT, in nn.Init) {
	cfg := m.Config
	C, H, KVH, HD, hid, eps := cfg.NEmbd, cfg.NHead, cfg.kvHeads(), cfg.headDim(), cfg.mlpHidden(), cfg.normEps()
	residStd := float32(initStd / math.Sqrt(2*float64(cfg.NLayer)))
	m.WTE = nn.NewEmbedding("model.embed_tokens", in, cfg.VocabSize, C, initStd)
	m.Rope = &nn.Rope{InvFreq: cfg.InvFreq(), MaxPos: cfg.BlockSize}
	m.Drop = m.newDrop()
	for i := 0; i < cfg.NLayer; i++ {
		p := fmt.Sprintf("model.layers.%d.", i)
		a := &nn.CausalSelfAttention{
			CAttn:     nn.NewLinear(p+"self_attn.qkv_proj", in, C, (H+2*KVH)*HD, cfg.Bias || cfg.QKVBias, initStd),
			CProj:     nn.NewLinear(p+"self_attn.o_proj", in, H*HD, C, cfg.Bias, residStd),
			NHead:     H,
			NKVHead:   KVH,
			ResidDrop: m.newDrop(),
			AttnDrop:  m.newDrop(),
			Layer:     i,
			Rope:      m.Rope,
		}
		if cfg.QKNorm {
			a.QNorm = nn.NewRMSNorm(p+"self_attn.q_norm", in, HD, eps)
			a.KNorm = nn.NewRMSNorm(p+"self_attn.k_norm", in, HD, eps)
		}
		// The blocks' matrices (Parts): q, k and v fused in one (k and v
		// narrower under grouped-query attention), SwiGLU's gate and up
		// in another.
		a.CAttn.W.Parts, a.CProj.W.Parts = []int{H * HD, KVH * HD, KVH * HD}, []int{C}
		// (The up projection is drawn before the down one.)
		mlp := &nn.Projected{Act: tensor.SwiGLU}
		if cfg.reLU2() {
			mlp.In = nn.NewLinear(p+"mlp.up_proj", in, C, hid, false, initStd)
			mlp.In.W.Parts, mlp.Act = []int{hid}, tensor.ReLU2
		} else {
			mlp.In = nn.NewLinear(p+"mlp.gate_up_proj", in, C, 2*hid, false, initStd)
			mlp.In.W.Parts = []int{hid, hid}
		}
		mlp.Down = nn.NewLinear(p+"mlp.down_proj", in, hid, C, false, residStd)
		mlp.Down.W.Parts, mlp.Drop = []int{C}, m.newDrop()
		m.Blocks = append(m.Blocks, &Block{
			LN1:   nn.NewRMSNorm(p+"input_layernorm", in, C, eps),
			Attn:  a,
			LN2:   nn.NewRMSNorm(p+"post_attention_layernorm", in, C, eps),
			MLP:   mlp,
			layer: i,
		})
	}
	m.LNF = nn.NewRMSNorm("model.norm", in, C, eps)
	m.Head = m.WTE.W
	if cfg.UntiedHead {
		m.Head = nn.NewParameter("lm_head.weight", in.Normal(initStd, cfg.VocabSize, C))
	}
}

func (llamaFamily) build(m *GPT, in nn.Init) { buildLlama(m, in) }

// hfFolder is the files of the Hugging Face architecture that has the
// model's pieces (hfConfigOf), its weights under that architecture's
// names (ToHF), in BF16 where bf16.
func (llamaFamily) hfFolder(m *GPT, bf16 bool) (*checkpoint.File, []byte, error) {
	cfg, err := hfConfigOf(m.Config, bf16)
	if err != nil {
		return nil, nil, err
	}
	ts, err := ToHF(m.Config, m.WeightsFile(nil).Tensors)
	if err != nil {
		return nil, nil, err
	}
	if bf16 {
		for n, t := range ts {
			v, _ := t.Float32s()
			ts[n] = checkpoint.BF16Tensor(t.Shape, v)
		}
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return &checkpoint.File{Metadata: map[string]string{"format": "pt"}, Tensors: ts}, append(b, '\n'), nil
}

// hfConfigOf is the config.json of c as the Hugging Face architecture
// that has its pieces: Qwen3ForCausalLM with QK-norm, Qwen2ForCausalLM
// with q/k/v biases, ArceeForCausalLM with a ReLU² feed-forward,
// LlamaForCausalLM otherwise.
func hfConfigOf(c Config, bf16 bool) (map[string]any, error) {
	arch, typ, act := "LlamaForCausalLM", "llama", "silu"
	switch {
	case c.reLU2() && (c.QKNorm || c.QKVBias):
		return nil, fmt.Errorf("no Hugging Face architecture has a ReLU² feed-forward with QK-norm or q/k/v biases (Arcee's has neither)")
	case c.reLU2():
		arch, typ, act = "ArceeForCausalLM", "arcee", "relu2"
	case c.QKNorm && c.QKVBias:
		return nil, fmt.Errorf("no Hugging Face architecture has both QK-norm and q/k/v biases")
	case c.QKNorm:
		arch, typ = "Qwen3ForCausalLM", "qwen3"
	case c.QKVBias:
		if c.Bias {
			return nil, fmt.Errorf("no Hugging Face architecture has q/k/v biases and an output projection's")
		}
		arch, typ = "Qwen2ForCausalLM", "qwen2"
	}
	if c.RopeScaling != nil && typ != "llama" {
		return nil, fmt.Errorf("rope_scaling of type llama3 is Llama's, and this model's pieces make it a %s", arch)
	}
	dt := "float32"
	if bf16 {
		dt = "bfloat16"
	}
	theta := c.RopeTheta
	if theta == 0 {
		theta = 10000
	}
	cfg := map[string]any{
		"architectures": []string{arch}, "model_type": typ, "vocab_size": c.VocabSize, "hidden_size": c.NEmbd,
		"intermediate_size": c.mlpHidden(), "num_hidden_layers": c.NLayer, "num_attention_heads": c.NHead,
		"num_key_value_heads": c.kvHeads(), "head_dim": c.headDim(), "max_position_embeddings": c.BlockSize,
		"rms_norm_eps": float64(c.normEps()), "rope_theta": theta, "tie_word_embeddings": !c.UntiedHead,
		"hidden_act": act, "torch_dtype": dt, "attention_dropout": 0.0, "initializer_range": initStd,
	}
	switch typ {
	case "llama":
		cfg["attention_bias"], cfg["mlp_bias"], cfg["rope_scaling"] = c.Bias, false, c.RopeScaling
	case "arcee":
		cfg["attention_bias"], cfg["mlp_bias"] = c.Bias, false
	case "qwen3":
		cfg["attention_bias"], cfg["use_sliding_window"] = c.Bias, false
	case "qwen2":
		cfg["use_sliding_window"] = false
	}
	return cfg, nil
}

// HFFolder returns the files of the model as a Hugging Face folder
// (model.safetensors and config.json): GPT2LMHeadModel's for a GPT-2 (in
// F32), and for a Llama the architecture that has its pieces, its weights
// in BF16 where bf16.
func (m *GPT) HFFolder(bf16 bool) (weights *checkpoint.File, config []byte, err error) {
	f, err := m.Config.family()
	if err != nil {
		return nil, nil, err
	}
	return f.hfFolder(m, bf16)
}
