package train

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/testenv"
	"github.com/fleetml/fleet/train/config"
)

// sameFiles fails the test where dir's files are not those of before,
// byte for byte.
func sameFiles(t *testing.T, dir string, before map[string][]byte) {
	t.Helper()
	after := testenv.ReadTree(t, dir)
	for name, b := range before {
		if a, ok := after[name]; !ok {
			t.Errorf("%s is gone", name)
		} else if !bytes.Equal(a, b) {
			t.Errorf("%s changed", name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			t.Errorf("%s appeared", name)
		}
	}
}

// TestRunFolderNeverOverwritten trains twice into the same --out: the
// second run is refused, naming what is there and both ways on, and the
// first run's files stay byte for byte. A finished run without
// checkpoints (the default --ckpt-interval 0) cannot be resumed either.
func TestRunFolderNeverOverwritten(t *testing.T) {
	c := tinyConfig(t)
	c.MaxIters, c.EvalInterval = 6, 3
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	before := testenv.ReadTree(t, c.Out)
	if _, ok := before[ModelFile]; !ok {
		t.Fatalf("the first run wrote no %s", ModelFile)
	}
	_, err := Run(c, &log)
	if err == nil {
		t.Fatal("a second run into the same --out was not refused")
	}
	for _, want := range []string{"already holds a run", ModelFile, "add Resume", "another Out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	sameFiles(t, c.Out, before)

	c.Resume = true
	_, err = Run(c, &log)
	if err == nil || !strings.Contains(err.Error(), "finished run") || !strings.Contains(err.Error(), "no checkpoint") {
		t.Fatalf("--resume on a finished run without checkpoints: err = %v, want a refusal", err)
	}
	sameFiles(t, c.Out, before)

	// An unfinished run (its config, no weights, no checkpoint) is a run
	// too: refused without --resume, started over with it.
	un := tinyConfig(t)
	un.MaxIters = 2
	os.MkdirAll(un.Out, 0o755)
	os.WriteFile(filepath.Join(un.Out, ConfigFile), []byte("{}\n"), 0o644)
	if _, err := Run(un, &log); err == nil || !strings.Contains(err.Error(), ConfigFile) {
		t.Fatalf("an unfinished run's folder: err = %v, want a refusal naming %s", err, ConfigFile)
	}
	un.Resume = true
	log.Reset()
	if _, err := Run(un, &log); err != nil || !strings.Contains(log.String(), "starting at step 0") {
		t.Fatalf("--resume on an unfinished run without checkpoints: %v\n%s", err, log.String())
	}
}

// TestNumberedRunFolders: without --out each run gets a new numbered
// folder, which the log names; --resume without --out continues the
// newest, as sample, eval and export read it.
func TestNumberedRunFolders(t *testing.T) {
	c := tinyConfig(t)
	c.Runs, c.Out = filepath.Join(t.TempDir(), "runs"), ""
	c.MaxIters, c.EvalInterval, c.CkptInterval = 4, 2, 2
	var dirs []string
	for i := range 2 {
		var log bytes.Buffer
		res, err := Run(c, &log)
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i+1, err, log.String())
		}
		want := filepath.Join(c.Runs, config.RunName(i+1))
		if res.Dir != want || !strings.Contains(log.String(), "run folder: "+want) {
			t.Fatalf("run %d went to %s, want %s; log:\n%s", i+1, res.Dir, want, log.String())
		}
		if _, err := os.Stat(filepath.Join(want, ModelFile)); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, res.Dir)
	}
	if d, err := config.NewestRun(c.Runs); err != nil || d != dirs[1] {
		t.Fatalf("NewestRun = %q, %v; want %s", d, err, dirs[1])
	}
	before := testenv.ReadTree(t, dirs[0])
	c.Resume, c.MaxIters = true, 6
	c.LRDecayIters = 4 // pinned: more steps do not move the decay horizon
	var log bytes.Buffer
	res, err := Run(c, &log)
	if err != nil || res.Dir != dirs[1] || !strings.Contains(log.String(), "continuing from") {
		t.Fatalf("--resume without --out: dir %v, err %v, want %s\n%s", res, err, dirs[1], log.String())
	}
	sameFiles(t, dirs[0], before)
	if _, err := config.NewestRun(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("NewestRun found a run in a folder that does not exist")
	}
}

