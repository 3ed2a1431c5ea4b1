package train

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"testing"
)

// readSummary reads a finished run's summary.json and the loss of its
// last log line in metrics.jsonl (a line with ms_per_step: not an
// evaluation's).
func readSummary(t *testing.T, dir string) (sum Summary, logged float64) {
	t.Helper()
	if err := json.Unmarshal(mustRead(t, filepath.Join(dir, SummaryFile)), &sum); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range splitLines(mustRead(t, filepath.Join(dir, MetricsFile))) {
		var m Metric
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if m.MsPerStep != nil && m.TrainLoss != nil {
			logged, found = *m.TrainLoss, true
		}
	}
	if !found {
		t.Fatalf("%s logged no training loss", dir)
	}
	return sum, logged
}

// TestDDPSummaryIsTheJobs trains the same global batch of 12 windows with
// 1 process and with 2 and 3 ranks: summary.json's final_train_loss is the
// last logged loss (the group's mean, not rank 0's own, which is about
// 1e-2 away on its own rows), and within 1e-5 of the one process's. An
// evaluation at step 8 reads the step statistics inside the last log
// window (steps 6 to 10), so the summary must take the log line's loss,
// not the one read last.
func TestDDPSummaryIsTheJobs(t *testing.T) {
	base := ddpConfig(t, 38)
	base.LogInterval, base.EvalInterval = 5, 8
	single := base
	single.Out = filepath.Join(t.TempDir(), "out")
	var log bytes.Buffer
	if _, err := Run(single, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	one, oneLogged := readSummary(t, single.Out)
	t.Logf("1 process: final_train_loss %.8f, last logged %.8f", one.FinalTrainLoss, oneLogged)
	if one.FinalTrainLoss != oneLogged {
		t.Errorf("1 process: final_train_loss %.8f, but the last log line's loss is %.8f", one.FinalTrainLoss, oneLogged)
	}
	for _, world := range []int{2, 3} {
		cfg := base
		cfg.Out = filepath.Join(t.TempDir(), "out")
		cfg.BatchSize = 12 / world
		runGroup(t, cfg, world)
		sum, logged := readSummary(t, cfg.Out)
		t.Logf("%d ranks: final_train_loss %.8f, last logged %.8f; %.1f ms/step, peak memory %d bytes",
			world, sum.FinalTrainLoss, logged, sum.MsPerStep, sum.PeakMemBytes)
		if sum.FinalTrainLoss != logged {
			t.Errorf("%d ranks: final_train_loss %.8f, but the last log line's (the group's) loss is %.8f", world, sum.FinalTrainLoss, logged)
		}
		if d := math.Abs(sum.FinalTrainLoss - one.FinalTrainLoss); d > 1e-5 {
			t.Errorf("%d ranks: final_train_loss %.8f is %.3g from 1 process's %.8f (want ≤ 1e-5)", world, sum.FinalTrainLoss, d, one.FinalTrainLoss)
		}
		if sum.Steps != base.MaxIters || sum.MsPerStep <= 0 || sum.TokensPerSec <= 0 || sum.PeakMemBytes <= 0 {
			t.Errorf("%d ranks: summary %+v", world, sum)
		}
	}
}

// ranksGroup is a group whose other ranks' figures are given: Gather
// returns this process's values and then others'.
type ranksGroup struct {
	solo
	others [][]float64
}

func (g ranksGroup) Gather(vals []float64) ([][]float64, error) {
	return append([][]float64{vals}, g.others...), nil
}

// TestJobSummaryCombinesTheRanks: the summary's per-rank figures become
// the means over the ranks, its peaks and elapsed time the largest rank's,
// its device memory the smallest's (byte counts exact), MFU follows the
// mean rate, and the final train loss is the last log line's.
func TestJobSummaryCombinesTheRanks(t *testing.T) {
	rank := func(tps, util float64, peak, total int64, elapsed, phase0 float64) Summary {
		s := Summary{TokensPerSec: tps, MsPerStep: 10, UtilPeakPct: util, PeakMemBytes: peak, MemTotalBytes: total,
			ElapsedSec: elapsed, PeakFLOPs: 1e12, FLOPsPerToken: 1e6, PhaseMs: map[string]float64{}}
		for p, name := range PhaseNames {
			s.PhaseMs[name] = phase0 + float64(p)
		}
		return s
	}
	// Rank 1's figures, as its jobSummary sends them.
	var other []float64
	r1 := &run{grp: recordGroup{got: &other}}
	sum1 := rank(300, 80, 7_000_000_001, 8_000_000_000, 25, 2)
	if err := r1.jobSummary(&sum1); err != nil {
		t.Fatal(err)
	}
	if sum1.TokensPerSec != 300 || sum1.PeakMemBytes != 7_000_000_001 {
		t.Fatalf("a process alone changed its own figures: %+v", sum1)
	}

	r := &run{grp: ranksGroup{others: [][]float64{other}}}
	r.stats.lastLoss, r.stats.loggedLoss = 4.25, 3.5
	sum := rank(100, 90, 5_000_000_001, 16_000_000_000, 20, 0)
	if err := r.jobSummary(&sum); err != nil {
		t.Fatal(err)
	}
	check := func(name string, got, want float64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	check("FinalTrainLoss", sum.FinalTrainLoss, 3.5)
	check("TokensPerSec", sum.TokensPerSec, 200)
	check("MFU", sum.MFU, 200*1e6/1e12)
	check("MsPerStep", sum.MsPerStep, 10)
	check("PeakMemBytes", float64(sum.PeakMemBytes), 7_000_000_001)
	check("MemTotalBytes", float64(sum.MemTotalBytes), 8_000_000_000)
	check("ElapsedSec", sum.ElapsedSec, 25)
	check("UtilPeakPct", sum.UtilPeakPct, 90)
	for p, name := range PhaseNames {
		check("PhaseMs["+name+"]", sum.PhaseMs[name], float64(p)+1)
	}
}

// recordGroup is a process alone that records what it is asked to
// gather.
type recordGroup struct {
	solo
	got *[]float64
}

func (g recordGroup) Gather(vals []float64) ([][]float64, error) {
	*g.got = append([]float64(nil), vals...)
	return g.solo.Gather(vals)
}
