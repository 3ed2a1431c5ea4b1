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
	d := &Dropout{P: 0.5}
	masks := &Masks{Stream: tensor.DropoutStream{Key: 2}}
	if d.Forward(x, masks) != x {
		t.Fatal("dropout changed its input outside training")
	}
	d.Training = true
	if d.Forward(x, nil) != x {
		t.Fatal("dropout without masks (inference) changed its input")
	}
	if d.Forward(x, masks) == x {
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

// TestMasksOfRows checks Masks' layout of a batch's masks: dropout layers
// run on micro-batches of rows, each started with Seek at its first row,
// get exactly the masks the whole batch gets for those rows.
func TestMasksOfRows(t *testing.T) {
	const rows, perRow, layers = 6, 10, 3
	d := &Dropout{P: 0.5, Training: true}
	ones := func(B int) *tensor.Tensor { return tensor.Ones(tensor.CPU, B, 2, perRow/2) }
	whole := make([][]float32, layers) // [layer]: the whole batch's masks, drawn in turn
	const key = 0xabcdef
	masks := &Masks{}
	masks.Seek(key, 0, 4)
	tensor.Step(func() {
		for j := range whole {
			whole[j] = d.Forward(ones(rows), masks).Float32s()
		}
	})
	if masks.Stream.Site != layers {
		t.Fatalf("after %d layers the stream is at site %d", layers, masks.Stream.Site)
	}
	for _, cut := range [][2]int{{0, 2}, {2, 3}, {3, 6}, {0, 6}} {
		row0, B := cut[0], cut[1]-cut[0]
		masks := &Masks{}
		masks.Seek(key, 0, int64(4+row0))
		tensor.Step(func() {
			for j := range whole {
				got := d.Forward(ones(B), masks).Float32s()
				want := whole[j][row0*perRow : (row0+B)*perRow]
				for k := range got {
					if got[k] != want[k] {
						t.Fatalf("rows [%d, %d), layer %d, element %d: mask %v, whole batch %v", row0, row0+B, j, k, got[k], want[k])
					}
				}
			}
		})
	}
}