// resumable trains c with a checkpoint every 3 steps and returns it ready
// to resume.
func resumable(t *testing.T) Config {
	t.Helper()
	c := tinyConfig(t)
	c.MaxIters, c.EvalInterval, c.CkptInterval = 6, 3, 3
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	c.Resume = true
	return c
}

// TestResumeFitsTheRun resumes with each kind of difference: another
// tokenizer, data or model is refused, naming both; changed optimizer and
// batch settings need --allow-changes, which config.json records; the
// per-rank split of the same global batch, and more steps under a pinned
// decay horizon, need nothing.
func TestResumeFitsTheRun(t *testing.T) {
	base := resumable(t)
	tryResume := func(c Config) (string, error) {
		t.Helper()
		// Each try resumes a copy, so that the run's own folder stays.
		c.Out = filepath.Join(t.TempDir(), "out")
		if err := os.CopyFS(c.Out, os.DirFS(base.Out)); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		_, err := Run(c, &log)
		return log.String(), err
	}
	refused := func(name string, c Config, wants ...string) {
		t.Helper()
		if _, err := tryResume(c); err == nil {
			t.Errorf("%s: resumed", name)
		} else {
			for _, w := range wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: the refusal does not say %q:\n%v", name, w, err)
				}
			}
		}
	}

	// Text of the same size over another character set of the same
	// size: the ids would shift.
	text, err := os.ReadFile(base.Data)
	if err != nil {
		t.Fatal(err)
	}
	shifted := bytes.Map(func(r rune) rune {
		if r >= 'a' && r <= 'y' {
			return r + 1
		}
		if r == 'z' {
			return 'A'
		}
		return r
	}, text)
	c := base
	c.Data = filepath.Join(t.TempDir(), "shifted.txt")
	os.WriteFile(c.Data, shifted, 0o644)
	refused("another character set", c, "tokenizer:", "another run's", "the checkpoint's is char")

	// Same characters, other text: the data differs.
	swapped := bytes.ReplaceAll(text, []byte("fox"), []byte("xof"))
	c = base
	c.Data = filepath.Join(t.TempDir(), "swapped.txt")
	os.WriteFile(c.Data, swapped, 0o644)
	refused("other text", c, "Data:")

	c = base
	c.NEmbd = 48
	refused("another model", c, "NEmbd: the checkpoint's is 32, this run's is 48")

	for _, tc := range []struct {
		flag string
		set  func(*Config)
	}{
		{"LR", func(c *Config) { c.LR *= 2 }},
		{"BatchSize", func(c *Config) { c.BatchSize = 4 }}, // the global batch: TokensPerStep
		{"GradClip", func(c *Config) { c.GradClip = 0.5 }},
		{"Seed", func(c *Config) { c.Seed++ }},
		{"Dropout", func(c *Config) { c.Dropout = 0.2 }},
		{"LRDecayIters", func(c *Config) { c.MaxIters = 9 }}, // the horizon follows MaxIters
		{"Precision", func(c *Config) { c.Precision = "bf16" }},
	} {
		c := base
		tc.set(&c)
		flag := tc.flag + ": the checkpoint's is"
		switch tc.flag {
		case "BatchSize":
			flag = "TokensPerStep (the global batch"
		case "LRDecayIters":
			flag = "LRDecayIters (the decay horizon"
		}
		refused(tc.flag, c, flag, "AllowChanges")
	}

	// --allow-changes lets the learning rate change, logged and recorded.
	c = base
	c.LR, c.AllowChanges = base.LR/2, true
	c.Out = filepath.Join(t.TempDir(), "out")
	os.CopyFS(c.Out, os.DirFS(base.Out))
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("--allow-changes: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "--lr changes from 0.003 to 0.0015 at step 6") {
		t.Errorf("the log does not list the change:\n%s", log.String())
	}
	var rc config.RunConfig
	if err := json.Unmarshal(mustRead(t, filepath.Join(c.Out, ConfigFile)), &rc); err != nil {
		t.Fatal(err)
	}
	if len(rc.History) != 1 || rc.History[0].Step != 6 || len(rc.History[0].Changes) != 1 ||
		rc.History[0].Changes[0] != (config.Change{Flag: "--lr", From: "0.003", To: "0.0015"}) {
		t.Errorf("config.json's history is %+v", rc.History)
	}

	// Allowed without the flag: the same global batch split otherwise,
	// and more steps where --lr-decay-iters pins the horizon.
	c = base
	c.BatchSize, c.GradAccum = 4, 2
	c.MaxIters, c.LRDecayIters = 9, 6 // on to step 9, the horizon pinned where it was
	if log, err := tryResume(c); err != nil || !strings.Contains(log, "continuing from") {
		t.Errorf("batch 4 × accumulation 2 for 8 × 1: %v\n%s", err, log)
	}
	pinned := tinyConfig(t)
	pinned.MaxIters, pinned.EvalInterval, pinned.CkptInterval, pinned.LRDecayIters = 6, 3, 3, 6
	if _, err := Run(pinned, &log); err != nil {
		t.Fatal(err)
	}
	pinned.Resume, pinned.MaxIters = true, 9
	log.Reset()
	if _, err := Run(pinned, &log); err != nil || !strings.Contains(log.String(), "continuing from") {
		t.Errorf("more steps under a pinned horizon: %v\n%s", err, log.String())
	}
}

