package testenv

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// ReadTree reads every file under dir, by its path relative to dir, so
// that a test can check that a folder was left byte for byte as it was.
func ReadTree(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files[rel], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
