package data

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"unicode/utf8"
)

// LoadText reads a file, or every regular file under a folder (as
// ListFiles lists them), and returns their contents concatenated as they
// are. It fails, naming path, when path does not exist, when a folder
// holds no files, or when the text is empty. Each file must be text as
// CheckText defines it; one that is not (a binary, say) is refused with an
// error naming that file.
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
		if err := checkText(path, path, b); err != nil {
			return "", err
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
		if err := checkText(p, path, b); err != nil {
			return "", err
		}
		sb.Write(b)
	}
	if sb.Len() == 0 {
		return "", fmt.Errorf("data %s: empty", path)
	}
	return sb.String(), nil
}

// MaxInvalidUTF8Share is the largest share of a file's bytes that may be
// invalid UTF-8 (bytes that are not part of a valid UTF-8 sequence) for
// CheckText to accept it as text. It is not zero so that text that is
// mostly UTF-8 but not quite still loads: an English text saved as
// Latin-1, whose few accented letters are each one invalid byte, or a
// UTF-8 file with a stray byte or two. Binaries, and text in a legacy
// encoding that is mostly non-ASCII (Latin-1 French is about 1 to 3%,
// Cyrillic or Greek in a single-byte code page or UTF-16 much more), are
// over it. Each invalid byte becomes U+FFFD for the character tokenizer,
// so anything much over this would train on replacement characters.
const MaxInvalidUTF8Share = 0.01

// ErrNotText is what CheckText's errors wrap (errors.Is) when the bytes
// are not text.
var ErrNotText = errors.New("not text")

// CheckText reports whether b, the contents of the file called name, is
// text that fleet train may tokenize by character. It is not when it holds
// a NUL byte, or when more than MaxInvalidUTF8Share of its bytes are not
// part of valid UTF-8 sequences (each byte for which utf8.DecodeRune
// returns RuneError with size 1 counts once). Empty b is text. The error,
// which wraps ErrNotText, names the file ("data NAME: not text: ..."), says
// why, and says how to train on the file's bytes instead.
func CheckText(name string, b []byte) error {
	return checkText(name, name, b)
}

// checkText is CheckText for the file name among the data the user named
// as path (name itself, or a folder holding it), which the advice uses.
func checkText(name, path string, b []byte) error {
	var why string
	if i := bytes.IndexByte(b, 0); i >= 0 {
		why = fmt.Sprintf("it holds NUL bytes (the first at byte offset %d)", i)
	} else if utf8.Valid(b) {
		return nil
	} else if n := invalidUTF8(b); float64(n) > MaxInvalidUTF8Share*float64(len(b)) {
		why = fmt.Sprintf("%s of its bytes (%d of %d) are not valid UTF-8 (more than %s)",
			percent(float64(n)/float64(len(b)), MaxInvalidUTF8Share), n, len(b), percent(MaxInvalidUTF8Share, 0))
	} else {
		return nil
	}
	advice := "To train on its bytes"
	if name != path {
		advice = fmt.Sprintf("Move it out of %s, or, to train on the bytes", path)
	}
	return fmt.Errorf("data %s: %w: %s; fleet train tokenizes text files by character. "+
		"%s, make a byte-level tokenizer with fleet tokenizer train --vocab-size 257 --out bytes.json %s "+
		"(the 256 bytes and <|endoftext|>), tokenize with fleet prepare --tokenizer bpe:bytes.json --out DIR %s, "+
		"and train on that folder with fleet train --data DIR",
		name, ErrNotText, why, advice, path, path)
}

// invalidUTF8 counts the bytes of b that are not part of a valid UTF-8
// sequence.
func invalidUTF8(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			n++
		}
		i += size
	}
	return n
}

// percent formats share as a percentage with one decimal, or more where
// needed to show that it is above limit (so that 1.004% is not shown as
// "1.0%, more than 1%"). A whole number is shown without decimals.
func percent(share, limit float64) string {
	p := 100 * share
	if p == math.Trunc(p) {
		return strconv.FormatFloat(p, 'f', 0, 64) + "%"
	}
	prec := 1
	for ; prec < 6; prec++ {
		v, _ := strconv.ParseFloat(strconv.FormatFloat(p, 'f', prec, 64), 64)
		if v > 100*limit {
			break
		}
	}
	return strconv.FormatFloat(p, 'f', prec, 64) + "%"
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
