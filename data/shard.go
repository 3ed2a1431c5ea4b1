package data

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"unsafe"
)

// The llm.c token shard format: a header of ShardHeaderInts little-endian
// int32 (ShardMagic, ShardVersion, the token count, then zeros), followed by
// the tokens as little-endian uint16.
const (
	ShardMagic       = 20240520
	ShardVersion     = 1
	ShardHeaderInts  = 256
	ShardHeaderBytes = 4 * ShardHeaderInts
	// MaxShardTokens is the most tokens one shard holds: the count is an
	// int32.
	MaxShardTokens = math.MaxInt32
	// MaxVocab16 is the largest vocabulary uint16 shards can hold.
	MaxVocab16 = 65535
)

// Shard is a token file opened for reading, memory-mapped where the system
// allows (else read into memory): an llm.c shard, or a raw nanoGPT file of
// uint16 ids with no header.
type Shard struct {
	Path   string
	Tokens Uint16s // the ids, read in place from the mapping
	Header bool    // whether the file has an llm.c header
	mem    []byte  // the whole file
	unmap  func() error
}

// OpenShard opens an llm.c shard: the header is required.
func OpenShard(path string) (*Shard, error) { return openShard(path, false) }

// OpenTokenFile opens an llm.c shard or, when the file does not start with
// the llm.c magic number, a raw nanoGPT file of uint16 ids.
func OpenTokenFile(path string) (*Shard, error) { return openShard(path, true) }

func openShard(path string, raw bool) (*Shard, error) {
	b, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, unwrapPath(err))
	}
	toks, header, err := ParseShard(path, b, raw)
	if err != nil {
		unmap()
		return nil, err
	}
	return &Shard{Path: path, Tokens: toks, Header: header, mem: b, unmap: unmap}, nil
}

// Close releases the file's memory. The tokens must not be used after.
func (s *Shard) Close() error {
	if s.unmap == nil {
		return nil
	}
	err := s.unmap()
	s.unmap, s.Tokens, s.mem = nil, nil, nil
	return err
}

// SHA256 returns the SHA-256 of the whole file, in hex.
func (s *Shard) SHA256() string {
	h := sha256.Sum256(s.mem)
	return hex.EncodeToString(h[:])
}