// TestResumeRefusesDamagedCheckpoints: where checkpoints exist and none
// verifies, --resume is refused, listing why each failed, and nothing is
// written; an interrupted save's temporary folder is not a damaged
// checkpoint.
func TestResumeRefusesDamagedCheckpoints(t *testing.T) {
	c := resumable(t)
	root := filepath.Join(c.Out, CheckpointDir)
	for _, step := range []int{3, 6} {
		f := filepath.Join(root, checkpoint.DirName(step), ModelFile)
		b := mustRead(t, f)
		b[len(b)/2] ^= 0xff
		os.WriteFile(f, b, 0o644)
	}
	before := testenv.ReadTree(t, c.Out)
	var log bytes.Buffer
	_, err := Run(c, &log)
	if err == nil {
		t.Fatalf("resumed from damaged checkpoints:\n%s", log.String())
	}
	for _, want := range []string{"none verifies", checkpoint.DirName(3), checkpoint.DirName(6), "another Out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not say %q:\n%v", want, err)
		}
	}
	sameFiles(t, c.Out, before)

	// Only an interrupted save's temporary folder: no checkpoint yet.
	fresh := tinyConfig(t)
	fresh.MaxIters, fresh.Resume = 2, true
	os.MkdirAll(filepath.Join(fresh.Out, CheckpointDir, ".tmp-step-0000001-123"), 0o755)
	log.Reset()
	if _, err := Run(fresh, &log); err != nil || !strings.Contains(log.String(), "starting at step 0") {
		t.Fatalf("a temporary folder alone: %v\n%s", err, log.String())
	}
}

// TestFloatSettingsFinite: NaN and ±Inf are refused, naming the flag,
// before a folder is made.
func TestFloatSettingsFinite(t *testing.T) {
	for _, tc := range []struct {
		flag string
		set  func(*Config, float64)
	}{
		{"LR", func(c *Config, v float64) { c.LR = v }},
		{"MinLR", func(c *Config, v float64) { c.MinLR = v }},
		{"Beta2", func(c *Config, v float64) { c.Beta2 = v }},
		{"GradClip", func(c *Config, v float64) { c.GradClip = v }},
		{"Dropout", func(c *Config, v float64) { c.Dropout = v }},
		{"WeightDecay", func(c *Config, v float64) { c.WeightDecay = v }},
	} {
		for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
			c := tinyConfig(t)
			tc.set(&c, v)
			_, err := Run(c, &bytes.Buffer{})
			var se *setting.Error
			if !errors.As(err, &se) || se.Name != tc.flag {
				t.Errorf("%s %v: err = %v, want a setting.Error naming %s", tc.flag, v, err, tc.flag)
			}
			if _, err := os.Stat(c.Out); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s %v: the run folder was made", tc.flag, v)
			}
		}
	}
}

