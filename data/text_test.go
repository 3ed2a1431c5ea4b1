package data

import (
	"errors"
	"io/fs"
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
