//go:build unix

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/launch"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/ddp"
)

// line is one line of a job's output and when the test read it.
type line struct {
	at   time.Time
	text string
}

// job is a fleet command whose output (standard output and error
// together) the test reads line by line as it comes.
type job struct {
	cmd   *exec.Cmd
	lines chan line
	seen  []line
	done  chan error
}

// jobEnv is this process's environment without what would place the job
// in another one or inject a fault, plus extra.
func jobEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
			"FLEET_JOB_SECRET", "TORCHELASTIC_RESTART_COUNT", "FLEET_FAULT_EXIT":
			continue
		}
		if strings.HasPrefix(name, "SLURM_") || strings.HasPrefix(name, "PET_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func startJob(t *testing.T, bin string, env []string, args ...string) *job {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	j := &job{cmd: cmd, lines: make(chan line, 1024), done: make(chan error, 1)}
	go func() {
		s := bufio.NewScanner(pr)
		s.Buffer(nil, 1<<20)
		for s.Scan() {
			j.lines <- line{time.Now(), s.Text()}
		}
		pr.Close()
		close(j.lines)
	}()
	go func() { j.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
		}
	})
	return j
}

// waitFor reads lines until one contains s, for at most d.
func (j *job) waitFor(t *testing.T, s string, d time.Duration) line {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-j.lines:
			if !ok {
				t.Fatalf("the job's output ended before a line with %q:\n%s", s, j.output())
			}
			j.seen = append(j.seen, l)
			if strings.Contains(l.text, s) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line with %q within %v:\n%s", s, d, j.output())
		}
	}
}

// finish reads the rest of the output and waits for the job to exit, for
// at most d; it returns the exit error and when the output ended.
func (j *job) finish(t *testing.T, d time.Duration) (error, time.Time) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l, ok := <-j.lines:
			if ok {
				j.seen = append(j.seen, l)
				continue
			}
			end := time.Now()
			select {
			case err := <-j.done:
				return err, end
			case <-deadline:
			}
		case <-deadline:
		}
		j.cmd.Process.Kill()
		t.Fatalf("the job did not finish within %v:\n%s", d, j.output())
	}
}

