package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/pipeline"
	"github.com/fleetml/fleet/tensor"
)

// The model's three forward paths (GPT.Forward, Staged.Forward, ForwardKV)
// run the same embedding, blocks and head; these tests hold them to each
// other.

// TestOneStageMatchesForward runs a staged model of one stage and the
// plain model on the same batch with the same dropout seed: the loss and
// every gradient are the same bit for bit, with and without
// recomputation, under two seeds in a row.
func TestOneStageMatchesForward(t *testing.T) {
	cfg := Config{VocabSize: 31, BlockSize: 8, NLayer: 3, NHead: 2, NEmbd: 16, Dropout: 0.2, Bias: true}
	const B, T = 4, 8
	x, y := randomBatch(12, cfg.VocabSize, B, T)
	for _, recompute := range []bool{false, true} {
		t.Run(fmt.Sprintf("recompute=%v", recompute), func(t *testing.T) {
			plain, err := New(cfg, tensor.CPU, 4)
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(cfg, tensor.CPU, 4)
			if err != nil {
				t.Fatal(err)
			}
			plain.SetRecompute(recompute)
			m.SetRecompute(recompute)
			s, err := m.Place([]tensor.Device{tensor.CPU}, []int{cfg.NLayer})
			if err != nil {
				t.Fatal(err)
			}
			for _, seed := range []uint64{5, 6} {
				var want, got float32
				tensor.Step(func() {
					plain.SetDropout(seed, 3)
					l := plain.Loss(tensor.FromInt32s(tensor.CPU, x, B, T), tensor.FromInt32s(tensor.CPU, y, B, T))
					want = l.Item()
					l.Backward()
				})
				tensor.Step(func() {
					s.SetDropout(seed, 3, B)
					l := tensor.CrossEntropy(s.Forward(0, tensor.FromInt32s(tensor.CPU, x, B, T), 0), tensor.FromInt32s(tensor.CPU, y, B, T))
					got = l.Item()
					l.Backward()
				})
				if math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("seed %d: loss %v staged, %v plain", seed, got, want)
				}
				ps := plain.Parameters()
				for i, p := range m.Parameters() {
					if !equalBits(p.Grad().Float32s(), ps[i].Grad().Float32s()) {
						t.Fatalf("seed %d: %s's gradient differs between the staged and the plain model", seed, p.Name)
					}
					tensor.ZeroGrad(p.T)
					tensor.ZeroGrad(ps[i].T)
				}
			}
		})
	}
}

// TestMicroBatchLogits runs a batch through three stages on three logical
// CPU devices in micro-batches of different sizes, in training mode, and
// compares each micro-batch's logits with the rows of the whole batch's
// logits from GPT.Forward: every dropout mask is the same, so the logits
// are the same bit for bit.
func TestMicroBatchLogits(t *testing.T) {
	cfg := Config{VocabSize: 29, BlockSize: 8, NLayer: 4, NHead: 2, NEmbd: 16, Dropout: 0.3, Bias: false}
	const B, T, seed = 6, 8, 0xd0
	x, _ := randomBatch(13, cfg.VocabSize, B, T)
	plain, err := New(cfg, tensor.CPU, 8)
	if err != nil {
		t.Fatal(err)
	}
	var want []float32
	tensor.Step(func() {
		plain.SetDropout(seed, 3)
		want = plain.Forward(tensor.FromInt32s(tensor.CPU, x, B, T)).Float32s()
	})
	m, err := New(cfg, tensor.CPU, 8)
	if err != nil {
		t.Fatal(err)
	}
	devs := []tensor.Device{{Kind: "cpu", Index: 1}, {Kind: "cpu", Index: 2}, {Kind: "cpu", Index: 3}}
	s, err := m.Place(devs, []int{1, 2, 1})
	if err != nil {
		t.Fatal(err)
	}
	s.SetDropout(seed, 3, B)
	// Out of order, as a schedule may run them: the last rows first.
	for _, cut := range [][2]int{{3, 6}, {0, 1}, {1, 3}} {
		row0, b := cut[0], cut[1]-cut[0]
		var got []float32
		tensor.Step(func() {
			h := tensor.FromInt32s(devs[0], x[row0*T:(row0+b)*T], b, T)
			for st, d := range devs {
				h = s.Forward(st, h.To(d), row0)
			}
			got = h.Float32s()
		})
		V := cfg.VocabSize
		if !equalBits(got, want[row0*T*V:(row0+b)*T*V]) {
			t.Fatalf("rows [%d, %d): the micro-batch's logits differ from the whole batch's", row0, row0+b)
		}
	}
}

// TestForwardKVMatchesForward feeds a sequence to ForwardKV in pieces
// and compares the logits of each piece's last position with the full
// forward pass's at that position.
func TestForwardKVMatchesForward(t *testing.T) {
	cfg := Config{VocabSize: 27, BlockSize: 12, NLayer: 2, NHead: 2, NEmbd: 16, Dropout: 0.1, Bias: true}
	m, err := New(cfg, tensor.CPU, 6)
	if err != nil {
		t.Fatal(err)
	}
	const T = 12
	x, _ := randomBatch(14, cfg.VocabSize, 1, T)
	defer m.SetTraining(m.SetTraining(false))
	var full []float32
	tensor.Step(func() {
		tensor.NoGrad(func() { full = m.Forward(tensor.FromInt32s(tensor.CPU, x, 1, T)).Float32s() })
	})
	cache := m.NewKVCache()
	defer cache.Free()
	V := cfg.VocabSize
	worst := 0.0
	for _, end := range []int{5, 6, 9, 12} {
		got := m.ForwardKV(x[cache.Pos:end], cache)
		want := full[(end-1)*V : end*V]
		for k := range got {
			worst = math.Max(worst, math.Abs(float64(got[k]-want[k])))
		}
	}
	t.Logf("largest difference from the full forward pass: %.3g", worst)
	if worst > 1e-5 {
		t.Fatalf("ForwardKV's logits differ from the full forward pass's by %.3g", worst)
	}
	if cache.Pos != T {
		t.Fatalf("cache at position %d after %d tokens", cache.Pos, T)
	}
}

