package config

import (
	"bytes"
	"testing"
)

// TestKeepGlobalBatch: an elastic restart with fewer ranks raises the
// accumulation to keep the checkpoint's global batch, leaves a run that
// keeps it (or sets --tokens-per-step) alone, and refuses a global batch
// the remaining ranks cannot split, naming the numbers.
func TestKeepGlobalBatch(t *testing.T) {
	runOf := func(batch, accum, world int) RunConfig {
		return RunConfig{Train: Config{BatchSize: batch, GradAccum: accum, WorldSize: world, BlockSize: 16}}
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
			err := KeepGlobalBatch(&cfg, runOf(tc.was[0], tc.was[1], tc.was[2]), &log)
			if tc.want == 0 {
				want := "elastic restart with 2 processes: the checkpoint's global batch of 6 sequences (2 × 1 × 3 processes) is not a multiple of BatchSize 2 × 2 processes, so no GradAccum keeps it"
				if err == nil || err.Error() != want {
					t.Fatalf("err = %v, want a refusal naming the global batch", err)
				}
				return
			}
			if err != nil || cfg.GradAccum != tc.want {
				t.Fatalf("accumulation %d (%v), want %d", cfg.GradAccum, err, tc.want)
			}
			if tc.name == "3 to 2 ranks" {
				want := "elastic: 2 processes where the checkpoint had 3: --grad-accum 2 → 3 keeps the global batch of 12 sequences\n"
				if log.String() != want {
					t.Errorf("log %q, want %q", log.String(), want)
				}
			}
		})
	}
}
