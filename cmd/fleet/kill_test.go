package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/testenv"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
)

// buildFleet builds the fleet binary into a temporary folder.
func buildFleet(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fleet")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// wordText is a deterministic text of random words, n bytes or more.
func wordText(n int) string {
	words := strings.Fields("the of and to in that is was he for it with as his on be at by had not are but from or have an they which one you were her all she there would their we him been has when who will more no if out so said what up its about into than them can only other new some could time these two may then do first any my now such like our over man me even most made after also did many before must through back years where much your way well down should because each just those people how too little state good very make world still own see men work long get here between both life being under never day same another know while last might us great old year off come since against go came right used take three")
	r := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(12) == 0 {
			b.WriteString(".\n")
		} else {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// wordVocab is the character vocabulary size of wordText(n).
func wordVocab(n int) int {
	chars := map[rune]bool{}
	for _, c := range wordText(n) {
		chars[c] = true
	}
	return len(chars)
}

// sameModel fails the test unless the runs in outs a and b wrote the same
// model.safetensors, byte for byte.
func sameModel(t *testing.T, a, b, what string) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(a, train.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(b, train.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: model.safetensors differs", what)
	}
}

// checkLatest verifies and loads the newest checkpoint in out and returns
// its step (-1 with none). A damaged step directory fails the test.
func checkLatest(t *testing.T, out string, mc model.Config) int {
	t.Helper()
	d, m, skipped, err := checkpoint.Latest(filepath.Join(out, train.CheckpointDir))
	if err != nil || len(skipped) > 0 {
		t.Fatalf("checkpoints in %s: %v, skipped %v", out, err, skipped)
	}
	if d == "" {
		return -1
	}
	g, err := model.New(mc, tensor.CPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.LoadWeights(filepath.Join(d, train.ModelFile)); err != nil {
		t.Fatalf("checkpoint %s: %v", d, err)
	}
	if _, err := checkpoint.Load(filepath.Join(d, train.StateFile)); err != nil {
		t.Fatalf("checkpoint %s: %v", d, err)
	}
	return m.Step
}

// startKill starts the trainer, kills it with SIGKILL after d (unless it
// finished first) and reports whether it was killed.
func startKill(t *testing.T, bin string, args []string, d time.Duration) bool {
	t.Helper()
	return startKillAfter(t, bin, args, "", d)
}

// startKillAfter is startKill with d counted from the moment the trainer
// first prints after (at once where after is ""): a kill at a random
// moment of its work, however long a loaded machine takes to start it.
func startKillAfter(t *testing.T, bin string, args []string, after string, d time.Duration) bool {
	t.Helper()
	out := &testenv.SyncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for after != "" && !strings.Contains(out.String(), after) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("trainer failed before the kill: %v\n%s", err, out.String())
			}
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("trainer failed before the kill: %v\n%s", err, out.String())
		}
		return false
	case <-time.After(d):
		cmd.Process.Kill()
		<-done
		return true
	}
}

// TestKillDuringCheckpoints kills the trainer with SIGKILL at random
// moments while it checkpoints every step, resuming each time; the
// newest checkpoint must always verify and load, and never go backwards.
// Then, as the acceptance run, a 200-step run with --ckpt-interval 10 is
// killed at random moments and resumed until it finishes, and its
// model.safetensors must be bitwise the uninterrupted run's.
func TestKillDuringCheckpoints(t *testing.T) {
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(300_000))
	shape := []string{"--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64", "--batch-size", "12"}
	kills := 20
	if testing.Short() {
		shape = []string{"--n-layer", "2", "--n-head", "2", "--n-embd", "64", "--block-size", "32", "--batch-size", "8"}
		kills = 6
	}
	common := append([]string{"train", "--data", data, "--device", "cpu", "--dropout", "0.1", "--grad-accum", "2",
		"--data-workers", "2", "--eval-interval", "100", "--eval-iters", "2", "--log-interval", "50"}, shape...)
	mc := model.Config{VocabSize: 0, Dropout: 0.1}
	fmt.Sscan(shape[1], &mc.NLayer)
	fmt.Sscan(shape[3], &mc.NHead)
	fmt.Sscan(shape[5], &mc.NEmbd)
	fmt.Sscan(shape[7], &mc.BlockSize)
	mc.VocabSize = wordVocab(300_000)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))

	// Kills during continuous checkpoint writes.
	outK := filepath.Join(dir, "kill")
	prev, killed := -1, 0
	for i := 0; killed < kills && i < 4*kills; i++ {
		args := append(append([]string{}, common...), "--out", outK, "--resume", "--max-iters", "100000", "--ckpt-interval", "1", "--keep", "2")
		// At a random moment within a few steps of its first checkpoint
		// write: while it writes one checkpoint after another.
		if startKillAfter(t, bin, args, "checkpoint step", time.Duration(r.IntN(600))*time.Millisecond) {
			killed++
		}
		step := checkLatest(t, outK, mc)
		if step < prev {
			t.Fatalf("kill %d: the newest checkpoint went back from step %d to %d", killed, prev, step)
		}
		prev = step
	}
	t.Logf("%d kills during checkpoint writes; the newest checkpoint always verified and loaded (last at step %d)", killed, prev)
	if prev < 1 {
		t.Fatalf("no checkpoint was ever written")
	}

	// The acceptance run.
	run := append(append([]string{}, common...), "--max-iters", "200", "--ckpt-interval", "10")
	outA := filepath.Join(dir, "uninterrupted")
	t0 := time.Now()
	if startKill(t, bin, append(append([]string{}, run...), "--out", outA), time.Hour) {
		t.Fatal("unreachable")
	}
	full := time.Since(t0)
	outB := filepath.Join(dir, "resumed")
	prev, resumes := -1, 0
	for n := 0; ; n++ {
		args := append(append([]string{}, run...), "--out", outB, "--resume")
		d := time.Duration(float64(full) * (0.1 + 0.3*r.Float64()))
		if n >= 5 {
			d = time.Hour // let it finish
		}
		if !startKill(t, bin, args, d) {
			break
		}
		resumes++
		step := checkLatest(t, outB, mc)
		if step < prev {
			t.Fatalf("the newest checkpoint went back from step %d to %d", prev, step)
		}
		t.Logf("killed after %v: newest checkpoint at step %d", d.Round(time.Millisecond), step)
		prev = step
	}
	want, err := os.ReadFile(filepath.Join(outA, train.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(outB, train.ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("after %d kills and resumes, model.safetensors differs from the uninterrupted run's", resumes)
	}
	t.Logf("uninterrupted run %v; %d kills and resumes; model.safetensors bitwise identical", full.Round(time.Millisecond), resumes)
}

// TestKillZeroGroup kills a 2-rank --zero 1 job (the launcher with
// SIGKILL; its processes die with it) at random moments while it
// checkpoints every step, resuming each time: the newest checkpoint (the
// moments gathered from both shards) must always verify and load and
// never go backwards, and the job, resumed until it finishes, must end
// with the uninterrupted job's model.safetensors, bit for bit.
func TestKillZeroGroup(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the processes die with their launcher on Linux only")
	}
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	job := func(out string, extra ...string) []string {
		return append([]string{"run", "--nproc-per-node", "2", "--max-restarts", "0", "--", bin, "train"},
			ddpTrainArgs(data, out, append([]string{"--zero", "1", "--dist-backend", "tcp", "--max-iters", "300", "--grad-accum", "2",
				"--comm-timeout", "30s"}, extra...)...)...)
	}
	mc := model.Config{NLayer: 2, NHead: 2, NEmbd: 32, BlockSize: 16}
	mc.VocabSize = wordVocab(100_000)
	outA := filepath.Join(dir, "uninterrupted")
	t0 := time.Now()
	if startKill(t, bin, job(outA, "--ckpt-interval", "1", "--keep", "2"), time.Hour) {
		t.Fatal("unreachable")
	}
	full := time.Since(t0)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	outB := filepath.Join(dir, "killed")
	prev, kills := -1, 0
	for n := 0; ; n++ {
		// A kill moment inside what is left of the job (its steps from
		// the newest checkpoint on), counted from the resumed job's
		// first checkpoint write, so that neither the remaining steps
		// nor a slow start on a loaded machine let it finish first.
		left := float64(300-max(prev, 0)) / 300
		d := time.Duration(float64(full) * left * (0.1 + 0.3*r.Float64()))
		if n >= 4 {
			d = time.Hour // let it finish
		}
		if !startKillAfter(t, bin, append(job(outB, "--ckpt-interval", "1", "--keep", "2"), "--resume"), "checkpoint step", d) {
			break
		}
		kills++
		time.Sleep(200 * time.Millisecond) // the ranks die with the launcher
		step := checkLatest(t, outB, mc)
		if step < prev {
			t.Fatalf("kill %d: the newest checkpoint went back from step %d to %d", kills, prev, step)
		}
		t.Logf("killed after %v: newest checkpoint at step %d", d.Round(time.Millisecond), step)
		prev = step
	}
	if kills < 2 || prev < 1 {
		t.Fatalf("%d kills, newest checkpoint at step %d: the test did not kill the job while it checkpointed", kills, prev)
	}
	sameModel(t, outA, outB, fmt.Sprintf("after %d kills and resumes, against the uninterrupted job", kills))
}