// ParseShard reads the tokens of a token file's contents b; name is used in
// errors. With raw false the llm.c header is required; with raw true a file
// that does not start with the magic number is read as raw uint16 ids. The
// tokens share b's memory where b is suitably aligned and the machine is
// little-endian. It never panics; errors name the file and the problem.
func ParseShard(name string, b []byte, raw bool) (tokens Uint16s, header bool, err error) {
	fail := func(format string, args ...any) (Uint16s, bool, error) {
		return nil, false, fmt.Errorf("token file %s: "+format, append([]any{name}, args...)...)
	}
	if len(b) == 0 {
		return fail("empty")
	}
	le := binary.LittleEndian
	word := func(i int) int64 { return int64(int32(le.Uint32(b[4*i:]))) }
	hasMagic := len(b) >= 4 && word(0) == ShardMagic
	if !hasMagic && raw {
		// A file laid out as an llm.c shard whose magic number is wrong is
		// a damaged shard, not raw ids.
		if len(b) >= ShardHeaderBytes && word(1) == ShardVersion && word(2) >= 0 &&
			int64(len(b)) == ShardHeaderBytes+2*word(2) && allZero(b[12:ShardHeaderBytes]) {
			return fail("bad magic number %d (want %d) in an llm.c shard header", word(0), ShardMagic)
		}
		if len(b)%2 != 0 {
			return fail("%d bytes, an odd size: raw token files hold 2-byte (uint16) ids", len(b))
		}
		return view16(b), false, nil
	}
	if !hasMagic {
		if len(b) < 4 {
			return fail("%d bytes, too short for an llm.c shard header (%d bytes)", len(b), ShardHeaderBytes)
		}
		return fail("bad magic number %d (want %d): not an llm.c token shard", word(0), ShardMagic)
	}
	if len(b) < ShardHeaderBytes {
		return fail("truncated header: %d bytes, want %d", len(b), ShardHeaderBytes)
	}
	switch v := word(1); v {
	case ShardVersion:
	case 2:
		return fail("llm.c shard version 2 (uint32 tokens) is not supported; version 1 (uint16) is")
	default:
		return fail("shard version %d, want %d", v, ShardVersion)
	}
	n := word(2)
	if n < 0 {
		return fail("header has a negative token count %d", n)
	}
	body := int64(len(b) - ShardHeaderBytes)
	switch {
	case body < 2*n:
		return fail("truncated body: the header counts %d tokens (%d bytes) but the file holds %d bytes of tokens", n, 2*n, body)
	case body > 2*n:
		return fail("%d bytes after the %d tokens the header counts", body-2*n, n)
	}
	return view16(b[ShardHeaderBytes:]), true, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// view16 returns b's little-endian uint16 values, in place when b is
// aligned and the machine little-endian, else as a copy.
func view16(b []byte) Uint16s {
	n := len(b) / 2
	if n == 0 {
		return Uint16s{}
	}
	if littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%2 == 0 {
		return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), n)
	}
	t := make(Uint16s, n)
	for i := range t {
		t[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return t
}

// ShardWriter writes an llm.c shard atomically: tokens stream into a
// temporary file in the destination folder, and Close writes the header,
// fsyncs and renames it to its final name.
type ShardWriter struct {
	path, tmp string
	f         *os.File
	w         *bufio.Writer
	n         int64
	buf       []byte
}

// CreateShard starts a shard that Close will leave at path.
func CreateShard(path string) (*ShardWriter, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	w := &ShardWriter{path: path, tmp: f.Name(), f: f, w: bufio.NewWriterSize(f, 1<<20), buf: make([]byte, 0, 1<<16)}
	if _, err := w.w.Write(make([]byte, ShardHeaderBytes)); err != nil { // the header goes in at Close
		w.Abort()
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	return w, nil
}

// Len returns the number of tokens written so far.
func (w *ShardWriter) Len() int { return int(w.n) }

// Write appends ids. Every id must be in [0, MaxVocab16).
func (w *ShardWriter) Write(ids []int32) error {
	if w.n+int64(len(ids)) > MaxShardTokens {
		return fmt.Errorf("write shard %s: more than %d tokens", w.path, MaxShardTokens)
	}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), cap(w.buf)/2)]
		b := w.buf[:2*len(chunk)]
		for i, id := range chunk {
			if id < 0 || id >= MaxVocab16 {
				return fmt.Errorf("write shard %s: token id %d does not fit a uint16 shard (ids must be below %d)", w.path, id, MaxVocab16)
			}
			binary.LittleEndian.PutUint16(b[2*i:], uint16(id))
		}
		if _, err := w.w.Write(b); err != nil {
			return fmt.Errorf("write shard %s: %w", w.path, err)
		}
		w.n += int64(len(chunk))
		ids = ids[len(chunk):]
	}
	return nil
}

// Close completes the shard: it writes the header, fsyncs, renames the file
// to its final name, and returns the SHA-256 of the whole file, in hex.
// On error the temporary file is removed.
func (w *ShardWriter) Close() (sha string, err error) {
	defer func() {
		if err != nil {
			w.Abort()
			err = fmt.Errorf("write shard %s: %w", w.path, err)
		}
	}()
	if err := w.w.Flush(); err != nil {
		return "", err
	}
	var hdr [ShardHeaderBytes]byte
	binary.LittleEndian.PutUint32(hdr[0:], ShardMagic)
	binary.LittleEndian.PutUint32(hdr[4:], ShardVersion)
	binary.LittleEndian.PutUint32(hdr[8:], uint32(w.n))
	if _, err := w.f.WriteAt(hdr[:], 0); err != nil {
		return "", err
	}
	if err := w.f.Sync(); err != nil {
		return "", fmt.Errorf("sync: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(w.f, 0, ShardHeaderBytes+2*w.n)); err != nil {
		return "", fmt.Errorf("checksum: %w", err)
	}
	if err := w.f.Close(); err != nil {
		return "", fmt.Errorf("close: %w", err)
	}
	w.f = nil
	if err := os.Chmod(w.tmp, 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(w.tmp, w.path); err != nil {
		return "", fmt.Errorf("rename: %w", err)
	}
	syncDir(filepath.Dir(w.path))
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Abort removes the unfinished shard.
func (w *ShardWriter) Abort() {
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	os.Remove(w.tmp)
}

// WriteShard writes ids as an llm.c shard at path, atomically, and returns
// the file's SHA-256 in hex.
func WriteShard(path string, ids []int32) (string, error) {
	w, err := CreateShard(path)
	if err != nil {
		return "", err
	}
	if err := w.Write(ids); err != nil {
		w.Abort()
		return "", err
	}
	return w.Close()
}

// syncDir makes a rename in dir durable, where the system allows.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}
