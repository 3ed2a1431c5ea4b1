package model

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// gradsUnder returns the loss and every parameter's gradient of one
// forward and backward pass under Autocast(dt), and the logits' dtype.
func gradsUnder(m *GPT, dt tensor.DType, x, y []int32, B, T int) (loss float32, grads [][]float32, logits tensor.DType) {
	for _, p := range m.Parameters() {
		tensor.ZeroGrad(p.T)
	}
	tensor.Step(func() {
		var l *tensor.Tensor
		tensor.Autocast(dt, func() {
			xs, ys := tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T)
			logits = m.Forward(xs).DType()
			l = m.Loss(xs, ys)
		})
		loss = l.Item()
		l.Backward()
	})
	for _, p := range m.Parameters() {
		grads = append(grads, p.Grad().Float32s())
	}
	return loss, grads, logits
}

// TestBF16Activations runs the fixture's GPT under Autocast(BF16), where
// its activations are bf16 (the residual stream, LayerNorm, attention,
// GELU and the products' outputs; the logits too), against F32. Each op
// rounds what it stores to bf16 (u = 2⁻⁸ ≈ 3.9e-3) after computing in F32,
// so the loss, an average of many such values, stays within a few u of
// F32's, and so does each gradient normwise: 1e-2 for the loss and 5e-2
// for gradients (a backward pass meets about twice as many roundings as
// the forward, and a gradient's norm gathers them from every layer above
// it), where a missing rounding would not show but a wrong operand would
// (errors of order 1). The weights' half copies (SetHalf) are what the
// products read: with exact copies the results are the same bits as
// casting on the fly, and with a corrupted copy they change.
func TestBF16Activations(t *testing.T) {
	m, _, x, y, B, T := loadFixture(t, "gpt_bias")
	ref, refGrads, refDT := gradsUnder(m, tensor.F32, x, y, B, T)
	loss, grads, dt := gradsUnder(m, tensor.BF16, x, y, B, T)
	if refDT != tensor.F32 || dt != tensor.BF16 {
		t.Fatalf("logits are %v in f32 and %v under bf16 autocast, want f32 and bf16", refDT, dt)
	}
	if rel := math.Abs(float64(loss-ref)) / math.Abs(float64(ref)); rel > 1e-2 || rel == 0 {
		t.Errorf("bf16 loss %v, f32 %v: relative error %.3g (want rounding-sized, below 1e-2)", loss, ref, rel)
	}
	ps := m.Parameters()
	worst := 0.0
	for i := range grads {
		var d, n float64
		for j := range grads[i] {
			d += math.Pow(float64(grads[i][j]-refGrads[i][j]), 2)
			n += math.Pow(float64(refGrads[i][j]), 2)
		}
		e := math.Sqrt(d / max(n, 1e-30))
		worst = max(worst, e)
		if e > 5e-2 || math.IsNaN(e) {
			t.Errorf("gradient of %s: %.3g normwise from f32", ps[i].Name, e)
		}
	}
	t.Logf("bf16 activations: loss %.6f (f32 %.6f), worst gradient error %.3g normwise", loss, ref, worst)

	// The half copies: exact ones give the same bits as casting.
	for _, p := range ps {
		var h *tensor.Tensor
		tensor.ProgramOf(tensor.CPU).Persist(func() { h = tensor.Cast(p.T.Detach(), tensor.BF16) })
		p.T.SetHalf(h)
	}
	defer func() {
		for _, p := range ps {
			p.T.Half().Free()
			p.T.SetHalf(nil)
		}
	}()
	hLoss, hGrads, _ := gradsUnder(m, tensor.BF16, x, y, B, T)
	if math.Float32bits(hLoss) != math.Float32bits(loss) {
		t.Errorf("loss %v with half copies, %v casting", hLoss, loss)
	}
	for i := range hGrads {
		for j := range hGrads[i] {
			if math.Float32bits(hGrads[i][j]) != math.Float32bits(grads[i][j]) {
				t.Fatalf("%s[%d]: %v with half copies, %v casting", ps[i].Name, j, hGrads[i][j], grads[i][j])
			}
		}
	}
	// A stale copy is read as it is (so the optimizer must keep it current).
	w := m.Blocks[0].MLP.(*nn.MLP).CFC.W.T
	tensor.Fill(w.Half(), 0)
	if stale, _, _ := gradsUnder(m, tensor.BF16, x, y, B, T); stale == loss {
		t.Error("zeroing a weight's half copy did not change the loss: the products do not read it")
	}
}
