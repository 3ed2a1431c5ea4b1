package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// LoadText reads a file, or every regular file under a folder (as
// ListFiles lists them), and returns their contents concatenated as they
// are. It fails, naming path, when path does not exist, when a folder
// holds no files, or when the text is empty.
func LoadText(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("data %s: %w", path, unwrapPath(err))
	}
	if !info.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("data %s: %w", path, unwrapPath(err))
		}
		if len(b) == 0 {
			return "", fmt.Errorf("data %s: empty", path)
		}
		return string(b), nil
	}
	files, err := ListFiles(path)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return "", fmt.Errorf("data %s: %w", path, err)
		}
		sb.Write(b)
	}
	if sb.Len() == 0 {
		return "", fmt.Errorf("data %s: empty", path)
	}
	return sb.String(), nil
}

// ListFiles returns the regular files under folder dir, walked
// recursively in lexical path order. Hidden files and folders (names
// starting with ".") are skipped; symbolic links to regular files are
// followed. It fails, naming dir, when dir cannot be walked or holds no
// files.
func ListFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			// Follow symbolic links to regular files; skip anything else.
			if d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				return nil
			}
		}
		files = append(files, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("data %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("data %s: folder has no files", dir)
	}
	return files, nil
}

// unwrapPath strips an *fs.PathError so that the path is not repeated when
// the caller adds it again.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// DefaultCorpus builds the default training corpus: the non-test .go files
// of the Go standard library source ($GOROOT/src, leaving out the src/cmd
// tree and any testdata or vendor folder), in lexical path order, keeping
// only pure-ASCII files, and stopping before the first file that would
// take the total past maxBytes. It also returns a one-line description of
// what it built.
func DefaultCorpus(maxBytes int) (text string, desc string, err error) {
	if maxBytes <= 0 {
		return "", "", fmt.Errorf("data: default corpus size must be positive, got %d", maxBytes)
	}
	root, err := findGOROOT()
	if err != nil {
		return "", "", err
	}
	src := filepath.Join(root, "src")
	cmdDir := filepath.Join(src, "cmd")

	var sb strings.Builder
	files := 0
	errFull := errors.New("full")
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == cmdDir {
				return filepath.SkipDir
			}
			if p != src && (d.Name() == "testdata" || d.Name() == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		name := d.Name()
		if !d.Type().IsRegular() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !isASCII(b) {
			return nil
		}
		if sb.Len()+len(b) > maxBytes {
			return errFull
		}
		sb.Write(b)
		files++
		return nil
	})
	if err != nil && err != errFull {
		return "", "", fmt.Errorf("data: default corpus from %s: %w", src, err)
	}
	if sb.Len() == 0 {
		return "", "", fmt.Errorf("data: default corpus from %s: no file fits in %d bytes; pass --data PATH", src, maxBytes)
	}
	desc = fmt.Sprintf("Go standard library source in %s (%d files, %d bytes)", src, files, sb.Len())
	return sb.String(), desc, nil
}

// findGOROOT asks the go command for GOROOT, falling back to the GOROOT
// this binary was built with. Either must hold a src folder.
func findGOROOT() (string, error) {
	if out, err := exec.Command("go", "env", "GOROOT").Output(); err == nil {
		if root := strings.TrimSpace(string(out)); root != "" && hasSrc(root) {
			return root, nil
		}
	}
	if root := runtime.GOROOT(); root != "" && hasSrc(root) {
		return root, nil
	}
	return "", errors.New("data: could not find GOROOT (the Go installation, whose source is the default corpus); " +
		"install Go or pass --data PATH to train on your own text")
}

func hasSrc(root string) bool {
	fi, err := os.Stat(filepath.Join(root, "src"))
	return err == nil && fi.IsDir()
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
