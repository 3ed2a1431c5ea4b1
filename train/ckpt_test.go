package train

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
)

func resumeConfig(t *testing.T) Config {
	c := tinyConfig(t)
	c.MaxIters = 30
	c.Dropout = 0.1
	c.GradAccum = 2
	c.DataWorkers = 2
	c.EvalInterval = 10
	c.CkptInterval = 5
	c.Keep = 0
	return c
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestResumeIsExact resumes a run (dropout, accumulation, two loader
// workers) from its checkpoints at several steps and checks that the final
// weights, and the checkpoints written after the resume, are bitwise those
// of the uninterrupted run; in fp32, and in bf16, whose products read
// bf16 copies of the weights that a resume must make from the loaded
// weights.
func TestResumeIsExact(t *testing.T) {
	for _, prec := range []string{"fp32", "bf16"} {
		t.Run(prec, func(t *testing.T) { testResumeIsExact(t, prec) })
	}
}

func testResumeIsExact(t *testing.T, prec string) {
	c := resumeConfig(t)
	c.Precision = prec
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "checkpoint step 30: snapshot") {
		t.Fatalf("no checkpoint log line:\n%s", log.String())
	}
	want := mustRead(t, filepath.Join(c.Out, ModelFile))
	root := filepath.Join(c.Out, CheckpointDir)
	wantStep30 := mustRead(t, filepath.Join(root, checkpoint.DirName(30), StateFile))

	// Without --resume the folder is refused.
	if _, err := Run(c, &log); err == nil || !strings.Contains(err.Error(), "add Resume") {
		t.Fatalf("a second run into the same Out: err = %v, want a refusal naming Resume", err)
	}

	for _, from := range []int{10, 15, 25} {
		// Make the checkpoint at from the newest: copy the run aside and
		// drop later checkpoints and the latest pointer.
		rc := stoppedAt(t, c, from)
		rc.Resume = true
		log.Reset()
		if _, err := Run(rc, &log); err != nil {
			t.Fatalf("resume from %d: %v\n%s", from, err, log.String())
		}
		if !strings.Contains(log.String(), "continuing from") {
			t.Errorf("resume from %d: log does not say it resumed:\n%s", from, log.String())
		}
		if got := mustRead(t, filepath.Join(rc.Out, ModelFile)); !bytes.Equal(got, want) {
			t.Errorf("resume from step %d: final weights differ from the uninterrupted run's", from)
		}
		got := mustRead(t, filepath.Join(rc.Out, CheckpointDir, checkpoint.DirName(30), StateFile))
		if !bytes.Equal(got, wantStep30) {
			t.Errorf("resume from step %d: optimizer state at step 30 differs", from)
		}
	}

	// Resuming the finished run rewrites the final files and stops.
	os.Remove(filepath.Join(c.Out, ModelFile))
	c.Resume = true
	log.Reset()
	res, err := Run(c, &log)
	if err != nil || !strings.Contains(log.String(), "end of the run") || res.Summary.Steps != 30 {
		t.Fatalf("resume a finished run: %v\n%s", err, log.String())
	}
	if got := mustRead(t, filepath.Join(c.Out, ModelFile)); !bytes.Equal(got, want) {
		t.Error("resuming the finished run rewrote different weights")
	}
}

func TestResumeWithoutCheckpoint(t *testing.T) {
	c := tinyConfig(t)
	c.MaxIters = 2
	c.Resume = true
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "starting at step 0") {
		t.Fatalf("log does not say it starts at step 0:\n%s", log.String())
	}
}

func TestStopSavesCheckpoint(t *testing.T) {
	c := tinyConfig(t)
	c.MaxIters = 20
	stop := make(chan struct{})
	close(stop)
	c.Stop = stop
	var log bytes.Buffer
	_, err := Run(c, &log)
	if !errors.Is(err, ErrInterrupted) || !strings.Contains(err.Error(), "after step 1") {
		t.Fatalf("err = %v, want ErrInterrupted after step 1\n%s", err, log.String())
	}
	d, m, _, err := checkpoint.Latest(filepath.Join(c.Out, CheckpointDir))
	if err != nil || m == nil || m.Step != 1 {
		t.Fatalf("checkpoint after stop: %q %+v %v", d, m, err)
	}
}

// diskFull fails every write once n bytes have gone through, as a full
// disk does.
type diskFull struct {
	w io.Writer
	n int
}

var errDiskFull = errors.New("no space left on device (injected)")

func (d *diskFull) Write(p []byte) (int, error) {
	if len(p) > d.n {
		n, _ := d.w.Write(p[:d.n])
		d.n = 0
		return n, errDiskFull
	}
	d.n -= len(p)
	return d.w.Write(p)
}

// TestCheckpointDiskFull fails the write of the second checkpoint part way
// through model.safetensors: the run stops with an error naming the step
// and the file, and the first checkpoint still verifies and resumes.
func TestCheckpointDiskFull(t *testing.T) {
	c := tinyConfig(t)
	c.MaxIters = 20
	c.CkptInterval = 5
	writeFault = func(step int, name string, w io.Writer) io.Writer {
		if step >= 10 && name == ModelFile {
			return &diskFull{w: w, n: 3000}
		}
		return w
	}
	defer func() { writeFault = nil }()
	var log bytes.Buffer
	_, err := Run(c, &log)
	if !errors.Is(err, errDiskFull) {
		t.Fatalf("err = %v, want the injected fault\n%s", err, log.String())
	}
	for _, w := range []string{"checkpoint step 10", ModelFile, "intact"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
	root := filepath.Join(c.Out, CheckpointDir)
	d, m, skipped, err := checkpoint.Latest(root)
	if err != nil || m == nil || m.Step != 5 || len(skipped) != 0 {
		t.Fatalf("after the failed write: Latest = %q %+v %v %v", d, m, skipped, err)
	}
	ents, _ := os.ReadDir(root)
	if len(ents) != 2 {
		t.Errorf("%d entries in %s, want latest and step-0000005 (no temporary directory left)", len(ents), root)
	}
	writeFault = nil
	c.Resume = true
	log.Reset()
	if _, err := Run(c, &log); err != nil || !strings.Contains(log.String(), "at step 5") {
		t.Fatalf("resume after the failed write: %v\n%s", err, log.String())
	}
}

// stoppedAt is run c as a run stopped at step's checkpoint: a new Out
// holding c's config, tokenizer and metrics and that checkpoint alone,
// where a resume starts from it.
func stoppedAt(t *testing.T, c Config, step int) Config {
	t.Helper()
	rc := c
	rc.Out = filepath.Join(t.TempDir(), "out")
	os.MkdirAll(filepath.Join(rc.Out, CheckpointDir), 0o755)
	for _, f := range []string{ConfigFile, TokenizerFile, MetricsFile} {
		os.WriteFile(filepath.Join(rc.Out, f), mustRead(t, filepath.Join(c.Out, f)), 0o644)
	}
	from := filepath.Join(c.Out, CheckpointDir, checkpoint.DirName(step))
	if err := os.CopyFS(filepath.Join(rc.Out, CheckpointDir, checkpoint.DirName(step)), os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	return rc
}
