package main

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/testenv"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

// TestTrainNeverOverwrites is the acceptance of the run-folder rules:
// the same fleet train twice into one --out fails the second time and
// leaves the first run's files byte for byte; a NaN flag fails naming it
// before a folder exists; a binary file is not text.
func TestTrainNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "input.txt", corpus())
	out := filepath.Join(dir, "run")
	args := append([]string{"train", "--data", data, "--out", out}, tiny...)
	if code, stdout, stderr := fleet(t, args...); code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	before := testenv.ReadTree(t, out)
	code, _, stderr := fleet(t, args...)
	if code == 0 || !strings.Contains(stderr, "already holds a run") || !strings.Contains(stderr, "--resume") {
		t.Fatalf("the second train: exit %d, %s", code, stderr)
	}
	if strings.Contains(stderr, "fleet train: train:") {
		t.Errorf("the error repeats its prefix: %s", stderr)
	}
	after := testenv.ReadTree(t, out)
	if len(after) != len(before) {
		t.Errorf("the folder had %d files, now %d", len(before), len(after))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Errorf("%s changed", name)
		}
	}

	nan := filepath.Join(dir, "nan")
	code, _, stderr = fleet(t, append([]string{"train", "--data", data, "--out", nan, "--lr", "NaN"}, tiny...)...)
	if code == 0 || !strings.Contains(stderr, "--lr") {
		t.Errorf("--lr NaN: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(nan); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("--lr NaN made %s", nan)
	}
	for _, f := range []string{"--temperature", "--dropout", "--grad-clip"} {
		cmd := "train"
		if f == "--temperature" {
			cmd = "sample"
		}
		if code, _, stderr := fleet(t, cmd, f, "+Inf"); code == 0 || !strings.Contains(stderr, f) {
			t.Errorf("%s %s +Inf: exit %d, %s", cmd, f, code, stderr)
		}
	}

	if _, err := os.Stat("/bin/ls"); err != nil {
		t.Skip("no /bin/ls to give as --data")
	}
	code, _, stderr = fleet(t, append([]string{"train", "--data", "/bin/ls", "--out", filepath.Join(dir, "ls")}, tiny...)...)
	if code == 0 || !strings.Contains(stderr, "/bin/ls") || !strings.Contains(stderr, "not text") {
		t.Errorf("--data /bin/ls: exit %d, %s", code, stderr)
	}
}

// TestNumberedRunsAndInterruptedSample: without --out, train makes
// out/run-001, out/run-002, ...; sample, eval and export without --out use
// the newest and say so; a run without model.safetensors (interrupted)
// points sample at its newest checkpoint, whose weights --weights takes.
func TestNumberedRunsAndInterruptedSample(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	data := writeFile(t, dir, "input.txt", corpus())
	for i, want := range []string{"run-001", "run-002"} {
		code, stdout, stderr := fleet(t, append([]string{"train", "--data", data, "--ckpt-interval", "10"}, tiny...)...)
		if code != 0 {
			t.Fatalf("train %d: exit %d\n%s\n%s", i+1, code, stdout, stderr)
		}
		if p := filepath.Join(config.DefaultRunsDir, want); !strings.Contains(stdout, "run folder: "+p) || !strings.Contains(stdout, "wrote "+p) {
			t.Errorf("train %d does not name %s:\n%s", i+1, p, stdout)
		}
	}
	newest := filepath.Join(config.DefaultRunsDir, "run-002")
	code, stdout, stderr := fleet(t, "sample", "--tokens", "10", "--device", "cpu")
	if code != 0 || !strings.Contains(stderr, "using "+newest) {
		t.Fatalf("sample without --out: exit %d, %q, %s", code, stdout, stderr)
	}
	code, _, stderr = fleet(t, "eval", "--device", "cpu", "--eval-windows", "4")
	if code != 0 || !strings.Contains(stderr, "using "+newest) {
		t.Errorf("eval without --out: exit %d, %s", code, stderr)
	}

	// Interrupted: no final weights, checkpoints at steps 10 and 20.
	os.Remove(filepath.Join(newest, train.ModelFile))
	code, _, stderr = fleet(t, "sample", "--out", newest, "--tokens", "10", "--device", "cpu")
	ck := filepath.Join(train.CheckpointDir, checkpoint.DirName(20), train.ModelFile)
	if code == 0 || !strings.Contains(stderr, "--weights "+ck) || !strings.Contains(stderr, "--resume") {
		t.Fatalf("sample on an interrupted run: exit %d, %s", code, stderr)
	}
	if code, stdout, stderr := fleet(t, "sample", "--out", newest, "--weights", ck, "--tokens", "10", "--device", "cpu"); code != 0 || stdout == "" {
		t.Errorf("sample --weights %s: exit %d, %q, %s", ck, code, stdout, stderr)
	}
}

