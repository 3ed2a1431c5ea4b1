package model

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/tensor"
)

func tinyLSTM(t *testing.T, untied bool) *GPT {
	t.Helper()
	m, err := New(Config{Arch: ArchLSTM, VocabSize: 11, BlockSize: 8, NLayer: 2, NHead: 1, NEmbd: 6, Bias: true, UntiedHead: untied}, tensor.CPU, 3)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// Generation's carried state gives the logits a whole forward pass gives:
// the prompt in one call, then a token at a time.
func TestLSTMForwardKV(t *testing.T) {
	for _, untied := range []bool{false, true} {
		m := tinyLSTM(t, untied)
		ids := []int32{1, 5, 2, 9, 0, 3, 7}
		var full []float32
		tensor.Step(func() {
			full = m.Forward(tensor.FromInt32s(tensor.CPU, ids, 1, len(ids))).Float32s()
		})
		cache := m.NewKVCache()
		V := m.Config.VocabSize
		got := m.ForwardKV(ids[:3], cache)
		for n := 3; ; n++ {
			want := full[(n-1)*V : n*V]
			for i := range got {
				if math.Abs(float64(got[i]-want[i])) > 1e-6 {
					t.Fatalf("untied=%v, after %d tokens: logit %d is %v with the state, %v in one pass", untied, n, i, got[i], want[i])
				}
			}
			if n == len(ids) {
				break
			}
			got = m.ForwardKV(ids[n:n+1], cache)
		}
		// Pos 0 starts over from a zero state.
		cache.Pos = 0
		again := m.ForwardKV(ids[:3], cache)
		for i := range again {
			if again[i] != full[2*V+i] {
				t.Fatalf("a cache reset to position 0 gives logit %d = %v, want %v", i, again[i], full[2*V+i])
			}
		}
		cache.Free()
		if _, err := m.Generate([]int32{1, 2}, 20, Sampling{Temperature: 1, RNG: tensor.NewRNG(1)}); err != nil {
			t.Fatal(err)
		}
	}
}

// The parameters, their names and what the model refuses.
func TestLSTMModel(t *testing.T) {
	m := tinyLSTM(t, true)
	var names []string
	for _, p := range m.Parameters() {
		names = append(names, p.Name)
	}
	want := "embed.weight lstm.0.ih.weight lstm.0.ih.bias lstm.0.hh.weight lstm.1.ih.weight lstm.1.ih.bias lstm.1.hh.weight head.weight"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("parameters %s, want %s", got, want)
	}
	// 11·6 embedding + 2 layers of (6·24 + 24 + 6·24) + 11·6 head
	if n := m.NumParams(); n != 66+2*(144+24+144)+66 {
		t.Errorf("%d parameters", n)
	}
	if _, err := m.Place([]tensor.Device{tensor.CPU}, []int{2}); err == nil || !strings.Contains(err.Error(), "pipeline") {
		t.Errorf("Place: %v, want a refusal naming pipeline stages", err)
	}
	if _, _, err := m.HFFolder(false); err == nil {
		t.Error("HFFolder made a folder of an LSTM")
	}
	_, err := New(Config{Arch: ArchLSTM, VocabSize: 11, BlockSize: 8, NLayer: 1, NHead: 1, NEmbd: 6, QKNorm: true}, tensor.CPU, 1)
	if err == nil || !strings.Contains(err.Error(), "qk_norm") {
		t.Errorf("an LSTM with qk_norm: %v, want a refusal naming it", err)
	}
	// n_embd need not divide into heads.
	if _, err := New(Config{Arch: ArchLSTM, VocabSize: 11, BlockSize: 8, NLayer: 1, NHead: 4, NEmbd: 7}, tensor.CPU, 1); err != nil {
		t.Error(err)
	}
}

// TestLSTMMatchesPyTorch holds the LSTM to torch.nn.LSTM
// (scripts/make_lstm_fixture.py: its gate order i, f, g, o, its two
// biases as one): logits and every gradient within 1e-5, in F32 against
// PyTorch's float64.
func TestLSTMMatchesPyTorch(t *testing.T) {
	for _, name := range []string{"lstm_tied", "lstm_untied"} {
		t.Run(name, func(t *testing.T) {
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
			B, T := meta("batch_size"), meta("block_size")
			m, err := New(Config{Arch: ArchLSTM, VocabSize: meta("vocab_size"), BlockSize: T, NLayer: meta("n_layer"),
				NHead: 1, NEmbd: meta("n_embd"), Bias: f.Metadata["bias"] == "true", UntiedHead: f.Metadata["tied"] == "false"}, tensor.CPU, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.SetWeights(f); err != nil {
				t.Fatal(err)
			}
			x, _ := f.Tensors["x"].Int32s()
			y, _ := f.Tensors["y"].Int32s()
			want, _ := f.Tensors["loss"].Float64s()
			wantLogits, _ := f.Tensors["logits"].Float32s()
			tensor.Step(func() {
				logits := m.Forward(tensor.FromInt32s(tensor.CPU, x, B, T))
				within(t, "logits", logits.Float32s(), wantLogits)
				loss := tensor.CrossEntropy(logits, tensor.FromInt32s(tensor.CPU, y, B, T))
				if got := float64(loss.Item()); math.Abs(got-want[0]) > 1e-5*math.Abs(want[0]) {
					t.Errorf("loss %.8f, PyTorch %.8f", got, want[0])
				}
				loss.Backward()
			})
			for _, p := range m.Parameters() {
				g, err := f.Tensors["grad."+p.Name].Float32s()
				if err != nil {
					t.Fatalf("%s: %v", p.Name, err)
				}
				within(t, "gradient of "+p.Name, p.Grad().Float32s(), g)
			}
		})
	}
}

// within fails unless |got − want| ≤ 1e-5·max|want| everywhere: within
// 1e-5 of the tensor's scale (the gradients of a mean loss are small).
func within(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, PyTorch %d", what, len(got), len(want))
	}
	scale, worst := 0.0, 0.0
	for i := range got {
		scale = math.Max(scale, math.Abs(float64(want[i])))
		worst = math.Max(worst, math.Abs(float64(got[i])-float64(want[i])))
	}
	if scale == 0 {
		t.Fatalf("%s: PyTorch's values are all zero", what)
	}
	if worst > 1e-5*scale {
		t.Errorf("%s differs from PyTorch by %.3g, %.3g of its largest value", what, worst, worst/scale)
	}
}
