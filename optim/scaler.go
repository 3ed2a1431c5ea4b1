package optim

import (
	"fmt"
	"math"
	"strconv"
)

// GradScaler is dynamic loss scaling for fp16 products, with the
// semantics and defaults of PyTorch's GradScaler: the loss is multiplied
// by scale before backward, the gradients are divided by it before
// clipping, and a step whose gradients hold an inf or NaN is skipped (no
// update to the weights or the optimizer state, and the learning-rate
// schedule does not advance) and halves the scale; growthInterval clean
// steps in a row double it.
type GradScaler struct {
	Scale          float32
	GrowthInterval int
	// Tracker counts the clean steps since the scale last changed;
	// Skipped counts the steps skipped in the whole run, which the
	// schedule does not count.
	Tracker int
	Skipped int
}

// GradScaler defaults (PyTorch's).
const (
	ScalerInitScale      = 65536
	ScalerGrowthInterval = 2000
	ScalerGrowth         = 2
	ScalerBackoff        = 0.5
)

// NewGradScaler returns a scaler with PyTorch's defaults.
func NewGradScaler() *GradScaler {
	return &GradScaler{Scale: ScalerInitScale, GrowthInterval: ScalerGrowthInterval}
}

// Update records a step whose unscaled gradients were finite or not, and
// reports whether the step may be taken.
func (s *GradScaler) Update(finite bool) bool {
	if !finite {
		s.Scale *= ScalerBackoff
		s.Tracker = 0
		s.Skipped++
		return false
	}
	s.Tracker++
	if s.Tracker == s.GrowthInterval {
		if g := s.Scale * ScalerGrowth; !math.IsInf(float64(g), 0) {
			s.Scale = g
		}
		s.Tracker = 0
	}
	return true
}

// SkippedSteps is the number of skipped steps (0 without a scaler).
func (s *GradScaler) SkippedSteps() int {
	if s == nil {
		return 0
	}
	return s.Skipped
}

// Metadata adds the scaler's state to a checkpoint's training state
// (a nil scaler records that there is none).
func (s *GradScaler) Metadata(meta map[string]string) {
	if s == nil {
		meta["grad_scaler"] = "none"
		return
	}
	meta["grad_scaler"] = "dynamic"
	meta["grad_scale"] = strconv.FormatFloat(float64(s.Scale), 'g', -1, 32)
	meta["grad_scaler_growth_tracker"] = strconv.Itoa(s.Tracker)
	meta["grad_scaler_growth_interval"] = strconv.Itoa(s.GrowthInterval)
	meta["grad_scaler_skipped_steps"] = strconv.Itoa(s.Skipped)
}

// Restore sets the scaler from a checkpoint's training state. A state
// without a scaler (a run in another precision) leaves it at its start.
func (s *GradScaler) Restore(meta map[string]string) error {
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
		s.GrowthInterval = v
	}
	s.Scale, s.Tracker, s.Skipped = float32(scale), tracker, skipped
	return nil
}
