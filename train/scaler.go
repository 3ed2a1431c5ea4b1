package train

import (
	"fmt"
	"math"
	"strconv"
)

// gradScaler is dynamic loss scaling for fp16 products, with the
// semantics and defaults of PyTorch's GradScaler: the loss is multiplied
// by scale before backward, the gradients are divided by it before
// clipping, and a step whose gradients hold an inf or NaN is skipped (no
// update to the weights or the optimizer state, and the learning-rate
// schedule does not advance) and halves the scale; growthInterval clean
// steps in a row double it.
type gradScaler struct {
	scale          float32
	growthInterval int
	// tracker counts the clean steps since the scale last changed;
	// skipped counts the steps skipped in the whole run, which the
	// schedule does not count.
	tracker int
	skipped int
}

// GradScaler defaults (PyTorch's).
const (
	scalerInitScale      = 65536
	scalerGrowthInterval = 2000
	scalerGrowth         = 2
	scalerBackoff        = 0.5
)

func newGradScaler() *gradScaler {
	return &gradScaler{scale: scalerInitScale, growthInterval: scalerGrowthInterval}
}

// update records a step whose unscaled gradients were finite or not, and
// reports whether the step may be taken.
func (s *gradScaler) update(finite bool) bool {
	if !finite {
		s.scale *= scalerBackoff
		s.tracker = 0
		s.skipped++
		return false
	}
	s.tracker++
	if s.tracker == s.growthInterval {
		if g := s.scale * scalerGrowth; !math.IsInf(float64(g), 0) {
			s.scale = g
		}
		s.tracker = 0
	}
	return true
}

// skippedSteps is the number of skipped steps (0 without a scaler).
func (s *gradScaler) skippedSteps() int {
	if s == nil {
		return 0
	}
	return s.skipped
}

// metadata adds the scaler's state to a checkpoint's training state.
func (s *gradScaler) metadata(meta map[string]string) {
	if s == nil {
		meta["grad_scaler"] = "none"
		return
	}
	meta["grad_scaler"] = "dynamic"
	meta["grad_scale"] = strconv.FormatFloat(float64(s.scale), 'g', -1, 32)
	meta["grad_scaler_growth_tracker"] = strconv.Itoa(s.tracker)
	meta["grad_scaler_growth_interval"] = strconv.Itoa(s.growthInterval)
	meta["grad_scaler_skipped_steps"] = strconv.Itoa(s.skipped)
}

// restore sets the scaler from a checkpoint's training state. A state
// without a scaler (a run in another precision) leaves it at its start.
func (s *gradScaler) restore(meta map[string]string) error {
	if s == nil || meta["grad_scaler"] != "dynamic" {
		return nil
	}
	scale, err := strconv.ParseFloat(meta["grad_scale"], 32)
	if err != nil || !(scale > 0) || math.IsInf(scale, 0) {
		return fmt.Errorf("grad_scale %q is not a positive number", meta["grad_scale"])
	}
	tracker, err := strconv.Atoi(meta["grad_scaler_growth_tracker"])
	if err != nil || tracker < 0 {
		return fmt.Errorf("grad_scaler_growth_tracker %q is not a count", meta["grad_scaler_growth_tracker"])
	}
	skipped, err := strconv.Atoi(meta["grad_scaler_skipped_steps"])
	if err != nil || skipped < 0 {
		return fmt.Errorf("grad_scaler_skipped_steps %q is not a count", meta["grad_scaler_skipped_steps"])
	}
	if v, err := strconv.Atoi(meta["grad_scaler_growth_interval"]); err == nil && v > 0 {
		s.growthInterval = v
	}
	s.scale, s.tracker, s.skipped = float32(scale), tracker, skipped
	return nil
}
