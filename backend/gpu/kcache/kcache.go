package kcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Key identifies a compiled kernel: the hex SHA-256 of the source,
// architecture, compiler version and options, each length-prefixed so no two
// different inputs run together into one.
func Key(src, arch, compilerVersion string, opts []string) string {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	field("fleet kernel cache v1")
	field(src)
	field(arch)
	field(compilerVersion)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(opts)))
	h.Write(n[:])
	for _, o := range opts {
		field(o)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// PrebuiltKey identifies a kernel compiled ahead of time, on another
// machine, for architecture arch (sm_90): by its source and options, not
// the compiler's version, since the machine that loads it may have
// another NVRTC or none. The driver that loads the image decides whether
// it runs it (the CUDA driver's $FLEET_KERNEL_PREBUILT).
func PrebuiltKey(src, arch string, opts []string) string { return Key(src, arch, "prebuilt", opts) }

// DefaultDir is $FLEET_KERNEL_CACHE if set, else os.UserCacheDir()/fleet/kernels.
func DefaultDir() (string, error) {
	if d := os.Getenv("FLEET_KERNEL_CACHE"); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("kernel cache: %w (set FLEET_KERNEL_CACHE)", err)
	}
	return filepath.Join(base, "fleet", "kernels"), nil
}

// Cache is a folder of compiled kernels.
type Cache struct {
	dir string
}

// Open opens (creating it if need be) the cache in dir; "" means DefaultDir.
// Temporary files that a killed writer left more than an hour ago are removed.
func Open(dir string) (*Cache, error) {
	if dir == "" {
		d, err := DefaultDir()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	c := &Cache{dir: dir}
	c.sweep(time.Hour)
	return c, nil
}

// Dir is the cache's folder.
func (c *Cache) Dir() string { return c.dir }

const (
	magic      = "FLEETKC1"
	headerSize = len(magic) + sha256.Size + 8 + sha256.Size // magic, key, length, checksum
	suffix     = ".cubin"
	tmpSuffix  = ".tmp"
)

// ErrMiss is returned by Get for a key with no (valid) entry.
var ErrMiss = errors.New("kernel cache: no entry")

// CorruptError says an entry failed its checks. It was removed.
type CorruptError struct {
	Path, Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("kernel cache: %s: %s (removed; it will be compiled again)", e.Path, e.Reason)
}

// Is makes a corrupt entry count as a miss: errors.Is(err, ErrMiss).
func (e *CorruptError) Is(target error) bool { return target == ErrMiss }

func (c *Cache) path(key string) string { return filepath.Join(c.dir, key+suffix) }

func validKey(key string) error {
	if len(key) == 0 || len(key) > 128 || strings.ContainsAny(key, `/\.`) {
		return fmt.Errorf("kernel cache: bad key %q", key)
	}
	return nil
}

// Get returns the entry for key. A missing entry gives ErrMiss; a damaged
// one is removed and gives a *CorruptError (which errors.Is ErrMiss).
func (c *Cache) Get(key string) ([]byte, error) {
	if err := validKey(key); err != nil {
		return nil, err
	}
	p := c.path(key)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrMiss
	}
	if err != nil {
		return nil, fmt.Errorf("kernel cache: %w", err)
	}
	data, reason := decode(b, key)
	if reason != "" {
		// Remove it only if it is still the file we read: another process
		// may have renamed a good entry over it meanwhile.
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, b) {
			os.Remove(p)
		}
		return nil, &CorruptError{Path: p, Reason: reason}
	}
	return data, nil
}

func decode(b []byte, key string) ([]byte, string) {
	if len(b) < headerSize {
		return nil, fmt.Sprintf("%d bytes, shorter than the header", len(b))
	}
	if string(b[:len(magic)]) != magic {
		return nil, "bad magic"
	}
	off := len(magic)
	ks := sha256.Sum256([]byte(key))
	if !bytes.Equal(b[off:off+sha256.Size], ks[:]) {
		return nil, "entry of another key"
	}
	off += sha256.Size
	n := binary.LittleEndian.Uint64(b[off:])
	off += 8
	sum := b[off : off+sha256.Size]
	data := b[headerSize:]
	if uint64(len(data)) != n {
		return nil, fmt.Sprintf("%d bytes of contents, header says %d (truncated?)", len(data), n)
	}
	if got := sha256.Sum256(data); !bytes.Equal(got[:], sum) {
		return nil, "checksum mismatch"
	}
	return data, ""
}

func encode(key string, data []byte) []byte {
	b := make([]byte, 0, headerSize+len(data))
	b = append(b, magic...)
	ks := sha256.Sum256([]byte(key))
	b = append(b, ks[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(data)))
	sum := sha256.Sum256(data)
	b = append(b, sum[:]...)
	return append(b, data...)
}

// Put stores data under key atomically: temporary file, fsync, rename,
// then an fsync of the folder.
func (c *Cache) Put(key string, data []byte) error {
	if err := validKey(key); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.dir, "."+key+".*"+tmpSuffix)
	if err != nil {
		return fmt.Errorf("kernel cache: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("kernel cache: writing %s: %w", c.path(key), err)
	}
	if _, err := f.Write(encode(key, data)); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("kernel cache: writing %s: %w", c.path(key), err)
	}
	if err := os.Rename(tmp, c.path(key)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("kernel cache: %w", err)
	}
	if d, err := os.Open(c.dir); err == nil {
		d.Sync() // best effort: makes the rename durable
		d.Close()
	}
	return nil
}

// Load returns the entry for key, or compiles it with compile, stores it and
// returns it; hit says which. A damaged entry is compiled again. Failing to
// read or store an entry is not an error (the kernel is still returned),
// since the cache only saves time.
func (c *Cache) Load(key string, compile func() ([]byte, error)) (data []byte, hit bool, err error) {
	// Any failure to read (a miss, a damaged entry, an unreadable folder)
	// means compiling.
	if data, err = c.Get(key); err == nil {
		return data, true, nil
	}
	data, err = compile()
	if err != nil {
		return nil, false, err
	}
	_ = c.Put(key, data)
	return data, false, nil
}

// sweep removes temporary files older than age.
func (c *Cache) sweep(age time.Duration) {
	m, _ := filepath.Glob(filepath.Join(c.dir, ".*"+tmpSuffix))
	for _, p := range m {
		if fi, err := os.Stat(p); err == nil && time.Since(fi.ModTime()) > age {
			os.Remove(p)
		}
	}
}
