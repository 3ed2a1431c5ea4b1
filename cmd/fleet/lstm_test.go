package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLSTMCommand trains an LSTM from the command line, samples from it,
// evaluates it, and refuses what it does not run.
func TestLSTMCommand(t *testing.T) {
	dir := t.TempDir()
	data := writeFile(t, dir, "input.txt", corpus())
	out := filepath.Join(dir, "run")
	args := append([]string{"train", "--data", data, "--out", out, "--arch", "lstm", "--bias", "--tie-embeddings=false", "--dropout", "0.1"}, tiny...)
	code, stdout, stderr := fleet(t, args...)
	if code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"step 20/20", "val perplexity", "sample:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("train output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = fleet(t, "sample", "--out", out, "--prompt", "to be", "--tokens", "40", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "to be") || len(stdout) < 40 {
		t.Fatalf("sample exit %d, output %q, stderr %s", code, stdout, stderr)
	}
	code, stdout, stderr = fleet(t, "eval", "--out", out, "--data", data, "--device", "cpu")
	if code != 0 || !regexp.MustCompile(`^val_loss=\d\.\d{5,} perplexity=\d+\.\d{4,}\n$`).MatchString(stdout) {
		t.Fatalf("eval exit %d, output %q, stderr %s", code, stdout, stderr)
	}
	code, _, stderr = fleet(t, "export", "--out", out, "--hf", filepath.Join(dir, "hf"))
	if code != 1 || !strings.Contains(stderr, "Hugging Face") {
		t.Errorf("export --hf of an LSTM: exit %d, %s", code, stderr)
	}
	code, _, stderr = fleet(t, append([]string{"train", "--data", data, "--out", filepath.Join(dir, "bf16"), "--arch", "lstm", "--precision", "bf16"}, tiny...)...)
	if code != 1 || !strings.Contains(stderr, "--precision fp32") {
		t.Errorf("an LSTM in bf16: exit %d, %s", code, stderr)
	}
}
