package main

import (
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPrepareTrainSampleEval: fleet prepare writes shards that fleet train
// trains on, and the run samples, evaluates, and has an n-gram baseline.
func TestPrepareTrainSampleEval(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in")
	os.Mkdir(in, 0o755)
	writeFile(t, in, "a.txt", corpus())
	writeFile(t, in, "b.txt", strings.ToUpper(corpus()))
	prep := filepath.Join(dir, "prep")
	// Flags after the inputs parse too.
	code, stdout, stderr := fleet(t, "prepare", "--tokenizer", "char", in, "--out", prep, "--shard-tokens", "3000")
	if code != 0 {
		t.Fatalf("prepare exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "wrote "+prep) || !strings.Contains(stderr, "prepare: encoding 100%") {
		t.Errorf("prepare output:\n%s\n%s", stdout, stderr)
	}
	var man struct {
		Tokenizer string `json:"tokenizer"`
		VocabSize int    `json:"vocab_size"`
		Train     struct {
			Tokens int `json:"tokens"`
			Shards []struct {
				File   string `json:"file"`
				SHA256 string `json:"sha256"`
			} `json:"shards"`
		} `json:"train"`
	}
	b, err := os.ReadFile(filepath.Join(prep, "manifest.json"))
	if err != nil || json.Unmarshal(b, &man) != nil {
		t.Fatalf("manifest: %v", err)
	}
	if man.Tokenizer != "char:tokenizer.json" || man.Train.Tokens != int(0.9*float64(2*len(corpus()))) ||
		len(man.Train.Shards) != (man.Train.Tokens+2999)/3000 || len(man.Train.Shards[0].SHA256) != 64 {
		t.Errorf("manifest %s", b)
	}

	out := filepath.Join(dir, "run")
	code, stdout, stderr = fleet(t, append([]string{"train", "--data", prep, "--out", out}, tiny...)...)
	if code != 0 {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"prepared:", "vocabulary", "data wait", "sample:"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("train output lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = fleet(t, "sample", "--out", out, "--prompt", "TO BE", "--tokens", "20", "--device", "cpu")
	if code != 0 || !strings.HasPrefix(stdout, "TO BE") {
		t.Fatalf("sample exit %d, output %q, stderr %s", code, stdout, stderr)
	}
	evalOut := regexp.MustCompile(`^val_loss=\d+\.\d+ perplexity=\d+\.\d+\n$`)
	code, own, stderr := fleet(t, "eval", "--out", out, "--device", "cpu")
	if code != 0 || !evalOut.MatchString(own) {
		t.Fatalf("eval exit %d, output %q, stderr %s", code, own, stderr)
	}
	code, named, stderr := fleet(t, "eval", "--out", out, "--device", "cpu", "--data", prep)
	if code != 0 || named != own {
		t.Errorf("eval --data %s: exit %d, %q (own data: %q), %s", prep, code, named, own, stderr)
	}
	code, stdout, stderr = fleet(t, "ngram", "--order", "3", "--data", prep)
	if code != 0 || !regexp.MustCompile(`^order=3 val_loss=\d+\.\d+ perplexity=\d+\.\d+\n$`).MatchString(stdout) {
		t.Errorf("ngram exit %d, output %q, stderr %s", code, stdout, stderr)
	}
}

// TestPrepareBPE: a BPE trained by fleet tokenizer prepares data with
// end-of-text between documents; the run records the tokenizer, so
// sample decodes with it.
func TestPrepareBPE(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.txt", corpus())
	bfile := writeFile(t, dir, "b.txt", strings.ToUpper(corpus()))
	tok := filepath.Join(dir, "tok.json")
	if code, _, stderr := fleet(t, "tokenizer", "train", "--vocab-size", "300", "--out", tok, a, bfile); code != 0 {
		t.Fatalf("tokenizer train exit %d: %s", code, stderr)
	}
	prep := filepath.Join(dir, "prep")
	code, stdout, stderr := fleet(t, "prepare", "--tokenizer", "bpe:"+tok, "--out", prep, "--val-fraction", "0.2", a, bfile)
	if code != 0 || !strings.Contains(stdout, "vocabulary 300") {
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

// TestTrainTokenFiles: raw nanoGPT token files need a vocabulary size; a
// run on them has no tokenizer to encode a prompt with.
func TestTrainTokenFiles(t *testing.T) {
	dir := t.TempDir()
	raw := func(name string, n int) {
		b := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(i*7%50))
		}
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	raw("train.bin", 4000)
	raw("val.bin", 500)
	out := filepath.Join(dir, "run")
	code, _, stderr := fleet(t, append([]string{"train", "--data", dir, "--out", out}, tiny...)...)
	if code != 1 || !strings.Contains(stderr, "pass --vocab-size N (more than 49, its largest id)") {
		t.Errorf("train without a vocabulary size: exit %d, %s", code, stderr)
	}
	code, _, stderr = fleet(t, append([]string{"train", "--data", dir, "--out", out, "--vocab-size", "40"}, tiny...)...)
	if code != 1 || !strings.Contains(stderr, "train.bin holds token id 49, not below --vocab-size (40)") {
		t.Errorf("train with too small a vocabulary: exit %d, %s", code, stderr)
	}
	code, stdout, stderr := fleet(t, append([]string{"train", "--data", dir, "--out", out, "--vocab-size", "64"}, tiny...)...)
	if code != 0 || !strings.Contains(stdout, "token files: 4000 train and 500 val tokens in 2 files") {
		t.Fatalf("train exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, _, stderr = fleet(t, "sample", "--out", out, "--device", "cpu")
	if code != 1 || !strings.Contains(stderr, "raw token ids") {
		t.Errorf("sample of a run without a tokenizer: exit %d, %s", code, stderr)
	}
	if code, _, stderr = fleet(t, "eval", "--out", out, "--device", "cpu"); code != 0 {
		t.Errorf("eval exit %d: %s", code, stderr)
	}
}

func TestPrepareBadInput(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.txt", corpus())
	empty := writeFile(t, dir, "empty.txt", "")
	notDir := writeFile(t, dir, "plain-file", "x")
	badTok := writeFile(t, dir, "bad.json", "{not a tokenizer")
	emptyTok := writeFile(t, dir, "tokenizer.json", "")
	out := filepath.Join(dir, "out")
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no tokenizer", []string{"prepare", "--out", out, good}, 2, "--tokenizer is required"},
		{"no out", []string{"prepare", "--tokenizer", "char", good}, 2, "--out is required"},
		{"no inputs", []string{"prepare", "--tokenizer", "char", "--out", out}, 2, "no INPUT"},
		{"unknown flag", []string{"prepare", "--tokeniser", "char", good}, 2, "not defined"},
		{"missing input", []string{"prepare", "--tokenizer", "char", "--out", out, filepath.Join(dir, "nope.txt")}, 1, "nope.txt: no such file"},
		{"empty input", []string{"prepare", "--tokenizer", "char", "--out", out, good, empty}, 1, "empty.txt: empty"},
		{"unwritable out", []string{"prepare", "--tokenizer", "char", "--out", filepath.Join(notDir, "sub"), good}, 1, "plain-file/sub"},
		{"unknown tokenizer", []string{"prepare", "--tokenizer", "sentencepiece:x", "--out", out, good}, 1, "unknown tokenizer"},
		{"tokenizer file does not parse", []string{"prepare", "--tokenizer", "bpe:" + badTok, "--out", out, good}, 1, "bad.json"},
		{"empty char tokenizer", []string{"prepare", "--tokenizer", "char:" + emptyTok, "--out", out, good}, 1, "--tokenizer: char tokenizer " + emptyTok + ": empty file"},
		{"empty bpe tokenizer", []string{"prepare", "--tokenizer", "bpe:" + emptyTok, "--out", out, good}, 1, "--tokenizer: bpe tokenizer " + emptyTok + ": empty file"},
		{"empty gpt2 tokenizer", []string{"prepare", "--tokenizer", "gpt2:" + emptyTok, "--out", out, good}, 1, "--tokenizer: gpt2 tokenizer " + emptyTok + ": empty file"},
		{"empty hf tokenizer", []string{"prepare", "--tokenizer", "hf:" + emptyTok, "--out", out, good}, 1, "--tokenizer: hf tokenizer " + emptyTok + ": empty file"},
		{"bad val fraction", []string{"prepare", "--tokenizer", "char", "--val-fraction", "1.5", "--out", out, good}, 1, "val fraction 1.5"},
		{"ngram order", []string{"ngram", "--order", "0", "--data", good}, 1, "--order"},
		{"ngram missing data", []string{"ngram", "--data", filepath.Join(dir, "nope")}, 1, "no such file"},
		{"tokenizer with text, missing", append([]string{"train", "--data", good, "--out", out, "--tokenizer", "char:x"}, tiny...), 1, "--tokenizer: load tokenizer x: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := fleet(t, c.args...)
			if code != c.code || !strings.Contains(stderr, c.want) {
				t.Errorf("exit %d (want %d), stderr lacks %q:\n%s", code, c.code, c.want, stderr)
			}
			if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
				t.Errorf("stderr shows a panic:\n%s", stderr)
			}
		})
	}
}
