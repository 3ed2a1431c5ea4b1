package train

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
)

// muonOf sets c's optimizer to Muon, with a weight decay on the matrices
// so that every part of its update runs.
func muonOf(c Config) Config {
	c.Optimizer, c.MuonLR, c.MuonWeightDecay = "muon", 0.05, 0.01
	return c
}

// TestMuonResumeIsExact resumes Muon runs from a checkpoint and checks
// that the final weights and the optimizer state at the end are bitwise
// the uninterrupted run's: GPT-2 blocks (q, k, v of one shape, each
// written straight into its Newton–Schulz batch) in fp32 and bf16 (bf16
// Newton–Schulz products), and Llama-style blocks with grouped keys and
// values (q wider than k and v: the parts of one weight in two batches).
// A resume that changes a Muon setting is refused, naming it.
func TestMuonResumeIsExact(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(Config) Config
	}{
		{"gpt2-fp32", func(c Config) Config { return c }},
		{"gpt2-bf16", func(c Config) Config { c.Precision = "bf16"; return c }},
		{"llama-gqa", llamaOf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name != "llama-gqa" {
				t.Skip("one case in -short mode")
			}
			testMuonResume(t, muonOf(tc.cfg(resumeConfig(t))))
		})
	}
}

func testMuonResume(t *testing.T, c Config) {
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	want := mustRead(t, filepath.Join(c.Out, ModelFile))
	root := filepath.Join(c.Out, CheckpointDir)
	wantState := mustRead(t, filepath.Join(root, checkpoint.DirName(30), StateFile))
	rc := stoppedAt(t, c, 15)
	bad := rc
	bad.Resume, bad.MuonLR = true, 0.03
	if _, err := Run(bad, &log); err == nil || !strings.Contains(err.Error(), "MuonLR") {
		t.Fatalf("a resume with another Muon rate: %v, want a refusal naming MuonLR", err)
	}
	rc.Resume = true
	log.Reset()
	if _, err := Run(rc, &log); err != nil {
		t.Fatalf("resume: %v\n%s", err, log.String())
	}
	if got := mustRead(t, filepath.Join(rc.Out, ModelFile)); !bytes.Equal(got, want) {
		t.Error("the resumed run's weights differ from the uninterrupted run's")
	}
	if got := mustRead(t, filepath.Join(rc.Out, CheckpointDir, checkpoint.DirName(30), StateFile)); !bytes.Equal(got, wantState) {
		t.Error("the resumed run's optimizer state at step 30 differs from the uninterrupted run's")
	}
}

// TestMuonDDP: 2 ranks of 6 windows with Muon end where one process of
// 12 does, every rank with the same weights.
func TestMuonDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a group")
	}
	checkTwoRanksEqualOne(t, muonOf(llamaOf(ddpConfig(t, 2026))))
}

// muonZeroRE is what a rank of a ZeRO-1 group with Muon says it keeps.
var muonZeroRE = regexp.MustCompile(`zero: Muon's and AdamW's state sharded over (\d+) ranks, cut between matrices where the ranks' costs even out: this rank keeps the state of parameters \[(\d+), (\d+)\) of (\d+) \((\d+) of Muon's (\d+) matrices\)`)

// TestMuonZero trains Llama-style blocks with grouped keys and values
// (fused q/k/v weights of unequal parts) with Muon under --zero 1, on 2
// and 4 ranks over the TCP ring and on 4 through the device-group path
// NCCL takes (its host stand-in), against plain DDP with the same split.
// On 2 ranks with clipping off the sharded group's weights are bit for
// bit plain DDP's: each matrix is updated whole by its owner from the
// same averaged gradient. On 4, a reduce-scatter's sums start at other
// ranks than an all-reduce's do; with the clip on, each rank adds its
// shard's squares before the group adds theirs, so the clip coefficient
// can differ in its last bit. Muon carries such last bits on further
// than AdamW (measured after 30 steps: 2.5e-5 with the clip on 2 ranks;
// plain DDP itself ends 1.8e-5 from one process, 9e-5 with clipping off). Rank 0 keeps the state of
// a shard cut between matrices, fewer than all of them. Then a 2-rank run
// stopped at step 20 resumes on 3 ranks sharded (cut elsewhere) and in
// one process, each within 1e-5 of the uninterrupted 2-rank run at step
// 30.
func TestMuonZero(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 11 groups")
	}
	base := muonOf(llamaOf(zeroConfig(t)))
	base.NHead, base.NKVHead = 4, 2
	for _, tc := range []struct {
		name    string
		world   int
		backend string
		clip    float64
	}{{"2_ranks", 2, "", 0}, {"4_ranks", 4, "", 1}, {"4_ranks_nccl", 4, "nccl", 1}, {"2_ranks_clip", 2, "", 1}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Out = filepath.Join(t.TempDir(), "ddp")
			cfg.BatchSize, cfg.DistBackend, cfg.GradClip = base.BatchSize/tc.world, tc.backend, tc.clip
			plain := runGroup(t, cfg, tc.world)
			cfg.Out = filepath.Join(t.TempDir(), "zero")
			cfg.Zero, cfg.BucketMB = 1, 1
			ranks, outs := runGroupOut(t, cfg, tc.world)
			m := muonZeroRE.FindStringSubmatch(outs[0])
			if m == nil {
				t.Fatalf("rank 0 does not say what it keeps:\n%s", outs[0])
			}
			t.Log(m[0])
			if m[1] != strconv.Itoa(tc.world) || m[2] != "0" || m[3] == m[4] || m[5] == "0" || m[5] == m[6] {
				t.Errorf("rank 0 keeps %q over %d ranks; want a first shard of some of the matrices", m[0], tc.world)
			}
			for r := range ranks {
				if name := sameBits(ranks[0], ranks[r]); name != "" {
					t.Errorf("rank %d's %s differs from rank 0's", r, name)
				}
			}
			if tc.world == 2 && tc.clip == 0 {
				if name := sameBits(ranks[0], plain[0]); name != "" {
					t.Errorf("on 2 ranks with clipping off, --zero 1's %s differs from plain DDP's", name)
				}
				return
			}
			d := maxDiff(t, ranks[0], plain[0])
			t.Logf("%s: %.3g from plain DDP", tc.name, d)
			if d > 1e-4 {
				t.Errorf("--zero 1 with Muon ends %.3g from plain DDP (want ≤ 1e-4)", d)
			}
		})
	}

	cfg := base
	cfg.BatchSize, cfg.Zero = 6, 1
	cfg.Out = filepath.Join(t.TempDir(), "whole")
	whole := runGroup(t, cfg, 2)
	first := cfg
	first.Out = filepath.Join(t.TempDir(), "first")
	first.MaxIters, first.CkptInterval = 20, 10
	runGroup(t, first, 2)
	for _, tc := range []struct {
		name         string
		world, batch int
	}{{"3_ranks_zero", 3, 4}, {"1_process", 1, 12}} {
		t.Run("resume_"+tc.name, func(t *testing.T) {
			next := cfg
			next.BatchSize = tc.batch
			if tc.world == 1 {
				next.Zero = 0
			}
			got := resumedDiffs(t, first.Out, next, tc.world, whole[0])
			for r, d := range got {
				if d > 1e-5 {
					t.Errorf("rank %d resumed as %s ends %.3g from the uninterrupted run (want ≤ 1e-5)", r, tc.name, d)
				}
			}
			t.Logf("resumed at step 20 as %s: %v from the uninterrupted 2-rank run", tc.name, got)
		})
	}
}
