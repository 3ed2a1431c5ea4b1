package model

import (
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/tensor"
)

const hfTiny = "../testdata/hf_gpt2_tiny.safetensors"

// TestHFGPT2Logits loads the tiny GPT-2 that scripts/make_hf_gpt2_fixture.py
// saved in the hub's form (unprefixed names, attn.bias and masked_bias
// buffers, lm_head.weight), and the same weights under the prefixed names
// save_pretrained writes, and compares the logits with PyTorch's.
func TestHFGPT2Logits(t *testing.T) {
	var se *setting.Error
	if _, err := LoadGPT2(hfTiny, 0, tensor.CPU); !errors.As(err, &se) || se.Name != "NHead" {
		t.Fatalf("loading without the number of heads: err = %v, want a setting.Error asking for NHead", err)
	}
	ref, err := checkpoint.Load("../testdata/hf_gpt2_tiny_logits.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	x, _ := ref.Tensors["x"].Int32s()
	want, _ := ref.Tensors["logits"].Float32s()
	hub, err := checkpoint.Load(hfTiny)
	if err != nil {
		t.Fatal(err)
	}
	prefixed := &checkpoint.File{Tensors: map[string]checkpoint.Tensor{}}
	for name, tt := range hub.Tensors {
		if name != "lm_head.weight" {
			name = "transformer." + name
		}
		prefixed.Tensors[name] = tt
	}
	pfile := filepath.Join(t.TempDir(), "prefixed.safetensors")
	if err := checkpoint.Save(pfile, prefixed); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{hfTiny, pfile} {
		m, err := LoadGPT2(path, 2, tensor.CPU)
		if err != nil {
			t.Fatal(err)
		}
		c := m.Config
		if c.VocabSize != 50 || c.BlockSize != 16 || c.NLayer != 2 || c.NEmbd != 32 || !c.Bias {
			t.Fatalf("%s: inferred %+v", path, c)
		}
		m.SetTraining(false)
		B, T := ref.Tensors["x"].Shape[0], ref.Tensors["x"].Shape[1]
		var got []float32
		tensor.NoGrad(func() { got = m.Forward(tensor.FromInt32s(tensor.CPU, x, B, T)).Float32s() })
		if len(got) != len(want) {
			t.Fatalf("%d logits, want %d", len(got), len(want))
		}
		worst := 0.0
		for i := range got {
			worst = max(worst, math.Abs(float64(got[i]-want[i])))
		}
		t.Logf("%s: max |logit difference| %.2g", filepath.Base(path), worst)
		if worst > 1e-4 {
			t.Errorf("%s: logits differ from PyTorch's by up to %g", path, worst)
		}
	}
}

func TestInferConfigGPT2Widths(t *testing.T) {
	f := &checkpoint.File{Tensors: map[string]checkpoint.Tensor{
		"wte.weight":      {DType: checkpoint.F32, Shape: []int{10, 768}, Data: make([]byte, 4*10*768)},
		"wpe.weight":      {DType: checkpoint.F32, Shape: []int{4, 768}, Data: make([]byte, 4*4*768)},
		"h.0.ln_1.weight": {DType: checkpoint.F32, Shape: []int{768}, Data: make([]byte, 4*768)},
	}}
	c, err := InferConfig(f, 0)
	if err != nil || c.NHead != 12 || c.NLayer != 1 || c.Bias {
		t.Fatalf("InferConfig = %+v, %v", c, err)
	}
	m, _ := New(Config{VocabSize: 10, BlockSize: 4, NLayer: 1, NHead: 12, NEmbd: 768}, tensor.CPU, 1)
	if err := m.SetWeights(f); err == nil || !strings.Contains(err.Error(), "missing tensor transformer.h.0.attn.c_attn.weight") {
		t.Fatalf("SetWeights with missing tensors: %v", err)
	}
}
