package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	if err := WriteFile(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	// A writer that fails half way leaves the old file and no temporary.
	err := Write(p, func(w io.Writer) error {
		w.Write([]byte("tw"))
		return errors.New("disk on fire")
	})
	if err == nil {
		t.Fatal("failed write reported success")
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Fatalf("file holds %q after a failed write", b)
	}
	if err := WriteFile(p, []byte("two")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two" {
		t.Fatalf("file holds %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("folder holds %d entries, want only the file", len(entries))
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), nil); err == nil {
		t.Fatal("write into a missing folder succeeded")
	}
}