func (j *job) output() string {
	var b strings.Builder
	for _, l := range j.seen {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// find is the first line read that contains every one of subs.
func (j *job) find(subs ...string) (line, bool) {
next:
	for _, l := range j.seen {
		for _, s := range subs {
			if !strings.Contains(l.text, s) {
				continue next
			}
		}
		return l, true
	}
	return line{}, false
}

// ddpTrainArgs are a small model's flags for the data-parallel job tests.
func ddpTrainArgs(data, out string, extra ...string) []string {
	args := []string{"--data", data, "--out", out, "--device", "cpu",
		"--n-layer", "2", "--n-head", "2", "--n-embd", "32", "--block-size", "16", "--batch-size", "4",
		"--lr", "1e-3", "--warmup-iters", "2", "--eval-interval", "1000", "--eval-iters", "1",
		"--log-interval", "5", "--data-workers", "1"}
	return append(args, extra...)
}

// TestDDPRankDies kills rank 1 of a 2-rank job after step 5 (the trainer's
// fault-injection hook, an exit as if crashed) with no restarts: the
// launcher must name rank 1, rank 0 must fail with an error that names
// rank 1 and the all-reduce, and the job must end well within the
// collective timeout (20 s) plus a few seconds.
func TestDDPRankDies(t *testing.T) {
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	const timeout = 20 * time.Second
	args := append([]string{"run", "--nproc-per-node", "2", "--max-restarts", "0", "--", bin, "train"},
		ddpTrainArgs(data, filepath.Join(dir, "out"), "--max-iters", "200", "--comm-timeout", timeout.String())...)
	j := startJob(t, bin, jobEnv("FLEET_FAULT_EXIT=1:5"), args...)
	fault := j.waitFor(t, "[rank 1] FLEET_FAULT_EXIT: rank 1 exits after step 5", 2*time.Minute)
	err, end := j.finish(t, timeout+time.Minute)
	out := j.output()
	if err == nil {
		t.Fatalf("the job succeeded although rank 1 died:\n%s", out)
	}
	if _, ok := j.find("fleet run: rank 1 (pid", "exited with status 3"); !ok {
		t.Errorf("the launcher's output does not name rank 1 and its status:\n%s", out)
	}
	rank0, ok := j.find("[rank 0] fleet train:", "rank 1", "all-reduce")
	if !ok {
		t.Fatalf("rank 0's error does not name rank 1 and the all-reduce:\n%s", out)
	}
	if strings.Contains(rank0.text, "fleet train: train:") {
		t.Errorf("rank 0's error repeats its prefix: %q", rank0.text)
	}
	detect, exit := rank0.at.Sub(fault.at), end.Sub(fault.at)
	t.Logf("rank 1 died after step 5; rank 0 failed %v later (%q); the job ended %v after the fault (collective timeout %v)",
		detect.Round(time.Millisecond), rank0.text, exit.Round(time.Millisecond), timeout)
	if exit > timeout+5*time.Second {
		t.Errorf("the job took %v after the fault to end, more than the collective timeout %v plus 5 s", exit, timeout)
	}
	// Rank 0's collective failed: it left its flight record, and the
	// launcher's desync report names rank 1, which left none.
	if _, ok := j.find("fleet run: desync: rank 1 left no flight record", "all-reduce #"); !ok {
		t.Errorf("no desync report naming rank 1:\n%s", out)
	}
}

// TestDDPFlightRecorder stops rank 2 of 4 (SIGSTOP) in the middle of a run
// with a 3 s collective timeout: the others fail in the collective they
// were waiting in and write their flight records; the launcher's desync
// report, within the timeout plus 10 s of the stop, names rank 2 and the
// collective by its sequence number, and `fleet diagnose` on the run's
// folder prints the same.
func TestDDPFlightRecorder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the rank's process in /proc")
	}
	if testing.Short() {
		t.Skip("waits out a collective timeout")
	}
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	out := filepath.Join(dir, "out")
	const timeout = 3 * time.Second
	j, stopped, err, _ := stopRankMidRun(t, bin, data, out, 4, 2, "2s", timeout)
	txt := j.output()
	if err == nil {
		t.Fatalf("the job succeeded although rank 2 was stopped:\n%s", txt)
	}
	report, ok := j.find("fleet run: desync: rank 2 left no flight record")
	if !ok {
		t.Fatalf("no desync report naming rank 2:\n%s", txt)
	}
	var kindSeq, seq int
	i := strings.Index(report.text, " #")
	if i < 0 {
		t.Fatalf("the report names no collective: %q", report.text)
	}
	if _, err := fmt.Sscanf(report.text[i:], " #%d (seq %d", &kindSeq, &seq); err != nil || kindSeq < 1 || seq < kindSeq {
		t.Errorf("the report's collective: %q (%v)", report.text[i:], err)
	}
	if d := report.at.Sub(stopped); d > timeout+10*time.Second {
		t.Errorf("the report came %v after the stop, more than the timeout %v plus 10 s", d, timeout)
	}
	t.Logf("%v after the stop: %s", report.at.Sub(stopped).Round(time.Millisecond), report.text)
	var diag, errb bytes.Buffer
	if err := diagnoseCmd([]string{out}, &diag, &errb); err != nil && !strings.Contains(err.Error(), "telemetry") {
		t.Fatalf("fleet diagnose: %v\n%s", err, errb.String())
	}
	if !strings.Contains(diag.String(), "rank 2 left no flight record") || !strings.Contains(diag.String(), fmt.Sprintf("(seq %d", seq)) {
		t.Errorf("fleet diagnose does not report the same:\n%s", diag.String())
	}
}

// rankPID finds the process of rank rank whose environment holds the
// token (Linux: /proc).
func rankPID(t *testing.T, token string, rank int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		vars := strings.Split(string(env), "\x00")
		if slices.Contains(vars, token) && slices.Contains(vars, "RANK="+strconv.Itoa(rank)) {
			return pid
		}
	}
	t.Fatalf("no process of rank %d", rank)
	return 0
}

