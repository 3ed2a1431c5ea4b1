package model

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/tensor"
)

// hfCases are the folders scripts/make_llama_fixture.py makes.
var hfCases = []string{"llama_gqa", "llama3_tied", "qwen2", "qwen3", "arcee"}

// TestHFLlamaMatchesPyTorch loads each random Hugging Face folder (GQA and
// multi-query, tied and untied heads, q/k/v and output biases, QK-norm, a
// head_dim that is not hidden/heads, Llama 3.1's rope scaling, F32 and
// BF16 weights, one file and shards) and holds fleet's logits, loss and
// every weight's gradient, converted back to Hugging Face's names, to
// PyTorch's (float64) within 1e-4, relative to each tensor's scale.
func TestHFLlamaMatchesPyTorch(t *testing.T) {
	for _, name := range hfCases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("..", "testdata", "hf", "models", name)
			ref, err := checkpoint.Load(dir + "_ref.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			x, _ := ref.Tensors["x"].Int32s()
			y, _ := ref.Tensors["y"].Int32s()
			B, T := ref.Tensors["x"].Shape[0], ref.Tensors["x"].Shape[1]
			m, err := LoadHF(dir, 0, tensor.CPU)
			if err != nil {
				t.Fatal(err)
			}
			tensor.Step(func() {
				logits := m.Forward(tensor.FromInt32s(tensor.CPU, x, B, T))
				want, _ := ref.Tensors["logits"].Float32s()
				closeTo(t, "logits", logits.Float32s(), want, 1e-4)
				loss := tensor.CrossEntropy(logits, tensor.FromInt32s(tensor.CPU, y, B, T))
				wantLoss, _ := ref.Tensors["loss"].Float64s()
				if d := math.Abs(float64(loss.Item()) - wantLoss[0]); d > 1e-4*wantLoss[0] {
					t.Fatalf("loss %v, PyTorch %v", loss.Item(), wantLoss[0])
				}
				loss.Backward()
			})
			grads := map[string]checkpoint.Tensor{}
			for _, p := range m.Parameters() {
				grads[p.Name] = checkpoint.F32Tensor(p.T.Shape(), p.T.Grad.Float32s())
			}
			hf, err := ToHF(m.Config, grads)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rn, rt := range ref.Tensors {
				hn, ok := strings.CutPrefix(rn, "grad.")
				if !ok {
					continue
				}
				g, ok := hf[hn]
				if !ok {
					t.Fatalf("no gradient for %s", hn)
				}
				got, _ := g.Float32s()
				want, _ := rt.Float32s()
				closeTo(t, "d/d"+hn, got, want, 1e-4)
				n++
			}
			if n != len(hf) {
				t.Fatalf("%d gradients in fleet, %d in PyTorch", len(hf), n)
			}
		})
	}
}

// closeTo requires every |got − want| ≤ tol·(max|want| + |want|).
func closeTo(t *testing.T, name string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var scale float64
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); !(d <= tol*(scale+math.Abs(float64(want[i])))) {
			t.Fatalf("%s[%d] = %v, PyTorch %v (scale %v)", name, i, got[i], want[i], scale)
		}
	}
}

// TestHFLlamaRoundTrip writes a model's weights as a Hugging Face folder's
// tensors and reads them back into another model: the same weights, with
// SwiGLU's feed-forward and with ReLU²'s.
func TestHFLlamaRoundTrip(t *testing.T) {
	c := Config{Arch: ArchLlama, VocabSize: 29, BlockSize: 8, NLayer: 2, NHead: 4, NKVHead: 2, NEmbd: 16,
		HeadDim: 6, MLPHidden: 20, QKNorm: true, QKVBias: true, UntiedHead: true}
	testHFRoundTrip(t, c)
	c.MLP, c.QKNorm, c.QKVBias = MLPReLU2, false, false
	testHFRoundTrip(t, c)
	if _, err := hfConfigOf(c, false); err != nil {
		t.Errorf("an Arcee config: %v", err)
	}
	c.QKNorm = true
	if _, err := hfConfigOf(c, false); err == nil || !strings.Contains(err.Error(), "ReLU²") {
		t.Errorf("ReLU² with QK-norm as a Hugging Face folder: %v, want a refusal", err)
	}
}

