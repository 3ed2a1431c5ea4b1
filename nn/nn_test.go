package nn

import (
	"testing"

	"github.com/fleetml/fleet/tensor"
)

func TestParametersAndModules(t *testing.T) {
	in := Init{RNG: tensor.NewRNG(1), Dev: tensor.CPU}
	l := NewLinear("fc", in, 3, 4, true, 0.02)
	ps := l.Parameters()
	if len(ps) != 2 || ps[0].Name != "fc.weight" || ps[1].Name != "fc.bias" {
		t.Fatalf("linear parameters %v %v", ps[0].Name, ps[1].Name)
	}
	if !ps[0].Decay || ps[1].Decay || !ps[0].T.RequiresGrad() {
		t.Fatal("weights decay and need grad, biases do not decay")
	}
	if NewLinear("x", in, 3, 4, false, 0.02).B != nil {
		t.Fatal("bias=false still made a bias")
	}
	if err := CheckUnique(append(ps, ps[0])); err == nil {
		t.Fatal("duplicate names not reported")
	}
	// Dropout is the identity unless training with p > 0.
	x := tensor.Ones(tensor.CPU, 100)
	d := &Dropout{P: 0.5, RNG: tensor.NewRNG(2)}
	if d.Forward(x) != x {
		t.Fatal("dropout changed its input outside training")
	}
	d.Training = true
	if d.Forward(x) == x {
		t.Fatal("dropout in training returned its input")
	}
	// To a second logical device copies the values and keeps a leaf that needs grad.
	dev := tensor.Device{Kind: "cpu", Index: 1}
	before := ps[0].T.Float32s()
	ps[0].To(dev)
	if ps[0].T.Device() != dev || !ps[0].T.RequiresGrad() {
		t.Fatalf("moved parameter on %v, requires grad %v", ps[0].T.Device(), ps[0].T.RequiresGrad())
	}
	for i, v := range ps[0].T.Float32s() {
		if v != before[i] {
			t.Fatal("values changed in the move")
		}
	}
}