// TestStagesConcurrently runs two pipeline stages at the same time, each
// on its own goroutine with its own device and tensor program, handing
// activations forward and gradients back over channels (GPipe order, with
// dropout, with and without recomputation), and compares the loss and
// every gradient with the same schedule run on one goroutine by
// pipeline.Runner: they are
// the same bit for bit. Run with -race, it checks that the stages share
// no mutable state.
func TestStagesConcurrently(t *testing.T) {
	cfg := Config{VocabSize: 23, BlockSize: 8, NLayer: 4, NHead: 2, NEmbd: 16, Dropout: 0.2, Bias: true}
	const B, T, M, seed = 6, 8, 3, 0xbeef
	const b = B / M
	x, y := randomBatch(15, cfg.VocabSize, B, T)
	for _, recompute := range []bool{false, true} {
		t.Run(fmt.Sprintf("recompute=%v", recompute), func(t *testing.T) {
			// On one goroutine, through the pipeline runner.
			ref, err := New(cfg, tensor.CPU, 3)
			if err != nil {
				t.Fatal(err)
			}
			ref.SetRecompute(recompute)
			refDevs := []tensor.Device{{Kind: "cpu", Index: 3}, {Kind: "cpu", Index: 4}}
			rs, err := ref.Place(refDevs, []int{2, 2})
			if err != nil {
				t.Fatal(err)
			}
			sch, err := pipeline.New(pipeline.GPipeName, 2, M)
			if err != nil {
				t.Fatal(err)
			}
			var refLoss float32
			run := &pipeline.Runner{Schedule: sch, Devices: refDevs,
				Input:   func(mi int) *tensor.Tensor { return tensor.FromInt32s(refDevs[0], x[mi*b*T:(mi+1)*b*T], b, T) },
				Forward: func(st, mi int, in *tensor.Tensor) *tensor.Tensor { return rs.Forward(st, in, mi*b) },
				Loss: func(mi int, logits *tensor.Tensor) *tensor.Tensor {
					l := tensor.Scale(tensor.CrossEntropy(logits, tensor.FromInt32s(refDevs[1], y[mi*b*T:(mi+1)*b*T], b, T)), 1.0/M)
					refLoss += l.Item()
					return l
				}}
			rs.SetDropout(seed, 3, B)
			tensor.Step(run.Run)
			rs.ReduceHeadGrad()

			// Each stage on a goroutine and a program of its own.
			devs := []tensor.Device{{Kind: "cpu", Index: 1}, {Kind: "cpu", Index: 2}}
			var progs []*tensor.Program
			for _, d := range devs {
				p, err := tensor.NewProgram(d)
				if err != nil {
					t.Fatal(err)
				}
				defer p.Close()
				progs = append(progs, p)
			}
			m, err := New(cfg, tensor.CPU, 3)
			if err != nil {
				t.Fatal(err)
			}
			m.SetRecompute(recompute)
			s, err := m.Place(devs, []int{2, 2})
			if err != nil {
				t.Fatal(err)
			}
			s.SetDropout(seed, 3, B)
			acts := make(chan *tensor.Tensor)  // stage 0's outputs, detached
			grads := make(chan *tensor.Tensor) // their gradients, from stage 1
			copied := make(chan bool)          // stage 0 has copied a gradient
			errs := make(chan error, 2)
			var loss float32
			go func() { // stage 0
				errs <- tensor.Catch(func() {
					progs[0].Step(func() {
						outs := make([]*tensor.Tensor, M)
						for mi := range M {
							ids := tensor.FromInt32s(devs[0], x[mi*b*T:(mi+1)*b*T], b, T)
							outs[mi] = s.Forward(0, ids, mi*b)
							acts <- outs[mi].Detach()
						}
						for mi := range M {
							g := (<-grads).To(devs[0])
							copied <- true
							outs[mi].BackwardWith(g)
						}
					})
				})
			}()
			go func() { // stage 1
				errs <- tensor.Catch(func() {
					progs[1].Step(func() {
						ins := make([]*tensor.Tensor, M)
						losses := make([]*tensor.Tensor, M)
						for mi := range M {
							ins[mi] = (<-acts).To(devs[1]).SetRequiresGrad(true)
							logits := s.Forward(1, ins[mi], mi*b)
							losses[mi] = tensor.Scale(tensor.CrossEntropy(logits, tensor.FromInt32s(devs[1], y[mi*b*T:(mi+1)*b*T], b, T)), 1.0/M)
							loss += losses[mi].Item()
						}
						for mi := range M {
							losses[mi].Backward()
							grads <- ins[mi].Grad
							<-copied // the gradient lives as long as this step
						}
					})
				})
			}()
			for range 2 {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			s.ReduceHeadGrad()
			if math.Float32bits(loss) != math.Float32bits(refLoss) {
				t.Fatalf("loss %v concurrently, %v on one goroutine", loss, refLoss)
			}
			refPs := ref.Parameters()
			for i, p := range m.Parameters() {
				if p.Grad() == nil || !equalBits(p.Grad().Float32s(), refPs[i].Grad().Float32s()) {
					t.Fatalf("%s's gradient differs between the concurrent and the serial run", p.Name)
				}
			}
			s.Gather(tensor.CPU)
		})
	}
}