// stopRankMidRun starts a job of nproc ranks with collective timeout
// timeout and launcher grace grace, stops rank stop (SIGSTOP: alive,
// connected, silent) after step 5, and waits for the job to end; it
// returns the job, when the rank was stopped, and how and when the job
// ended. The stopped process is killed when the test ends.
func stopRankMidRun(t *testing.T, bin, data, out string, nproc, stop int, grace string, timeout time.Duration) (*job, time.Time, error, time.Time) {
	t.Helper()
	token := fmt.Sprintf("FLEET_TEST_JOB=%x", rand.Uint64())
	args := append([]string{"run", "--nproc-per-node", strconv.Itoa(nproc), "--max-restarts", "0", "--grace", grace, "--", bin, "train"},
		ddpTrainArgs(data, out, "--max-iters", "100000", "--comm-timeout", timeout.String())...)
	j := startJob(t, bin, jobEnv(token), args...)
	j.waitFor(t, "[rank 0] step 5/", 2*time.Minute)
	pid := rankPID(t, token, stop)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	err, end := j.finish(t, timeout+time.Minute)
	return j, stopped, err, end
}

// TestDDPRankStuck stops rank 1 (SIGSTOP: alive, connected, silent) in
// the middle of a run with a 3 s collective timeout: rank 0 must fail
// with an error that names rank 1 and the all-reduce after about the
// timeout, not hang, and the launcher must then end the job.
func TestDDPRankStuck(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the rank's process in /proc")
	}
	if testing.Short() {
		t.Skip("waits out a collective timeout")
	}
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	const timeout = 3 * time.Second
	j, stopped, err, end := stopRankMidRun(t, bin, data, filepath.Join(dir, "out"), 2, 1, "1s", timeout)
	out := j.output()
	if err == nil {
		t.Fatalf("the job succeeded although rank 1 was stopped:\n%s", out)
	}
	rank0, ok := j.find("[rank 0] fleet train:", "rank 1", "all-reduce")
	if !ok {
		t.Fatalf("rank 0's error does not name rank 1 and the all-reduce:\n%s", out)
	}
	if strings.Contains(rank0.text, "fleet train: train:") {
		t.Errorf("rank 0's error repeats its prefix: %q", rank0.text)
	}
	detect, exit := rank0.at.Sub(stopped), end.Sub(stopped)
	t.Logf("rank 1 stopped; rank 0 failed %v later (%q); the job ended %v after the stop (collective timeout %v, launcher grace 1s)",
		detect.Round(time.Millisecond), rank0.text, exit.Round(time.Millisecond), timeout)
	if detect > timeout+5*time.Second {
		t.Errorf("rank 0 took %v to fail, more than the collective timeout %v plus 5 s", detect, timeout)
	}
	if _, ok := j.find("fleet run: rank 0 (pid", "stopping the other processes"); !ok {
		t.Errorf("the launcher's output does not name the failed rank 0:\n%s", out)
	}
}

// runFaultyJob runs `fleet run RUNFLAGS -- fleet train TRAINARGS` to the end,
// with FLEET_FAULT_EXIT=fault where fault is not empty, and returns the
// path of the model it wrote into out and the job's output.
func runFaultyJob(t *testing.T, bin, out, fault string, runFlags, trainArgs []string) (string, string) {
	t.Helper()
	args := append(append(append([]string{"run"}, runFlags...), "--", bin, "train"), trainArgs...)
	env := jobEnv()
	if fault != "" {
		env = append(env, "FLEET_FAULT_EXIT="+fault)
	}
	j := startJob(t, bin, env, args...)
	if err, _ := j.finish(t, 3*time.Minute); err != nil {
		t.Fatalf("%s: %v\n%s", filepath.Base(out), err, j.output())
	}
	return filepath.Join(out, train.ModelFile), j.output()
}

// TestDDPRestartBitwise runs a 2-rank job twice with the same flags
// (dropout, accumulation, a checkpoint every 3 steps): once uninterrupted,
// once with rank 1 dying after step 8 of the first attempt and
// --max-restarts 1, so that the restarted group resumes from the step-6
// checkpoint. Both final model.safetensors must be the same bytes.
func TestDDPRestartBitwise(t *testing.T) {
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	run := func(name, fault string) (string, string) {
		return runFaultyJob(t, bin, filepath.Join(dir, name), fault, []string{"--nproc-per-node", "2", "--max-restarts", "1"},
			ddpTrainArgs(data, filepath.Join(dir, name), "--max-iters", "14", "--dropout", "0.1", "--grad-accum", "2",
				"--ckpt-interval", "3", "--comm-timeout", "1m"))
	}
	plain, _ := run("plain", "")
	restarted, log := run("restarted", "1:8")
	for _, want := range []string{"[rank 1] FLEET_FAULT_EXIT: rank 1 exits after step 8", "restarting all 2 processes (restart 1 of 1)",
		"[rank 0] resume: continuing from", "at step 6", "[rank 1] resume: continuing from"} {
		if !strings.Contains(log, want) {
			t.Fatalf("the faulty run's output lacks %q:\n%s", want, log)
		}
	}
	a, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(restarted)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatalf("the restarted job's model.safetensors differs from the uninterrupted job's:\n%s", log)
	}
}

