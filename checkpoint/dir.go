package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fleetml/fleet/internal/atomicfile"
)

// A checkpoint folder (OUT/checkpoints) holds one directory per saved step,
// step-NNNNNNN, each with its files and a manifest giving their sizes and
// SHA-256 sums, and a file named latest naming the newest complete one.
// Directories are written under a temporary name (.tmp-...), their files
// and the directory fsynced, then renamed into place; latest is replaced
// atomically last. A kill at any moment leaves at worst a temporary
// directory, which readers ignore and the next write removes.
const (
	FormatVersion = 1
	ManifestFile  = "manifest.json"
	LatestFile    = "latest"
	tmpPrefix     = ".tmp-"
	stepPrefix    = "step-"
)

// Manifest is manifest.json of a checkpoint directory.
type Manifest struct {
	Format int `json:"format_version"`
	Step   int `json:"step"`
	// Config and Tokenizer are the run's config.json and tokenizer.json.
	Config    json.RawMessage    `json:"config,omitempty"`
	Tokenizer json.RawMessage    `json:"tokenizer,omitempty"`
	Files     map[string]FileSum `json:"files"`
}

// FileSum is a file's size and SHA-256 sum, in hex.
type FileSum struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Entry is one file of a checkpoint: its name and what writes it, or,
// where From is set, a file another process wrote there already (durably,
// with WriteStaged), which WriteDir moves into the directory under Name,
// taking Sum as its sum (its size is checked).
type Entry struct {
	Name  string
	Write func(w io.Writer) error
	From  string
	Sum   FileSum
}

// WriteStaged writes a file for a checkpoint that another process commits
// (an Entry's From), atomically (atomicfile.Write: path exists only
// complete, fsynced, its folder too), and returns its size and sum.
func WriteStaged(path string, fn func(io.Writer) error) (FileSum, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return FileSum{}, fmt.Errorf("checkpoint: %w", err)
	}
	var sum FileSum
	err := atomicfile.Write(path, func(f io.Writer) error {
		h := sha256.New()
		cw := &countWriter{w: io.MultiWriter(f, h)}
		var w io.Writer = cw
		if writeHook != nil {
			w = writeHook(filepath.Base(path), w)
		}
		if err := fn(w); err != nil {
			return err
		}
		sum = FileSum{Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}
		return nil
	})
	if err != nil {
		return FileSum{}, fmt.Errorf("checkpoint: %w", err)
	}
	return sum, nil
}

// writeHook, when set (by tests), wraps the writer of every checkpoint
// file, to inject faults such as a full disk.
var writeHook func(name string, w io.Writer) io.Writer

// DirName is the directory name of step's checkpoint.
func DirName(step int) string { return fmt.Sprintf("%s%07d", stepPrefix, step) }

// stepOf parses a directory name made by DirName.
func stepOf(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, stepPrefix)
	if !ok || s == "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil && n >= 0 && DirName(n) == name
}

