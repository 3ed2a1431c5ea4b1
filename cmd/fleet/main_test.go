package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// fleet runs the command in-process and returns its exit status and output.
func fleet(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func corpus() string {
	return strings.Repeat("to be, or not to be: that is the question.\nwhether 'tis nobler in the mind to suffer\n", 60)
}

var tiny = []string{"--device", "cpu", "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
	"--batch-size", "4", "--max-iters", "20", "--eval-interval", "10", "--eval-iters", "2", "--log-interval", "10"}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.txt", corpus())
	empty := writeFile(t, dir, "empty.txt", "")
	short := writeFile(t, dir, "short.txt", strings.Repeat("abc", 10))
	notDir := writeFile(t, dir, "plain-file", "x")
	emptyDir := filepath.Join(dir, "nomodel")
	os.Mkdir(emptyDir, 0o755)
	out := filepath.Join(dir, "out")
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing data", append([]string{"train", "--data", filepath.Join(dir, "nope.txt"), "--out", out}, tiny...), 1, "no such file"},
		{"empty data", append([]string{"train", "--data", empty, "--out", out}, tiny...), 1, "empty"},
		{"data shorter than block", append([]string{"train", "--data", short, "--out", out}, append(tiny, "--block-size", "64")...), 1, "fewer than block size"},
		{"heads do not divide", append([]string{"train", "--data", good, "--out", out}, append(tiny, "--n-embd", "30", "--n-head", "4")...), 1, "not divisible by n_head"},
		{"bad flag value", []string{"train", "--n-layer", "many"}, 2, "invalid value"},
		{"unknown flag", []string{"train", "--learning-rate", "1"}, 2, "not defined"},
		{"stray argument", []string{"train", "extra"}, 2, "unexpected argument"},
		{"unknown command", []string{"fly"}, 2, "unknown command"},
		{"unwritable out", append([]string{"train", "--data", good, "--out", filepath.Join(notDir, "sub")}, tiny...), 1, "--out"},
		{"bad device", append([]string{"train", "--data", good, "--out", out, "--device", "tpu"}, tiny[2:]...), 1, "unknown device"},
		{"sample without model", []string{"sample", "--out", emptyDir}, 1, "no model in"},
		{"eval without model", []string{"eval", "--out", emptyDir, "--data", good}, 1, "no model in"},
		{"sample missing dir", []string{"sample", "--out", filepath.Join(dir, "absent")}, 1, "no model in"},
		{"negative lr", append([]string{"train", "--data", good, "--out", out, "--lr", "-1"}, tiny...), 1, "--lr"},
		{"tokens per step with grad accum", append([]string{"train", "--data", good, "--out", out, "--tokens-per-step", "64", "--grad-accum", "1"}, tiny...), 1, "cannot be combined with --grad-accum"},
		{"tokens per step not a multiple", append([]string{"train", "--data", good, "--out", out, "--tokens-per-step", "100"}, tiny...), 1, "not a multiple of batch size 4 × block size 8 × world size 1 = 32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := fleet(t, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, c.code, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("stderr lacks %q:\n%s", c.want, stderr)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("stderr shows a panic:\n%s", stderr)
			}
		})
	}
}

func TestTrainSampleEval(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "input.txt", corpus())
	out := filepath.Join(dir, "run")
	code, stdout, stderr := fleet(t, append([]string{"train", "--data", data, "--out", out}, tiny...)...)
	if code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"step 10/20", "tok/s", "ms/step", "val perplexity", "sample:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("train output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = fleet(t, "sample", "--out", out, "--prompt", "to be", "--tokens", "40", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "to be") || len(stdout) < 40 {
		t.Fatalf("sample exit %d, output %q, stderr %s", code, stdout, stderr)
	}
	code, _, stderr = fleet(t, "sample", "--out", out, "--prompt", "Ω")
	if code != 1 || !strings.Contains(stderr, "vocabulary") {
		t.Errorf("sample with an unknown character: exit %d, %s", code, stderr)
	}
	code, stdout, stderr = fleet(t, "eval", "--out", out, "--data", data, "--device", "cpu")
	if code != 0 {
		t.Fatalf("eval exit %d: %s", code, stderr)
	}
	if !regexp.MustCompile(`^val_loss=\d\.\d{5,} perplexity=\d+\.\d{4,}\n$`).MatchString(stdout) {
		t.Errorf("eval output %q", stdout)
	}
	// eval is deterministic.
	_, again, _ := fleet(t, "eval", "--out", out, "--data", data, "--device", "cpu")
	if again != stdout {
		t.Errorf("eval gave %q then %q", stdout, again)
	}
}

func TestBench(t *testing.T) {
	code, stdout, stderr := fleet(t, "bench", "--device", "cpu", "--n-layer", "1", "--n-embd", "32", "--steps", "2", "--warmup", "1")
	if code != 0 || !strings.Contains(stdout, "tokens/s") || !strings.Contains(stdout, "ms/step") {
		t.Fatalf("bench exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = fleet(t, "bench", "--device", "cpu", "--n-layer", "1", "--n-embd", "32", "--steps", "2", "--warmup", "1",
		"--precision", "all", "--matmuls=false")
	if code != 0 || !strings.Contains(stdout, "fp32  ") || !strings.Contains(stdout, "bf16  ") || !strings.Contains(stdout, "bf16/fp32: ") {
		t.Fatalf("bench --precision all: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestNoGPU checks, on a machine where CUDA cannot be used, that doctor
// fails saying why (and still lists the CPU's bf16 products) and that asking to train on cuda fails with that reason
// instead of falling back. Where a GPU works it skips.
func TestNoGPU(t *testing.T) {
	code, stdout, stderr := fleet(t, "doctor")
	if code == 0 {
		t.Skip("a GPU works here:\n" + stdout)
	}
	if code != 1 || !strings.Contains(stdout, "libraries:") || !strings.Contains(stdout, "OpenCL:") || !strings.Contains(stderr, "no usable GPU") ||
		!strings.Contains(stdout, "widen  operands widened to f32, the f32 product") || !strings.Contains(stdout, "auto runs: ") {
		t.Fatalf("doctor exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	dir := t.TempDir()
	good := writeFile(t, dir, "good.txt", corpus())
	code, _, stderr = fleet(t, append([]string{"train", "--data", good, "--out", filepath.Join(dir, "out"), "--device", "cuda"}, tiny[2:]...)...)
	if code != 1 || !strings.Contains(stderr, "--device cuda: device cuda:0:") {
		t.Fatalf("train --device cuda: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "summary.json")); err == nil {
		t.Error("a failed cuda run still wrote a summary")
	}
}