// TestFlightRecordOnSIGUSR1 asks rank 1 of a running 2-rank job for its
// flight record (SIGUSR1): it writes OUT/flight/rank-1.json, the
// collectives it completed in it, and the job goes on to finish.
func TestFlightRecordOnSIGUSR1(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the rank's process in /proc")
	}
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	out := filepath.Join(dir, "out")
	token := fmt.Sprintf("FLEET_TEST_JOB=%x", rand.Uint64())
	args := append([]string{"run", "--nproc-per-node", "2", "--max-restarts", "0", "--", bin, "train"},
		ddpTrainArgs(data, out, "--max-iters", "2000")...)
	j := startJob(t, bin, jobEnv(token), args...)
	j.waitFor(t, "[rank 0] step 5/", 2*time.Minute)
	if err := syscall.Kill(rankPID(t, token, 1), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	j.waitFor(t, "[rank 1] dist: flight record of the last", 30*time.Second)
	if err, _ := j.finish(t, 2*time.Minute); err != nil {
		t.Fatalf("the job failed after SIGUSR1: %v\n%s", err, j.output())
	}
	dumps, err := dist.ReadFlightDumps(filepath.Join(out, ddp.FlightDir))
	if err != nil || len(dumps) != 1 || dumps[0].Rank != 1 || dumps[0].Reason != "SIGUSR1" {
		t.Fatalf("flight records %+v, %v; want rank 1's, for SIGUSR1", dumps, err)
	}
	done := 0
	for _, e := range dumps[0].Entries {
		if e.State == dist.FlightDone {
			done++
		}
	}
	if done < 5 {
		t.Errorf("rank 1's record holds %d completed collectives after 5 steps", done)
	}
}

// TestElasticShrink runs 3 ranks with --min-nproc 2 where rank 2 fails
// after step 12 in the first attempt and again after the restart: the
// launcher drops it, and the 2 survivors resume from the step-10
// checkpoint with --grad-accum 3 instead of 2, keeping the global batch of
// 12 sequences, and end within 1e-5 of an uninterrupted 3-rank run.
func TestElasticShrink(t *testing.T) {
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	run := func(name, fault string) (string, string) {
		return runFaultyJob(t, bin, filepath.Join(dir, name), fault, []string{"--nproc-per-node", "3", "--min-nproc", "2", "--max-restarts", "3"},
			ddpTrainArgs(data, filepath.Join(dir, name), "--max-iters", "20", "--batch-size", "2", "--grad-accum", "2", "--lr-decay-iters", "20",
				"--ckpt-interval", "5", "--comm-timeout", "1m"))
	}
	plain, _ := run("plain", "")
	shrunk, log := run("shrunk", "2:12:2")
	for _, want := range []string{
		"fleet run: rank 2 (device slot 2) failed again after a restart: dropping it, 2 processes go on (--min-nproc 2)",
		"fleet run: starting 2 processes: ranks 0-1 of 2",
		"[rank 0] elastic: 2 processes where the checkpoint had 3: --grad-accum 2 → 3 keeps the global batch of 12 sequences",
		"[rank 0] resume: continuing from",
	} {
		if !strings.Contains(log, want) {
			t.Fatalf("the shrunk run's output lacks %q:\n%s", want, log)
		}
	}
	a, err := checkpoint.Load(plain)
	if err != nil {
		t.Fatal(err)
	}
	b, err := checkpoint.Load(shrunk)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for name, ta := range a.Tensors {
		va, _ := ta.Float32s()
		vb, err := b.Tensors[name].Float32s()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range va {
			worst = max(worst, math.Abs(float64(va[i]-vb[i])))
		}
	}
	t.Logf("3 ranks shrunk to 2 at step 10: max |w - w_uninterrupted| = %.3g", worst)
	if worst > 1e-5 {
		t.Errorf("the shrunk run ends %.3g from the uninterrupted one (want ≤ 1e-5)", worst)
	}
}

