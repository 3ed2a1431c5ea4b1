package train

import (
	"fmt"
	"io"

	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/train/config"
)

// keepGlobalBatch readies an elastic restart (Config.Elastic) from a
// checkpoint of the run was: a group that lost ranks since its checkpoint
// keeps the checkpoint's global
// batch, sequences per optimizer step, by raising each rank's gradient
// accumulation, because batches depend only on the seed and the step,
// never on the split. A global batch the remaining ranks cannot split
// evenly with the run's micro-batch is refused, saying why. A run that
// sets TokensPerStep has its accumulation follow the world already.
func keepGlobalBatch(cfg *Config, was config.RunConfig, log io.Writer) error {
	if cfg.TokensPerStep > 0 {
		return nil
	}
	w := was.Train
	global := w.BatchSize * max(w.GradAccum, 1) * max(w.WorldSize, 1)
	world := max(cfg.WorldSize, 1)
	perMicro := cfg.BatchSize * world
	if cfg.BatchSize*max(cfg.GradAccum, 1)*world == global || w.BlockSize != cfg.BlockSize {
		return nil // the same global batch, or another run's (resumeCheck refuses it)
	}
	if perMicro <= 0 || global%perMicro != 0 {
		return setting.Errorf("elastic restart with %d processes: the checkpoint's global batch of %d sequences (%d × %d × %d processes) is not a multiple of {BatchSize} %d × %d processes, so no {GradAccum} keeps it",
			world, global, w.BatchSize, max(w.GradAccum, 1), max(w.WorldSize, 1), cfg.BatchSize, world)
	}
	accum := global / perMicro
	if cfg.Rank == 0 {
		fmt.Fprintf(log, "elastic: %d processes where the checkpoint had %d: --grad-accum %d → %d keeps the global batch of %d sequences\n",
			world, max(w.WorldSize, 1), max(cfg.GradAccum, 1), accum, global)
	}
	cfg.GradAccum = accum
	return nil
}
