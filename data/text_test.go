package data

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadTextFolder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "b.txt"), "B")
	writeFile(t, filepath.Join(dir, "a", "z.txt"), "AZ")
	writeFile(t, filepath.Join(dir, "a", "y", "1.txt"), "AY1")
	writeFile(t, filepath.Join(dir, "c.txt"), "C")
	writeFile(t, filepath.Join(dir, ".hidden"), "HIDDEN")
	writeFile(t, filepath.Join(dir, ".git", "x.txt"), "GIT")
	writeFile(t, filepath.Join(dir, "a", ".swp"), "SWP")
	got, err := LoadText(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "AY1AZBC"; got != want {
		t.Errorf("LoadText = %q, want %q", got, want)
	}
}

func TestLoadTextFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "in.txt")
	writeFile(t, p, "héllo\n")
	got, err := LoadText(p)
	if err != nil {
		t.Fatal(err)
	}
	if got != "héllo\n" {
		t.Errorf("LoadText = %q", got)
	}
}

func TestLoadTextErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.txt")
	_, err := LoadText(missing)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing path: err = %v", err)
	}

	empty := filepath.Join(dir, "empty.txt")
	writeFile(t, empty, "")
	_, err = LoadText(empty)
	if err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("empty file: err = %v", err)
	}

	emptyDir := filepath.Join(dir, "none")
	writeFile(t, filepath.Join(emptyDir, ".only-hidden"), "x")
	if err := os.Mkdir(filepath.Join(emptyDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = LoadText(emptyDir)
	if err == nil || !strings.Contains(err.Error(), emptyDir) {
		t.Errorf("empty folder: err = %v", err)
	}

	emptyFiles := filepath.Join(dir, "blank")
	writeFile(t, filepath.Join(emptyFiles, "a.txt"), "")
	_, err = LoadText(emptyFiles)
	if err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("folder of empty files: err = %v", err)
	}
}

func TestDefaultCorpus(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("go command not found, so GOROOT source is unavailable:", err)
	}
	const maxBytes = 1 << 20
	text, desc, err := DefaultCorpus(maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	if len(text) == 0 || len(text) > maxBytes {
		t.Fatalf("corpus has %d bytes, want 1..%d", len(text), maxBytes)
	}
	if !isASCII([]byte(text)) {
		t.Error("corpus is not pure ASCII")
	}
	if !strings.Contains(text, "package ") {
		t.Error("corpus does not look like Go source")
	}
	if !strings.HasPrefix(desc, "Go standard library source in ") {
		t.Errorf("desc = %q", desc)
	}
	text2, desc2, err := DefaultCorpus(maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	if text2 != text || desc2 != desc {
		t.Error("DefaultCorpus is not deterministic")
	}
	t.Log(desc)

	if _, _, err := DefaultCorpus(0); err == nil {
		t.Error("DefaultCorpus(0) succeeded")
	}
}

// notText checks that err refuses name as not text, for the reason in why,
// with advice that names the byte-level route for path.
func notText(t *testing.T, err error, name, path, why string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s loaded as text", name)
	}
	if !errors.Is(err, ErrNotText) {
		t.Errorf("err does not wrap ErrNotText: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{
		"data " + name + ": not text: ",
		why,
		"fleet train tokenizes text files by character",
		"fleet tokenizer train --vocab-size 257 --out bytes.json " + path + " ",
		"fleet prepare --tokenizer bpe:bytes.json --out DIR " + path + ",",
		"fleet train --data DIR",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("err does not hold %q:\n%s", want, msg)
		}
	}
}

func TestLoadTextBinary(t *testing.T) {
	const ls = "/bin/ls"
	if _, err := os.Stat(ls); err != nil {
		t.Skip("this system has no /bin/ls to try as a binary:", err)
	}
	_, err := LoadText(ls)
	notText(t, err, ls, ls, "it holds NUL bytes (the first at byte offset ")
	t.Log(err)
}

func TestLoadTextNUL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "nul.txt")
	writeFile(t, p, strings.Repeat("plain text\n", 100)+"a\x00b\n")
	_, err := LoadText(p)
	notText(t, err, p, p, "it holds NUL bytes (the first at byte offset 1101)")
}