// TestBenchAllReduceCmd runs fleet bench allreduce on two small sizes and
// checks the table: one row per size and world, in bytes, with the bus
// bandwidth algbw × 2(n−1)/n.
func TestBenchAllReduceCmd(t *testing.T) {
	var out, errs bytes.Buffer
	if err := benchCmd([]string{"allreduce", "--world", "2,3", "--sizes", "4KiB,64KiB", "--iters", "3"}, &out, &errs); err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	rows := 0
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] == "ranks" {
			continue
		}
		world, _ := strconv.Atoi(f[0])
		alg, err1 := strconv.ParseFloat(f[4], 64)
		bus, err2 := strconv.ParseFloat(f[5], 64)
		if (f[1] != "4096" && f[1] != "65536") || err1 != nil || err2 != nil || alg <= 0 {
			t.Errorf("row %q", l)
			continue
		}
		if want := alg * 2 * float64(world-1) / float64(world); bus < want-0.002 || bus > want+0.002 {
			t.Errorf("row %q: busbw %v, want algbw × 2(n−1)/n = %.3f", l, bus, want)
		}
		rows++
	}
	if rows != 4 {
		t.Errorf("%d table rows, want 4:\n%s", rows, out.String())
	}
	for _, bad := range [][]string{{"--world", "0"}, {"--sizes", "2"}, {"--sizes", "lots"}, {"--iters", "-1"}} {
		if err := benchCmd(append([]string{"allreduce"}, bad...), &out, &errs); err == nil {
			t.Errorf("fleet bench allreduce %v: no error", bad)
		}
	}
}

// TestDDPStopTogether sends SIGTERM to rank 1 alone (one preempted pod)
// in the middle of a run: the ranks agree on the stop, so both stop after
// the same step, rank 0 saves the group's checkpoint (which verifies and
// loads), and no rank fails in a collective the other never joined.
func TestDDPStopTogether(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("finds the rank's process in /proc")
	}
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	out := filepath.Join(dir, "out")
	token := fmt.Sprintf("FLEET_TEST_JOB=%x", rand.Uint64())
	args := append([]string{"run", "--nproc-per-node", "2", "--max-restarts", "0", "--", bin, "train"},
		ddpTrainArgs(data, out, "--max-iters", "1000000", "--comm-timeout", "30s")...)
	j := startJob(t, bin, jobEnv(token), args...)
	j.waitFor(t, "[rank 0] step 10/", 2*time.Minute)
	if err := syscall.Kill(rankPID(t, token, 1), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err, _ := j.finish(t, 2*time.Minute)
	txt := j.output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != launch.ExitStopped {
		t.Errorf("fleet run ended with %v, want exit status %d (stopped at a step boundary)", err, launch.ExitStopped)
	}
	if strings.Contains(txt, "terminated again") || strings.Contains(txt, "stopping the other processes") {
		t.Errorf("the launcher took the group's stop for a failure:\n%s", txt)
	}
	stopped, ok := j.find("[rank 0] stopped after step")
	if !ok {
		t.Fatalf("rank 0 did not stop with a checkpoint:\n%s", txt)
	}
	if _, ok := j.find("[rank 1]", "interrupted after step", "rank 0 saved"); !ok {
		t.Errorf("rank 1 did not stop with the group:\n%s", txt)
	}
	if strings.Contains(txt, "all-reduce #") || strings.Contains(txt, "barrier") {
		t.Errorf("a collective failed during the stop:\n%s", txt)
	}
	var step int
	fmt.Sscanf(stopped.text, "[rank 0] stopped after step %d", &step)
	mc := model.Config{NLayer: 2, NHead: 2, NEmbd: 32, BlockSize: 16}
	mc.VocabSize = wordVocab(100_000)
	if got := checkLatest(t, out, mc); got != step {
		t.Errorf("the newest checkpoint is at step %d, rank 0 stopped after step %d", got, step)
	}
	t.Logf("SIGTERM to rank 1: the group stopped after step %d with rank 0's checkpoint", step)
}
