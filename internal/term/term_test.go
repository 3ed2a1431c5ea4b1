package term

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestNotTerminals(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, w := range map[string]any{"buffer": &bytes.Buffer{}, "file": f} {
		if IsTerminal(w.(interface{ Write([]byte) (int, error) })) {
			t.Errorf("%s is a terminal", name)
		}
	}
	if null, err := os.Open(os.DevNull); err == nil {
		defer null.Close()
		if IsTerminal(null) {
			t.Errorf("%s is a terminal", os.DevNull)
		}
	}
}
