package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const hfTiny = "../../testdata/hf_gpt2_tiny.safetensors"

// TestInterop exports a trained run (without biases) as a Hugging Face
// folder, evaluates the exported file on its own with the run's tokenizer
// (the same loss as the run's), samples from it, and starts a run from the
// tiny GPT-2 that scripts/make_hf_gpt2_fixture.py made.
func TestInterop(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "input.txt", corpus())
	run := filepath.Join(dir, "run")
	if code, stdout, stderr := fleet(t, append([]string{"train", "--data", data, "--out", run}, tiny...)...); code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	hf := filepath.Join(dir, "hf")
	if code, _, stderr := fleet(t, "export", "--out", run, "--hf", hf); code != 0 {
		t.Fatalf("export: %s", stderr)
	}
	var cfg map[string]any
	b, err := os.ReadFile(filepath.Join(hf, "config.json"))
	if err != nil || json.Unmarshal(b, &cfg) != nil || cfg["model_type"] != "gpt2" || cfg["n_head"] != 2.0 || cfg["n_layer"] != 1.0 {
		t.Fatalf("config.json: %v %s", err, b)
	}
	weights := filepath.Join(hf, "model.safetensors")
	_, want, _ := fleet(t, "eval", "--out", run, "--data", data, "--device", "cpu")
	code, got, stderr := fleet(t, "eval", "--weights", weights, "--n-head", "2", "--tokenizer", "char:"+filepath.Join(run, "tokenizer.json"),
		"--data", data, "--device", "cpu")
	if code != 0 || got != want || want == "" {
		t.Fatalf("eval of the exported file: exit %d %q, the run's %q; %s", code, got, want, stderr)
	}
	code, got, _ = fleet(t, "eval", "--out", run, "--data", data, "--device", "cpu", "--eval-windows", "3")
	if code != 0 || got == want {
		t.Errorf("--eval-windows 3 gave %q, all windows %q", got, want)
	}
	code, stdout, stderr := fleet(t, "sample", "--weights", weights, "--n-head", "2", "--tokenizer", "char:"+filepath.Join(run, "tokenizer.json"),
		"--prompt", "to be", "--tokens", "10", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "to be") {
		t.Fatalf("sample --weights: exit %d %q %s", code, stdout, stderr)
	}
	if code, _, stderr := fleet(t, "eval", "--weights", hfTiny, "--data", data); code != 1 || !strings.Contains(stderr, "--n-head") {
		t.Errorf("eval of a non-GPT-2 width without --n-head: exit %d, %s", code, stderr)
	}
	code, stdout, stderr = fleet(t, "eval", "--weights", hfTiny, "--n-head", "2", "--data", data, "--device", "cpu")
	if code != 0 || !regexp.MustCompile(`^val_loss=\d+\.\d{5,} perplexity=\d+\.\d+`).MatchString(stdout) {
		t.Fatalf("eval of the Hugging Face file: exit %d %q %s", code, stdout, stderr)
	}

	init := filepath.Join(dir, "init")
	code, stdout, stderr = fleet(t, "train", "--data", data, "--out", init, "--init-from", hfTiny, "--n-head", "2", "--device", "cpu",
		"--max-iters", "4", "--eval-interval", "2", "--eval-iters", "1", "--batch-size", "2")
	if code != 0 || !strings.Contains(stdout, "init: weights from") || !strings.Contains(stdout, "2 layers, 2 heads, 32 embd, block 16") {
		t.Fatalf("train --init-from: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestInitFromGivenShapeFlags: fleet train --init-from refuses a shape
// flag given on the command line that disagrees with the file, naming the
// flag and both values, and writes nothing; the same flag given with the
// file's value trains (flags left at their defaults are replaced, as
// TestInterop's run shows).
func TestInitFromGivenShapeFlags(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "input.txt", corpus())
	out := filepath.Join(dir, "run")
	args := []string{"train", "--data", data, "--out", out, "--init-from", hfTiny, "--n-head", "2", "--device", "cpu",
		"--max-iters", "2", "--eval-interval", "2", "--eval-iters", "1", "--batch-size", "2"}
	code, stdout, stderr := fleet(t, append(args, "--n-embd", "64", "--block-size", "16")...)
	want := "--n-embd 64 disagrees with --init-from " + hfTiny + ", whose model has --n-embd 32"
	if code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("--n-embd 64 with a 32-wide file: exit %d, stderr lacks %q:\n%s\n%s", code, want, stdout, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("the refused run made %s", out)
	}
	code, stdout, stderr = fleet(t, append(args, "--n-embd", "32", "--n-layer", "2")...)
	if code != 0 || !strings.Contains(stdout, "2 layers, 2 heads, 32 embd, block 16") {
		t.Errorf("--n-embd 32 --n-layer 2, the file's: exit %d\n%s\n%s", code, stdout, stderr)
	}
}
