package config

import (
	"fmt"
	"io"

	"github.com/fleetml/fleet/internal/setting"
)

// KeepGlobalBatch readies an elastic restart (Config.Elastic) from a
// checkpoint of the run was: a group that lost ranks since its checkpoint
// keeps the checkpoint's global batch, sequences per optimizer step, by
// raising each rank's gradient accumulation, because batches depend only
// on the seed and the step, never on the split. Both batches are the
// batch plan's (PlanBatch): the accumulation is the one that plans the
// checkpoint's global tokens with cfg's micro-batch and world. A global
// batch the remaining ranks cannot split evenly with the run's
// micro-batch is refused, saying why. A run that sets TokensPerStep has
// its accumulation follow the world already.
func KeepGlobalBatch(cfg *Config, was RunConfig, log io.Writer) error {
	if cfg.TokensPerStep > 0 {
		return nil
	}
	old, err := was.Train.PlanBatch()
	if err != nil || old.Block != cfg.BlockSize {
		return nil // another run's, or none a batch plan reads (ResumeCheck compares them)
	}
	now, err := cfg.PlanBatch()
	if err != nil {
		return err
	}
	if now.Sequences() == old.Sequences() {
		return nil // the same global batch
	}
	keep := *cfg
	keep.GradAccum, keep.TokensPerStep = 0, old.TokensPerStep()
	p, err := keep.PlanBatch()
	if err != nil {
		return setting.Errorf("elastic restart with %d processes: the checkpoint's global batch of %d sequences (%d × %d × %d processes) is not a multiple of {BatchSize} %d × %d processes, so no {GradAccum} keeps it",
			now.World, old.Sequences(), old.Micro, old.Accum, old.World, cfg.BatchSize, now.World)
	}
	if cfg.Rank == 0 {
		fmt.Fprintf(log, "elastic: %d processes where the checkpoint had %d: --grad-accum %d → %d keeps the global batch of %d sequences\n",
			now.World, old.World, now.Accum, p.Accum, old.Sequences())
	}
	cfg.GradAccum = p.Accum
	return nil
}
