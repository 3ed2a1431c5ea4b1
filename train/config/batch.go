package config

import "github.com/fleetml/fleet/internal/setting"

// AutoBatchCap bounds the micro-batch of --batch-size auto when no
// --tokens-per-step bounds it: past a few hundred sequences a larger
// micro-batch buys no speed.
const AutoBatchCap = 1024

// BatchPlan is how an optimizer step's batch is made: Micro sequences of
// Block tokens per micro-batch in each of World processes, Accum
// micro-steps per optimizer step.
type BatchPlan struct {
	Micro, Accum, World, Block int
}

// TokensPerStep is the global tokens of one optimizer step.
func (p BatchPlan) TokensPerStep() int { return p.Sequences() * p.Block }

// Sequences is the global batch in sequences: those of one optimizer step
// over every process.
func (p BatchPlan) Sequences() int { return p.Micro * p.Accum * p.World }

// ProcessTokens is the tokens one process trains on in an optimizer step.
func (p BatchPlan) ProcessTokens() int { return p.Micro * p.Accum * p.Block }

// PlanBatch is the one place where the micro-batch (BatchSize), the
// accumulation (GradAccum), the global token budget (TokensPerStep) and
// the world size meet; everything that needs the batch asks it. GradAccum
// 0 means unset: 1, or what TokensPerStep makes it. TokensPerStep, when
// set, must be a whole number of micro-steps of the whole group, and a
// GradAccum given with it must be the one it makes (so a resolved plan
// plans to itself).
func (c Config) PlanBatch() (BatchPlan, error) {
	p := BatchPlan{Micro: c.BatchSize, Accum: c.GradAccum, World: max(c.WorldSize, 1), Block: c.BlockSize}
	switch {
	case p.Micro <= 0:
		return p, setting.Errorf("{BatchSize} must be positive, got %d", c.BatchSize)
	case p.Block <= 0:
		return p, setting.Errorf("{BlockSize} must be positive, got %d", c.BlockSize)
	case c.GradAccum < 0:
		return p, setting.Errorf("{GradAccum} must be positive, got %d", c.GradAccum)
	case c.TokensPerStep < 0:
		return p, setting.Errorf("{TokensPerStep} must be positive, got %d", c.TokensPerStep)
	case c.TokensPerStep == 0:
		p.Accum = max(c.GradAccum, 1)
		return p, nil
	}
	perMicro := p.Micro * p.Block * p.World
	if c.TokensPerStep%perMicro != 0 {
		return p, setting.Errorf("{TokensPerStep} %d is not a multiple of batch size %d × block size %d × world size %d = %d tokens per micro-step",
			c.TokensPerStep, p.Micro, p.Block, p.World, perMicro)
	}
	p.Accum = c.TokensPerStep / perMicro
	if c.GradAccum > 0 && c.GradAccum != p.Accum {
		return p, setting.Errorf("{TokensPerStep} %d cannot be combined with {GradAccum} %d: it sets the accumulation itself (to %d)",
			c.TokensPerStep, c.GradAccum, p.Accum)
	}
	return p, nil
}

// MaxMicro is the largest micro-batch --batch-size auto may choose: the
// token budget's sequences per process with TokensPerStep (which must be
// whole), else AutoBatchCap.
func (c Config) MaxMicro() (int, error) {
	if c.TokensPerStep <= 0 {
		return AutoBatchCap, nil
	}
	world := max(c.WorldSize, 1)
	if c.BlockSize <= 0 || c.TokensPerStep%(c.BlockSize*world) != 0 {
		return 0, setting.Errorf("{TokensPerStep} %d is not a multiple of block size %d × world size %d", c.TokensPerStep, c.BlockSize, world)
	}
	return c.TokensPerStep / (c.BlockSize * world), nil
}

// WithBatch returns c with micro-batch b and the accumulation its batch
// plan gives, resolved.
func (c Config) WithBatch(b int) (Config, error) {
	c.BatchSize, c.BatchAuto = b, false
	p, err := c.PlanBatch()
	if err != nil {
		return c, err
	}
	c.GradAccum = p.Accum
	return c, nil
}