// WriteDir writes a checkpoint of m.Step with files into root, makes it
// the latest, and removes all but the newest keep checkpoints (keep <= 0
// keeps all) and leftover temporary directories. m.Files is filled in.
// On error the checkpoints already in root are left as they were.
func WriteDir(root string, m *Manifest, files []Entry, keep int) (dir string, err error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	name := DirName(m.Step)
	tmp, err := os.MkdirTemp(root, tmpPrefix+name+"-")
	if err != nil {
		return "", fmt.Errorf("checkpoint step %d: %w", m.Step, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
			err = fmt.Errorf("checkpoint step %d in %s: %w", m.Step, root, err)
		}
	}()
	m.Format = FormatVersion
	m.Files = map[string]FileSum{}
	for _, e := range files {
		if e.From != "" {
			st, err := os.Stat(e.From)
			if err != nil {
				return "", err
			}
			if st.Size() != e.Sum.Size {
				return "", fmt.Errorf("%s holds %d bytes, its writer reported %d", e.From, st.Size(), e.Sum.Size)
			}
			if err := os.Rename(e.From, filepath.Join(tmp, e.Name)); err != nil {
				return "", err
			}
			m.Files[e.Name] = e.Sum
			continue
		}
		sum, err := writeFile(filepath.Join(tmp, e.Name), e.Name, e.Write)
		if err != nil {
			return "", err
		}
		m.Files[e.Name] = sum
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", err
	}
	if _, err := writeFile(filepath.Join(tmp, ManifestFile), ManifestFile, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := syncDir(tmp); err != nil {
		return "", err
	}
	final := filepath.Join(root, name)
	if _, err := os.Stat(final); err == nil {
		// The same step saved again (a resumed run that finished, or a
		// stop right after an interval checkpoint): replace it.
		if err := os.RemoveAll(final); err != nil {
			return "", err
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	if err := syncDir(root); err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(filepath.Join(root, LatestFile), []byte(name+"\n")); err != nil {
		return "", err
	}
	prune(root, keep)
	return final, nil
}

// writeFile creates path with what fn writes, fsyncs it and returns its sum.
func writeFile(path, name string, fn func(io.Writer) error) (FileSum, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	var w io.Writer = cw
	if writeHook != nil {
		w = writeHook(name, w)
	}
	if err := fn(w); err != nil {
		return FileSum{}, fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return FileSum{}, fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return FileSum{}, fmt.Errorf("close %s: %w", name, err)
	}
	return FileSum{Size: cw.n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, fs.ErrInvalid) {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// steps lists the step directories in root, newest first.
func steps(root string) []int {
	ents, _ := os.ReadDir(root)
	var s []int
	for _, e := range ents {
		if n, ok := stepOf(e.Name()); ok && e.IsDir() {
			s = append(s, n)
		}
	}
	slices.Sort(s)
	slices.Reverse(s)
	return s
}

// prune removes all but the newest keep step directories and any
// temporary directories left by interrupted writes.
func prune(root string, keep int) {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) && e.IsDir() {
			os.RemoveAll(filepath.Join(root, e.Name()))
		}
	}
	if keep <= 0 {
		return
	}
	for i, n := range steps(root) {
		if i >= keep {
			os.RemoveAll(filepath.Join(root, DirName(n)))
		}
	}
}

// Exists reports whether root holds any checkpoint, complete or not
// (temporary directories aside).
func Exists(root string) bool {
	if _, err := os.Stat(filepath.Join(root, LatestFile)); err == nil {
		return true
	}
	return len(steps(root)) > 0
}

// Verify reads dir's manifest and checks the size and SHA-256 sum of every
// file it lists.
func Verify(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %s: %w", dir, ManifestFile, err)
	}
	if m.Format != FormatVersion {
		return nil, fmt.Errorf("checkpoint %s: format version %d, this fleet reads %d", dir, m.Format, FormatVersion)
	}
	if len(m.Files) == 0 {
		return nil, fmt.Errorf("checkpoint %s: %s lists no files", dir, ManifestFile)
	}
	for _, name := range slices.Sorted(maps.Keys(m.Files)) {
		want := m.Files[name]
		if name != filepath.Base(name) || name == "." || name == ".." {
			return nil, fmt.Errorf("checkpoint %s: bad file name %q in %s", dir, name, ManifestFile)
		}
		got, err := sumFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("checkpoint %s: %w", dir, err)
		}
		if got != want {
			return nil, fmt.Errorf("checkpoint %s: %s has %d bytes, sha256 %s; the manifest says %d bytes, sha256 %s",
				dir, name, got.Size, got.SHA256, want.Size, want.SHA256)
		}
	}
	return &m, nil
}

func sumFile(path string) (FileSum, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileSum{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return FileSum{}, err
	}
	return FileSum{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Latest returns the newest complete checkpoint in root: the one latest
// names if it verifies, else the newest step directory that does.
// Temporary and damaged directories are skipped; skipped lists why. With
// none, dir is "" and err nil.
func Latest(root string) (dir string, m *Manifest, skipped []error, err error) {
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return "", nil, nil, nil
	}
	tried := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(root, LatestFile)); err == nil {
		name := strings.TrimSpace(string(b))
		if _, ok := stepOf(name); ok {
			tried[name] = true
			d := filepath.Join(root, name)
			if m, err := Verify(d); err == nil {
				return d, m, nil, nil
			} else {
				skipped = append(skipped, err)
			}
		} else {
			skipped = append(skipped, fmt.Errorf("%s: %q names no checkpoint", filepath.Join(root, LatestFile), name))
		}
	}
	for _, n := range steps(root) {
		name := DirName(n)
		if tried[name] {
			continue
		}
		d := filepath.Join(root, name)
		m, err := Verify(d)
		if err == nil {
			return d, m, skipped, nil
		}
		skipped = append(skipped, err)
	}
	return "", nil, skipped, nil
}