// TestSignalSavesCheckpoint sends SIGTERM to a training run: it must save a
// checkpoint, say so, and resume from it.
func TestSignalSavesCheckpoint(t *testing.T) {
	bin := buildFleet(t)
	dir := t.TempDir()
	data := writeFile(t, dir, "words.txt", wordText(100_000))
	out := filepath.Join(dir, "out")
	args := append([]string{"train", "--data", data, "--out", out}, tiny[:len(tiny)-8]...)
	args = append(args, "--max-iters", "100000", "--eval-interval", "1000", "--eval-iters", "2", "--log-interval", "1000")
	var buf bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if err == nil || !strings.Contains(buf.String(), "continue with --resume") {
		t.Fatalf("after SIGINT: %v\n%s", err, buf.String())
	}
	d, m, _, err := checkpoint.Latest(filepath.Join(out, train.CheckpointDir))
	if err != nil || m == nil || m.Step < 1 {
		t.Fatalf("no checkpoint after SIGINT: %q %v\n%s", d, err, buf.String())
	}
	// Without --resume the folder is refused.
	code, _, stderr := fleet(t, args...)
	if code != 1 || !strings.Contains(stderr, "--resume") {
		t.Fatalf("train into a folder with checkpoints: exit %d, %s", code, stderr)
	}
}