func testHFRoundTrip(t *testing.T, c Config) {
	a, err := New(c, tensor.CPU, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := New(c, tensor.CPU, 4)
	hf, err := ToHF(c, a.WeightsFile(nil).Tensors)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := hf["model.layers.1.self_attn.k_proj.weight"]; !ok {
		t.Fatal("no k_proj in the Hugging Face tensors")
	}
	fleet, err := FromHF(c, hf)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetWeights(&checkpoint.File{Tensors: fleet}); err != nil {
		t.Fatal(err)
	}
	// A folder without one of the parts is refused, naming it.
	delete(hf, "model.layers.1.self_attn.v_proj.weight")
	if _, err := FromHF(c, hf); err == nil || !strings.Contains(err.Error(), "model.layers.1.self_attn.v_proj.weight") {
		t.Errorf("a missing v_proj: %v", err)
	}
	for i, p := range b.Parameters() {
		if fmt.Sprint(p.T.Float32s()) != fmt.Sprint(a.Parameters()[i].T.Float32s()) {
			t.Fatalf("%s differs after the round trip", p.Name)
		}
	}
}

// TestHFConfigRefusals: a folder fleet cannot run is refused, naming the
// field.
func TestHFConfigRefusals(t *testing.T) {
	base := `"architectures": ["LlamaForCausalLM"], "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
		"num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16`
	for _, c := range []struct{ extra, want string }{
		{`, "mlp_bias": true`, "mlp_bias"},
		{`, "hidden_act": "gelu"`, "hidden_act"},
		{`, "hidden_act": "relu2"`, "hidden_act"}, // Llama's feed-forward is SwiGLU
		{`, "rope_scaling": {"rope_type": "yarn", "factor": 4}`, "rope_scaling"},
		{`, "num_key_value_heads": 3`, "n_kv_head"},
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"+base+c.extra+"}"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadHFConfig(dir, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %s", c.extra, err, c.want)
		}
	}
	arcee := strings.Replace(base, "LlamaForCausalLM", "ArceeForCausalLM", 1)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte("{"+arcee+`, "hidden_act": "silu"}`), 0o644)
	if _, err := ReadHFConfig(dir, 0); err == nil || !strings.Contains(err.Error(), "relu2") {
		t.Errorf("an Arcee folder with silu: error %v, want one naming relu2", err)
	}
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"architectures": ["GPTNeoXForCausalLM"]}`), 0o644)
	if _, err := ReadHFConfig(dir, 0); err == nil || !strings.Contains(err.Error(), "GPTNeoXForCausalLM") {
		t.Errorf("an unknown architecture: error %v", err)
	}
	if _, err := ReadHFConfig(dir, 0); err == nil || !strings.Contains(err.Error(), "LlamaForCausalLM") {
		t.Errorf("the error does not list what fleet reads: %v", err)
	}
}

// TestMLPSetting: the feed-forward is a Llama's setting (a GPT-2 or an
// LSTM with one is refused, naming mlp), one of swiglu and relu2; a
// ReLU² Llama has an up projection of 4·n_embd, Muon's matrix, and no
// gate.
func TestMLPSetting(t *testing.T) {
	for _, c := range []Config{
		{VocabSize: 10, BlockSize: 8, NLayer: 1, NHead: 2, NEmbd: 8, MLP: MLPReLU2},
		{Arch: ArchLSTM, VocabSize: 10, BlockSize: 8, NLayer: 1, NEmbd: 8, MLP: MLPSwiGLU},
		{Arch: ArchLlama, VocabSize: 10, BlockSize: 8, NLayer: 1, NHead: 2, NEmbd: 8, MLP: "geglu"},
	} {
		if _, err := New(c, tensor.CPU, 1); err == nil || !strings.Contains(err.Error(), "mlp") {
			t.Errorf("%s with mlp %q: %v, want a refusal naming mlp", c.Family(), c.MLP, err)
		}
	}
	m, err := New(Config{Arch: ArchLlama, VocabSize: 10, BlockSize: 8, NLayer: 1, NHead: 2, NEmbd: 8, MLP: MLPReLU2}, tensor.CPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range m.Parameters() {
		if strings.Contains(p.Name, "mlp.") {
			names = append(names, fmt.Sprintf("%s %v %v", p.Name, p.T.Shape(), p.Parts))
		}
	}
	if got, want := strings.Join(names, "; "), "model.layers.0.mlp.up_proj.weight [8 32] [32]; model.layers.0.mlp.down_proj.weight [32 8] [8]"; got != want {
		t.Errorf("the ReLU² feed-forward's parameters: %s, want %s", got, want)
	}
}
