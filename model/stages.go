package model

import (
	"fmt"

	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// Staged is a GPT split into pipeline stages: contiguous ranges of blocks
// on their own devices, the embeddings on the first stage, the final
// LayerNorm and the head on the last. The parameters keep their names, so
// checkpoints do not depend on the placement.
//
// A tied head is the token embedding, which lives on the first stage (an
// untied one lives on the last). When the last stage is on another device
// it reads a copy of the embedding (SyncHead refreshes it from the real weight); the gradient the
// copy gathers is added into the embedding's own by ReduceHeadGrad before
// the optimizer step, so the tied weight gets the sum of both uses, as on
// one device.
//
// Each stage is run by Forward; the caller moves the activations between
// devices and runs each stage's backward pass from the gradient the next
// stage hands back (tensor.BackwardWith). A stage's forward pass runs the
// model's own embedding, blocks and head under a Pass of the stage's own
// (its dropout generator, its recomputation closures, on the first stage
// its position ids), so Forward may run for different stages at once, on
// goroutines of their own; calls for one stage must not overlap.
type Staged struct {
	M       *GPT
	Devices []tensor.Device
	Ranges  [][2]int       // blocks [lo, hi) of each stage
	head    *tensor.Tensor // the embedding's copy on the last device; nil when it is the first
	passes  []*Pass        // each stage's
	// The batch's dropout masks (see SetDropout): the step's key, the
	// place of the batch's first row in the step's global batch, and its
	// rows.
	dropKey  uint64
	dropRow0 int64
	dropRows int
}

// Place moves m's parameters onto devs, counts[i] blocks on stage i (they
// must add up to the model's layers), and returns the staged model.
func (m *GPT) Place(devs []tensor.Device, counts []int) (*Staged, error) {
	if m.RNN != nil {
		return nil, fmt.Errorf("model: an %s model has no blocks to place in pipeline stages", ArchLSTM)
	}
	if len(devs) == 0 || len(counts) != len(devs) {
		return nil, fmt.Errorf("model: %d devices for %d stage sizes", len(devs), len(counts))
	}
	s := &Staged{M: m, Devices: devs}
	for range devs {
		s.passes = append(s.passes, &Pass{Dropout: &nn.Masks{}})
	}
	lo := 0
	for _, c := range counts {
		if c < 0 {
			return nil, fmt.Errorf("model: negative stage size in %v", counts)
		}
		s.Ranges = append(s.Ranges, [2]int{lo, lo + c})
		lo += c
	}
	if lo != len(m.Blocks) {
		return nil, fmt.Errorf("model: stage sizes %v place %d blocks, the model has %d", counts, lo, len(m.Blocks))
	}
	err := tensor.Catch(func() {
		for st := range s.Devices {
			for _, p := range s.StageParams(st) {
				p.To(s.Devices[st])
			}
		}
		m.pass.freePositions() // made on the old device
		if last := s.Devices[len(s.Devices)-1]; last != s.Devices[0] && m.Tied() {
			tensor.ProgramOf(last).Persist(func() { s.head = tensor.Zeros(last, m.WTE.W.T.Shape()...).SetRequiresGrad(true) })
		}
		s.SyncHead()
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Stages is the number of stages.
func (s *Staged) Stages() int { return len(s.Devices) }

// StageParams lists the parameters stage st holds, in checkpoint order
// (the tied head is the first stage's embedding).
func (s *Staged) StageParams(st int) []*nn.Parameter {
	m := s.M
	var ps []*nn.Parameter
	if st == 0 {
		ps = append(ps, m.EmbedParams()...)
	}
	for _, b := range m.Blocks[s.Ranges[st][0]:s.Ranges[st][1]] {
		ps = append(ps, b.Parameters()...)
	}
	if st == len(s.Devices)-1 {
		ps = append(ps, m.HeadParams()...)
	}
	return ps
}

// HeadWeight is the weight the head reads: its own (an untied head's, or
// the embedding where the last stage shares the first stage's device),
// or the embedding's copy.
func (s *Staged) HeadWeight() *tensor.Tensor {
	if s.head != nil {
		return s.head
	}
	return s.M.Head.T
}

// HeadCopyBytes is the size of the embedding copy SyncHead and
// ReduceHeadGrad move (0 without a copy).
func (s *Staged) HeadCopyBytes() int {
	if s.head == nil {
		return 0
	}
	return s.head.Numel() * 4
}

// SyncHead copies the embedding into the last stage's copy of it. Call it
// after every change of the weights (an optimizer step, a load) and
// before the next forward pass.
func (s *Staged) SyncHead() {
	if s.head == nil {
		return
	}
	tensor.ProgramOf(s.head.Device()).Step(func() { s.head.CopyFrom(s.M.WTE.W.T.To(s.head.Device())) })
}

// ReduceHeadGrad adds the gradient the head's copy of the embedding
// gathered into the embedding's gradient, and zeroes the copy's.
func (s *Staged) ReduceHeadGrad() {
	if s.head == nil || s.head.Grad == nil {
		return
	}
	w := s.M.WTE.W.T
	prog := tensor.ProgramOf(w.Device())
	prog.Step(func() {
		g := s.head.Grad.To(w.Device())
		if w.Grad == nil {
			prog.Persist(func() { w.Grad = g.Clone() })
		} else {
			tensor.AddInPlace(w.Grad, g, 1)
		}
	})
	tensor.ZeroGradInPlace(s.head)
}

// Gather moves every parameter onto dev and drops the head's copy: the
// model runs on one device again.
func (s *Staged) Gather(dev tensor.Device) {
	s.M.To(dev)
	for _, p := range s.passes {
		p.freePositions()
	}
	if s.head != nil {
		if s.head.Grad != nil {
			s.head.Grad.Free()
			s.head.Grad = nil
		}
		s.head.Free()
		s.head = nil
	}
}

// SetDropout prepares the dropout masks of the micro-batches of one batch
// of fullRows rows under key, whose first row is row row0 of the step's
// global batch (what GPT.SetDropout would be given). Forward then gives
// each micro-batch its rows' masks, keyed by their place in the global
// batch, so a batch split into micro-batches gets the same masks as the
// whole batch on one device. Call it before the stages run, not while
// they do.
func (s *Staged) SetDropout(key uint64, row0 int64, fullRows int) {
	s.dropKey, s.dropRow0, s.dropRows = key, row0, fullRows
	s.M.SetDropout(key, row0)
}

// dropoutOn reports whether dropout draws masks.
func (s *Staged) dropoutOn() bool { return s.M.Drop.Training && s.M.Drop.P > 0 }

// Forward runs stage st on in, micro-batch rows [row0, row0+B) of the
// batch SetDropout described: token ids [B, T] for the first stage, the
// residual stream [B, T, C] for the others. It returns the residual
// stream, or the logits [B, T, vocab] on the last stage.
func (s *Staged) Forward(st int, in *tensor.Tensor, row0 int) *tensor.Tensor {
	m, p := s.M, s.passes[st]
	lo, hi := s.Ranges[st][0], s.Ranges[st][1]
	if s.dropoutOn() {
		s.seekDropout(st, in, row0)
	}
	x := in
	if st == 0 {
		x = m.embed(in, p)
	}
	x = m.blocks(x, lo, hi, p)
	if st == len(s.Devices)-1 {
		x = m.head(x, s.HeadWeight())
	}
	return x
}

// seekDropout points stage st's dropout masks at its first dropout
// layer's, for rows [row0, row0+B) of the batch (nn.Masks). The layers are
// counted in the order the whole model runs them: site 0 is the
// embedding's dropout, 1+2i and 2+2i block i's attention and MLP
// dropouts.
func (s *Staged) seekDropout(st int, in *tensor.Tensor, row0 int) {
	d := s.passes[st].Dropout
	B := in.Dim(0)
	if s.dropRows == 0 || row0 < 0 || row0+B > s.dropRows {
		panic(&tensor.Error{Op: "gpt", Msg: fmt.Sprintf("micro-batch rows [%d, %d) outside the batch of %d rows SetDropout described", row0, row0+B, s.dropRows)})
	}
	j := 0
	if st > 0 {
		j = 1 + 2*s.Ranges[st][0]
	}
	d.Seek(s.dropKey, uint32(j), s.dropRow0+int64(row0))
}
