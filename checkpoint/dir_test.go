package checkpoint

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func entries(step int) []Entry {
	payload := bytes.Repeat([]byte{byte(step)}, 1000+step)
	return []Entry{
		{Name: "a.bin", Write: func(w io.Writer) error { _, err := w.Write(payload); return err }},
		{Name: "b.bin", Write: func(w io.Writer) error { _, err := w.Write(payload[:10]); return err }},
	}
}

func TestWriteDirLatestKeep(t *testing.T) {
	root := filepath.Join(t.TempDir(), "checkpoints")
	if d, m, _, err := Latest(root); d != "" || m != nil || err != nil {
		t.Fatalf("Latest of a missing folder = %q, %v, %v", d, m, err)
	}
	if Exists(root) {
		t.Fatal("Exists on a missing folder")
	}
	// A leftover temporary directory is ignored and later removed.
	os.MkdirAll(filepath.Join(root, ".tmp-step-0000099-x"), 0o755)
	for step := 10; step <= 40; step += 10 {
		if _, err := WriteDir(root, &Manifest{Step: step}, entries(step), 2); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(root)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "latest step-0000030 step-0000040" {
		t.Fatalf("folder holds %s", got)
	}
	d, m, _, err := Latest(root)
	if err != nil || m.Step != 40 || filepath.Base(d) != "step-0000040" {
		t.Fatalf("Latest = %q, %+v, %v", d, m, err)
	}
	if m.Files["a.bin"].Size != 1040 {
		t.Fatalf("manifest files %+v", m.Files)
	}
	// Damage the newest: Latest falls back to the one before and says why.
	os.WriteFile(filepath.Join(d, "a.bin"), []byte("short"), 0o644)
	d, m, skipped, err := Latest(root)
	if err != nil || m.Step != 30 || len(skipped) != 1 || !strings.Contains(skipped[0].Error(), "a.bin") {
		t.Fatalf("after damage: Latest = %q, %+v, %v, %v", d, m, skipped, err)
	}
	if !Exists(root) {
		t.Fatal("Exists = false")
	}
}

// failAfter fails every write once n bytes have gone through, as a full
// disk does.
type failAfter struct {
	w io.Writer
	n int
}

var errDiskFull = errors.New("no space left on device (injected)")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		n, _ := f.w.Write(p[:f.n])
		f.n = 0
		return n, errDiskFull
	}
	f.n -= len(p)
	return f.w.Write(p)
}

func TestWriteDirFullDisk(t *testing.T) {
	root := t.TempDir()
	if _, err := WriteDir(root, &Manifest{Step: 1}, entries(1), 3); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, 500, 1001} {
		writeHook = func(name string, w io.Writer) io.Writer {
			if name == "a.bin" {
				return &failAfter{w: w, n: limit}
			}
			return w
		}
		_, err := WriteDir(root, &Manifest{Step: 2}, entries(2), 3)
		writeHook = nil
		if !errors.Is(err, errDiskFull) || !strings.Contains(err.Error(), "checkpoint step 2") || !strings.Contains(err.Error(), "a.bin") {
			t.Fatalf("limit %d: err = %v, want the injected fault with the step and file", limit, err)
		}
		d, m, skipped, err := Latest(root)
		if err != nil || m == nil || m.Step != 1 || len(skipped) != 0 {
			t.Fatalf("limit %d: previous checkpoint: %q %+v %v %v", limit, d, m, skipped, err)
		}
		ents, _ := os.ReadDir(root)
		if len(ents) != 2 {
			t.Fatalf("limit %d: %d entries left in the folder, want latest and step-0000001", limit, len(ents))
		}
	}
}
