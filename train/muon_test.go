package train

import (
	"bytes"
	"os"
	"path/filepath"
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
	rc := c
	rc.Out = filepath.Join(t.TempDir(), "out")
	os.MkdirAll(filepath.Join(rc.Out, CheckpointDir), 0o755)
	for _, f := range []string{ConfigFile, TokenizerFile, MetricsFile} {
		os.WriteFile(filepath.Join(rc.Out, f), mustRead(t, filepath.Join(c.Out, f)), 0o644)
	}
	if err := os.CopyFS(filepath.Join(rc.Out, CheckpointDir, checkpoint.DirName(15)), os.DirFS(filepath.Join(root, checkpoint.DirName(15)))); err != nil {
		t.Fatal(err)
	}
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
// 12 does, every rank with the same weights; ZeRO-1 with Muon is refused
// with a reason.
func TestMuonDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a group")
	}
	base := muonOf(llamaOf(ddpConfig(t, 2026)))
	ref := runSingle(t, base)
	cfg := base
	cfg.Out = filepath.Join(t.TempDir(), "out")
	cfg.BatchSize = 6
	ranks, _ := runGroupOut(t, cfg, 2)
	if name := sameBits(ranks[0], ranks[1]); name != "" {
		t.Errorf("rank 1's %s differs from rank 0's", name)
	}
	if d := maxDiff(t, ranks[0], ref); d > 1e-5 {
		t.Errorf("2 ranks × 6 end %.3g from 1 process × 12 (want ≤ 1e-5)", d)
	}
	cfg.Zero = 1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "ZeRO-1") {
		t.Errorf("muon with ZeRO-1: %v, want a refusal", err)
	}
}
