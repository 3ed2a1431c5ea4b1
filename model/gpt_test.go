package model

import (
	"math"
	"strconv"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/tensor"
)

// TestPyTorchParity loads a tiny GPT whose weights, batch, loss and
// gradients were made by scripts/make_gpt_fixture.py with PyTorch, and
// checks fleet's loss (1e-5 relative) and every parameter gradient (1e-4).
func TestPyTorchParity(t *testing.T) {
	for _, name := range []string{"gpt_bias", "gpt_nobias"} {
		t.Run(name, func(t *testing.T) {
			m, f, x, y, B, T := loadFixture(t, name)
			want, _ := f.Tensors["loss"].Float64s()
			tensor.Step(func() {
				loss := m.Loss(tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T))
				got := float64(loss.Item())
				if rel := math.Abs(got-want[0]) / math.Abs(want[0]); rel > 1e-5 {
					t.Errorf("loss %.8f, PyTorch %.8f (relative error %.2g)", got, want[0], rel)
				}
				loss.Backward()
			})
			for _, p := range m.Parameters() {
				ref, err := f.Tensors["grad."+p.Name].Float32s()
				if err != nil {
					t.Fatalf("%s: %v", p.Name, err)
				}
				g := p.Grad().Float32s()
				worst := 0.0
				for i := range g {
					worst = math.Max(worst, math.Abs(float64(g[i])-float64(ref[i]))/(1+math.Abs(float64(ref[i]))))
				}
				if worst > 1e-4 {
					t.Errorf("gradient of %s differs from PyTorch by %.3g", p.Name, worst)
				}
			}
		})
	}
}

// loadFixture loads testdata/name.safetensors, a tiny GPT made with
// PyTorch by scripts/make_gpt_fixture.py: the model with its weights, the
// file (its loss and gradients), and the batch x, y of B rows of T tokens.
func loadFixture(t *testing.T, name string) (m *GPT, f *checkpoint.File, x, y []int32, B, T int) {
	t.Helper()
	f, err := checkpoint.Load("../testdata/" + name + ".safetensors")
	if err != nil {
		t.Fatal(err)
	}
	meta := func(k string) int {
		v, err := strconv.Atoi(f.Metadata[k])
		if err != nil {
			t.Fatalf("metadata %s: %v", k, err)
		}
		return v
	}
	cfg := Config{VocabSize: meta("vocab_size"), BlockSize: meta("block_size"), NLayer: meta("n_layer"),
		NHead: meta("n_head"), NEmbd: meta("n_embd"), Bias: f.Metadata["bias"] == "true"}
	if m, err = New(cfg, tensor.CPU, 1); err != nil {
		t.Fatal(err)
	}
	if err := m.SetWeights(f); err != nil {
		t.Fatal(err)
	}
	x, _ = f.Tensors["x"].Int32s()
	y, _ = f.Tensors["y"].Int32s()
	B = meta("batch_size")
	return m, f, x, y, B, len(x) / B
}

// TestTo moves a model to another (logical CPU) device: the loss there is
// the same, and the parameters stay leaves that receive gradients.
func TestTo(t *testing.T) {
	cfg := Config{VocabSize: 11, BlockSize: 6, NLayer: 1, NHead: 2, NEmbd: 8}
	m, err := New(cfg, tensor.CPU, 3)
	if err != nil {
		t.Fatal(err)
	}
	x := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1}
	y := []int32{2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1, 2}
	loss := func(dev tensor.Device) (l float32) {
		tensor.Step(func() {
			out := m.Loss(tensor.FromInt32s(dev, x, 2, 6), tensor.FromInt32s(dev, y, 2, 6))
			l = out.Item()
			out.Backward()
		})
		return l
	}
	before := loss(tensor.CPU)
	dev := tensor.Device{Kind: "cpu", Index: 1}
	m.To(dev)
	for _, p := range m.Parameters() {
		tensor.ZeroGrad(p.T)
		if p.T.Device() != dev || !p.T.RequiresGrad() {
			t.Fatalf("%s on %v after To(%v)", p.Name, p.T.Device(), dev)
		}
	}
	if after := loss(dev); after != before {
		t.Fatalf("loss %v on %v, %v on cpu", after, dev, before)
	}
	if m.WTE.W.T.Grad == nil || m.WTE.W.T.Grad.Device() != dev {
		t.Fatal("no gradient on the new device")
	}
}