func TestLoadTextInvalidUTF8(t *testing.T) {
	// English text with 5% of its bytes, at random places, replaced by
	// random non-ASCII bytes: most of those are invalid UTF-8.
	rng := rand.New(rand.NewPCG(1, 2))
	b := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog.\n", 400))
	for _, i := range rng.Perm(len(b))[:len(b)/20] {
		b[i] = byte(0x80 + rng.IntN(0x80))
	}
	n := invalidUTF8(b)
	if share := float64(n) / float64(len(b)); share < 0.04 || share > 0.05 {
		t.Fatalf("the test file is %.2f%% invalid, want 4 to 5%%", 100*share)
	}
	p := filepath.Join(t.TempDir(), "mixed.txt")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadText(p)
	notText(t, err, p, p, fmt.Sprintf("%% of its bytes (%d of %d) are not valid UTF-8 (more than 1%%)", n, len(b)))
	t.Log(err)
}

func TestLoadTextAcceptsText(t *testing.T) {
	dir := t.TempDir()
	// UTF-8 with two-, three- and four-byte characters, and a valid U+FFFD.
	utf := strings.Repeat("héllo wörld — 日本語 😀 \ufffd\n", 50)
	writeFile(t, filepath.Join(dir, "utf8.txt"), utf)
	// Latin-1 English with a few accented letters, each one invalid byte:
	// 6 in over 2000 bytes.
	latin1 := strings.Repeat("We met at the caf\xe9 to talk about the weather and nothing else.\n", 6) +
		strings.Repeat("Plain English text, line after line, with no accents at all.\n", 30)
	if n := invalidUTF8([]byte(latin1)); n != 6 || float64(n) > MaxInvalidUTF8Share*float64(len(latin1)) {
		t.Fatalf("the Latin-1 file has %d invalid bytes in %d", n, len(latin1))
	}
	writeFile(t, filepath.Join(dir, "latin1.txt"), latin1)
	for name, want := range map[string]string{"utf8.txt": utf, "latin1.txt": latin1} {
		got, err := LoadText(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
		} else if got != want {
			t.Errorf("%s: LoadText changed the text", name)
		}
	}
	got, err := LoadText(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != latin1+utf {
		t.Error("LoadText(folder) changed the text")
	}
}

func TestLoadTextFolderWithBinary(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.txt"), "first text\n")
	writeFile(t, filepath.Join(dir, "b", "c.txt"), "more text\n")
	bin := filepath.Join(dir, "b", "tool")
	writeFile(t, bin, "\x7fELF\x02\x01\x01\x00\x00\x00text after")
	writeFile(t, filepath.Join(dir, "d.txt"), "last text\n")
	_, err := LoadText(dir)
	notText(t, err, bin, dir, "it holds NUL bytes (the first at byte offset 7)")
	if err != nil && !strings.Contains(err.Error(), "Move it out of "+dir+", or") {
		t.Errorf("err does not suggest moving the file out of the folder: %v", err)
	}
	t.Log(err)
}

// TestCheckTextThreshold puts k isolated invalid bytes (0xff) in 10000
// bytes: up to 1% (100) is text, more is not.
func TestCheckTextThreshold(t *testing.T) {
	const size = 10000
	for _, tc := range []struct {
		invalid int
		ok      bool
		pct     string
	}{
		{0, true, ""},
		{99, true, ""},
		{100, true, ""},
		{101, false, "1.01%"},
		{150, false, "1.5%"},
		{10000, false, "100%"},
	} {
		b := bytes.Repeat([]byte("x"), size)
		for i := range tc.invalid {
			b[i*size/tc.invalid] = 0xff
		}
		if n := invalidUTF8(b); n != tc.invalid {
			t.Fatalf("%d invalid bytes: invalidUTF8 = %d", tc.invalid, n)
		}
		err := CheckText("f.txt", b)
		if tc.ok {
			if err != nil {
				t.Errorf("%d invalid bytes in %d: %v", tc.invalid, size, err)
			}
			continue
		}
		notText(t, err, "f.txt", "f.txt",
			fmt.Sprintf("%s of its bytes (%d of %d) are not valid UTF-8 (more than 1%%)", tc.pct, tc.invalid, size))
	}
	if err := CheckText("empty", nil); err != nil {
		t.Errorf("empty: %v", err)
	}
}

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		share, limit float64
		want         string
	}{
		{0.372, 0.01, "37.2%"},
		{0.01, 0, "1%"},
		{0.0101, 0.01, "1.01%"},
		{0.010004, 0.01, "1.0004%"},
		{0.0149, 0.01, "1.5%"},
		{1, 0.01, "100%"},
	} {
		if got := percent(tc.share, tc.limit); got != tc.want {
			t.Errorf("percent(%v, %v) = %q, want %q", tc.share, tc.limit, got, tc.want)
		}
	}
}