// TestDivergenceNamesFirstStep: a learning rate that overflows the
// weights makes a loss NaN within a few steps. The error names that step
// (not the log step), the first: the same run stopped one step earlier
// trains to its end, and its last checkpoint is the newest; and it gives
// advice that helps: a lower --lr and a smaller --grad-clip, never a
// larger one.
func TestDivergenceNamesFirstStep(t *testing.T) {
	diverging := func() Config {
		c := tinyConfig(t)
		c.LR, c.MinLR, c.WarmupIters, c.GradClip = 1e30, 0, 0, 0
		c.MaxIters, c.LogInterval, c.EvalInterval, c.CkptInterval = 10, 1, 100, 1
		return c
	}
	c := diverging()
	var log bytes.Buffer
	_, err := Run(c, &log)
	if err == nil {
		t.Fatalf("no error:\n%s", log.String())
	}
	msg := err.Error()
	var bad int
	if _, serr := fmt.Sscanf(msg, "step %d:", &bad); serr != nil || bad < 2 || bad > 10 {
		t.Fatalf("the error does not start with the step (2 or later): %s", msg)
	}
	for _, want := range []string{"the first whose loss or gradients are not finite", "lower LR", "smaller GradClip",
		checkpoint.DirName(bad-1) + " (step " + fmt.Sprint(bad-1) + "), holds the weights that gave it", "move it out of"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "raise --grad-clip") {
		t.Errorf("the error advises weaker clipping:\n%s", msg)
	}
	if dir, _, _, _ := checkpoint.Latest(filepath.Join(c.Out, CheckpointDir)); filepath.Base(dir) != checkpoint.DirName(bad-1) {
		t.Errorf("the newest checkpoint is %q: a step with a non-finite loss was saved", dir)
	}
	// Every step before it logged a finite loss, and none after it.
	var logged []int
	for _, line := range splitLines(mustRead(t, filepath.Join(c.Out, MetricsFile))) {
		var m Metric
		if json.Unmarshal(line, &m) == nil && m.TrainLoss != nil && m.ValLoss == nil {
			if !finite(*m.TrainLoss) {
				t.Errorf("step %d logged loss %v", m.Step, *m.TrainLoss)
			}
			logged = append(logged, m.Step)
		}
	}
	if len(logged) != bad-1 || logged[len(logged)-1] != bad-1 {
		t.Errorf("the steps logged are %v, want 1 to %d", logged, bad-1)
	}

	// The steps before it alone train to the end.
	before := diverging()
	before.MaxIters = bad - 1
	if _, err := Run(before, &log); err != nil {
		t.Errorf("the first %d steps alone: %v", bad-1, err)
	}

	// Weights that are not finite from the start: the evaluation at step
	// 0 says so, and nothing is written with a NaN in it.
	src := tinyConfig(t)
	src.MaxIters = 1
	if _, err := Run(src, &log); err != nil {
		t.Fatal(err)
	}
	f, err := checkpoint.Load(filepath.Join(src.Out, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	poisoned := 0
	for name, tt := range f.Tensors {
		if strings.Contains(name, "ln_f") {
			for i := 0; i+4 <= len(tt.Data); i += 4 {
				binary.LittleEndian.PutUint32(tt.Data[i:], math.Float32bits(float32(math.NaN())))
			}
			poisoned++
		}
	}
	if poisoned == 0 {
		t.Fatal("no final LayerNorm among the weights to poison")
	}
	nanPath := filepath.Join(t.TempDir(), "nan.safetensors")
	if err := checkpoint.Save(nanPath, f); err != nil {
		t.Fatal(err)
	}
	ev := tinyConfig(t)
	ev.InitFrom = nanPath
	_, err = Run(ev, &log)
	if err == nil || !strings.HasPrefix(err.Error(), "step 0: the evaluation loss is not finite") {
		t.Errorf("NaN weights: err = %v, want the evaluation at step 0 named", err)
	}
	if b, err := os.ReadFile(filepath.Join(ev.Out, MetricsFile)); err == nil && bytes.Contains(b, []byte("NaN")) {
		t.Errorf("metrics.jsonl holds a NaN: %s", b)
	}
}

// TestBinaryDataRefused: a binary file given as text is refused, naming
// it, and no run folder is left.
func TestBinaryDataRefused(t *testing.T) {
	c := tinyConfig(t)
	bin := filepath.Join(t.TempDir(), "prog")
	b := make([]byte, 4096)
	for i := range b {
		b[i] = byte(i * 7)
	}
	os.WriteFile(bin, b, 0o644)
	c.Data = bin
	_, err := Run(c, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), bin) || !strings.Contains(err.Error(), "not text") {
		t.Fatalf("binary --data: err = %v, want a refusal naming %s", err, bin)
	}
	if _, err := os.Stat(c.Out); !errors.Is(err, fs.ErrNotExist) {
		t.Error("a run folder was made")
	}
}

// TestRestartResumesOnlyItsOwnRun: a launcher's restart without --out
// resumes the newest run only where config.json names the same job;
// another job's run, finished or not, is left alone and the restart starts
// a new folder. A job without an id never resumes a finished run.
func TestRestartResumesOnlyItsOwnRun(t *testing.T) {
	c := tinyConfig(t)
	c.Runs, c.Out = filepath.Join(t.TempDir(), "runs"), ""
	c.MaxIters, c.EvalInterval, c.CkptInterval, c.JobID = 4, 2, 2, "job-a"
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	first := filepath.Join(c.Runs, config.RunName(1))
	before := testenv.ReadTree(t, first)

	for i, id := range []string{"job-b", ""} {
		r := c
		r.JobID, r.Restart, r.Resume = id, true, true
		log.Reset()
		res, err := Run(r, &log)
		want := filepath.Join(c.Runs, config.RunName(i+2))
		if err != nil || res.Dir != want || !strings.Contains(log.String(), "starting at step 0") {
			t.Fatalf("restart of job %q: %v, dir %v, want a new %s at step 0\n%s", id, err, res, want, log.String())
		}
		sameFiles(t, first, before)
	}

	own := c
	own.Restart, own.Resume, own.MaxIters = true, true, 6
	own.LRDecayIters = 4 // the horizon the first attempt had
	os.RemoveAll(filepath.Join(c.Runs, config.RunName(2)))
	os.RemoveAll(filepath.Join(c.Runs, config.RunName(3)))
	log.Reset()
	res, err := Run(own, &log)
	if err != nil || res.Dir != first || !strings.Contains(log.String(), "continuing from") {
		t.Fatalf("restart of the run's own job: %v, dir %v, want %s resumed\n%s", err, res, first, log.String())
	}
}

// TestResumeFinishedWithoutCheckpoints: a finished run whose checkpoints
// folder holds none (emptied, or only an interrupted save's temporary
// folder) is not started over by --resume.
func TestResumeFinishedWithoutCheckpoints(t *testing.T) {
	c := resumable(t)
	root := filepath.Join(c.Out, CheckpointDir)
	os.RemoveAll(root)
	os.MkdirAll(filepath.Join(root, ".tmp-step-0000009-1"), 0o755)
	before := testenv.ReadTree(t, c.Out)
	var log bytes.Buffer
	_, err := Run(c, &log)
	if err == nil || !strings.Contains(err.Error(), "finished run") {
		t.Fatalf("--resume on a finished run with an empty checkpoints folder: err = %v\n%s", err, log.String())
	}
	sameFiles(t, c.Out, before)
}
