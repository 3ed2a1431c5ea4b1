package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestTokenizerEncodeDecode: fleet tokenizer encode and decode open the
// specs every command opens, and decode gives back what encode read.
func TestTokenizerEncodeDecode(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a.txt", corpus())
	tok := filepath.Join(dir, "tok.json")
	if code, _, stderr := fleet(t, "tokenizer", "train", "--vocab-size", "280", "--out", tok, a); code != 0 {
		t.Fatalf("tokenizer train exit %d: %s", code, stderr)
	}
	prep := filepath.Join(dir, "prep")
	if code, _, stderr := fleet(t, "prepare", "--tokenizer", "char", "--out", prep, a); code != 0 {
		t.Fatalf("prepare exit %d: %s", code, stderr)
	}
	old := stdinReader
	defer func() { stdinReader = old }()
	pipe := func(input string, args ...string) (int, string, string) {
		stdinReader = strings.NewReader(input)
		return fleet(t, append([]string{"tokenizer"}, args...)...)
	}
	const text = "to be, or not to be"
	for _, spec := range []string{"bpe:" + tok, "char:" + filepath.Join(prep, "tokenizer.json")} {
		code, ids, stderr := pipe(text, "encode", "--tokenizer", spec)
		if code != 0 || len(strings.Fields(ids)) == 0 {
			t.Fatalf("%s: encode exit %d, %q, %s", spec, code, ids, stderr)
		}
		code, back, stderr := pipe(ids, "decode", "--tokenizer", spec)
		if code != 0 || back != text {
			t.Errorf("%s: decode exit %d, %q, want %q; %s", spec, code, back, text, stderr)
		}
	}
	for _, c := range []struct {
		input string
		args  []string
		want  string
	}{
		{"1 2 280", []string{"decode", "--tokenizer", "bpe:" + tok}, "token 2: id 280 is outside the vocabulary (0 to 279)"},
		{"Ω", []string{"encode", "--tokenizer", "char:" + filepath.Join(prep, "tokenizer.json")}, `character "Ω"`},
		{"x", []string{"encode", "--tokenizer", "char"}, `"char" needs a file`},
		{"1", []string{"decode", "--tokenizer", "none"}, `"none" (raw token ids) needs a vocabulary size`},
	} {
		if code, _, stderr := pipe(c.input, c.args...); code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q lacks %q", c.args, code, stderr, c.want)
		}
	}
}
