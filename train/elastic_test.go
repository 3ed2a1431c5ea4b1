package train

import (
	"bytes"
	"strings"
	"testing"

	"github.com/fleetml/fleet/train/config"
)

// TestKeepGlobalBatch: an elastic restart with fewer ranks raises the
// accumulation to keep the checkpoint's global batch, leaves a run that
// keeps it (or sets --tokens-per-step) alone, and refuses a global batch
// the remaining ranks cannot split, naming the numbers.
func TestKeepGlobalBatch(t *testing.T) {
	runOf := func(batch, accum, world int) config.RunConfig {
		return config.RunConfig{Train: Config{BatchSize: batch, GradAccum: accum, WorldSize: world, BlockSize: 16}}
	}
	for _, tc := range []struct {
		name                string
		was                 [3]int // batch, accum, world of the checkpoint
		batch, accum, world int
		tokensPerStep       int
		want                int // the accumulation after; 0: refused
	}{
		{"3 to 2 ranks", [3]int{2, 2, 3}, 2, 2, 2, 0, 3},
		{"4 to 1", [3]int{3, 1, 4}, 3, 1, 1, 0, 4},
		{"unchanged", [3]int{2, 2, 3}, 2, 2, 3, 0, 2},
		{"tokens per step", [3]int{2, 2, 3}, 2, 2, 2, 192, 2},
		{"does not divide", [3]int{2, 1, 3}, 2, 1, 2, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{BatchSize: tc.batch, GradAccum: tc.accum, WorldSize: tc.world, BlockSize: 16, TokensPerStep: tc.tokensPerStep}
			var log bytes.Buffer
			err := keepGlobalBatch(&cfg, runOf(tc.was[0], tc.was[1], tc.was[2]), &log)
			if tc.want == 0 {
				if err == nil || !strings.Contains(err.Error(), "global batch of 6 sequences") {
					t.Fatalf("err = %v, want a refusal naming the global batch", err)
				}
				return
			}
			if err != nil || cfg.GradAccum != tc.want {
				t.Fatalf("accumulation %d (%v), want %d", cfg.GradAccum, err, tc.want)
			}
		})
	}
}