// TestResumeOtherCharacters is the acceptance of the tokenizer check:
// --resume on text of the same size over another character set of the
// same size fails, naming the tokenizer.
func TestResumeOtherCharacters(t *testing.T) {
	dir := t.TempDir()
	text := corpus()
	data := writeFile(t, dir, "input.txt", text)
	out := filepath.Join(dir, "run")
	args := append([]string{"train", "--out", out, "--ckpt-interval", "10"}, tiny...)
	if code, stdout, stderr := fleet(t, append(args, "--data", data)...); code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	shifted := strings.Map(func(r rune) rune {
		if r >= 'a' && r < 'z' {
			return r + 1
		}
		if r == 'z' {
			return 'A'
		}
		return r
	}, text)
	other := writeFile(t, dir, "other.txt", shifted)
	code, _, stderr := fleet(t, append(args, "--data", other, "--resume")...)
	if code == 0 || !strings.Contains(stderr, "tokenizer: the checkpoint's is char") {
		t.Errorf("--resume on other characters: exit %d, %s", code, stderr)
	}
}

// TestRestartResumesAlone: a launcher's restart of a 1-process job
// resumes (where checkpoints exist, a run without --resume is refused).
func TestRestartResumesAlone(t *testing.T) {
	for _, kv := range [][2]string{{"TORCHELASTIC_RESTART_COUNT", "1"}, {"SLURM_RESTART_COUNT", "2"}} {
		t.Run(kv[0], func(t *testing.T) {
			for _, name := range []string{"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
				"LOCAL_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID", "SLURM_RESTART_COUNT"} {
				t.Setenv(name, "")
				os.Unsetenv(name)
			}
			t.Setenv(kv[0], kv[1])
			if kv[0] == "TORCHELASTIC_RESTART_COUNT" { // what torchrun --nproc-per-node 1 sets
				t.Setenv("RANK", "0")
				t.Setenv("WORLD_SIZE", "1")
				t.Setenv("LOCAL_RANK", "0")
				t.Setenv("LOCAL_WORLD_SIZE", "1")
			}
			if kv[0] == "SLURM_RESTART_COUNT" {
				t.Setenv("SLURM_PROCID", "0")
				t.Setenv("SLURM_NTASKS", "1")
				t.Setenv("SLURM_JOB_ID", "42")
			}
			c := train.Default()
			var log bytes.Buffer
			if err := joinJob(&c, &log); err != nil {
				t.Fatal(err)
			}
			if !c.Resume || !c.Restart || !strings.Contains(log.String(), "resuming") {
				t.Errorf("restart %s=%s of one process: Resume %v, Restart %v, log %q", kv[0], kv[1], c.Resume, c.Restart, log.String())
			}
			// The job's id, recorded in config.json, is a digest of its
			// secret: the same across restarts, never the secret itself.
			t.Setenv("FLEET_JOB_SECRET", "s3cret-of-the-job")
			c2 := train.Default()
			if err := joinJob(&c2, &log); err != nil {
				t.Fatal(err)
			}
			if c2.JobID == "" || strings.Contains(c2.JobID, "s3cret") {
				t.Errorf("job id %q", c2.JobID)
			}
		})
	}
}
