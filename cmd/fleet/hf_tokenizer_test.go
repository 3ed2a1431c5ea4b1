package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestPrepareHF: a Hugging Face tokenizer.json (hf:DIR) goes through
// tokenizer encode and decode, prepare, train, sample and eval as the
// other specs do.
func TestPrepareHF(t *testing.T) {
	hf, err := filepath.Abs(filepath.Join("..", "..", "testdata", "hf", "llama2"))
	if err != nil {
		t.Fatal(err)
	}
	old := stdinReader
	defer func() { stdinReader = old }()
	const text = "to be, or not to be <s> 123"
	stdinReader = strings.NewReader(text)
	code, ids, stderr := fleet(t, "tokenizer", "encode", "--tokenizer", "hf:"+hf)
	if code != 0 || !strings.Contains(" "+ids, " 1 ") {
		t.Fatalf("encode exit %d, %q (want <s> as id 1), %s", code, ids, stderr)
	}
	// Llama 2's normalizer prepends "▁" to the text after <s> too, which
	// decodes as a second space, as in Hugging Face's.
	stdinReader = strings.NewReader(ids)
	if code, back, stderr := fleet(t, "tokenizer", "decode", "--tokenizer", "hf:"+hf); code != 0 || back != "to be, or not to be <s>  123" {
		t.Fatalf("decode exit %d, %q, %s", code, back, stderr)
	}

	dir := t.TempDir()
	a := writeFile(t, dir, "a.txt", corpus())
	b := writeFile(t, dir, "b.txt", strings.ToUpper(corpus()))
	prep := filepath.Join(dir, "prep")
	code, stdout, stderr := fleet(t, "prepare", "--tokenizer", "hf:"+hf, "--out", prep, "--val-fraction", "0.2", a, b)
	if code != 0 || !strings.Contains(stdout, "vocabulary 32000 (hf:"+hf+")") {
		t.Fatalf("prepare exit %d\n%s\n%s", code, stdout, stderr)
	}
	out := filepath.Join(dir, "run")
	code, stdout, stderr = fleet(t, append([]string{"train", "--data", prep, "--out", out}, tiny...)...)
	if code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = fleet(t, "sample", "--out", out, "--prompt", "to be", "--tokens", "10", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "to be") {
		t.Fatalf("sample exit %d, output %q, stderr %s", code, stdout, stderr)
	}
	if code, stdout, stderr = fleet(t, "eval", "--out", out, "--device", "cpu"); code != 0 {
		t.Fatalf("eval exit %d, output %q, stderr %s", code, stdout, stderr)
	}
}
