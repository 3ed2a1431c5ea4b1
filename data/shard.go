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

// The llm.c token shard formats: a header of ShardHeaderInts little-endian
// int32 (the magic number, the version, the token count, then zeros),
// followed by the tokens, little-endian: uint16 in GPT-2's format
// (ShardMagic, ShardVersion), uint32 in Llama 3's (ShardMagic32,
// ShardVersion32), for vocabularies of more than MaxVocab16 ids.
const (
	ShardMagic       = 20240520
	ShardVersion     = 1
	ShardMagic32     = 20240801
	ShardVersion32   = 7
	ShardHeaderInts  = 256
	ShardHeaderBytes = 4 * ShardHeaderInts
	// MaxShardTokens is the most tokens one shard holds: the count is an
	// int32.
	MaxShardTokens = math.MaxInt32
	// MaxVocab16 is the largest vocabulary uint16 shards can hold; larger
	// ones are written as uint32 shards.
	MaxVocab16 = 65535
	// MaxVocab is the largest vocabulary a shard can hold: ids are int32
	// once read.
	MaxVocab = math.MaxInt32
)

// shardFormat is one of the two shard layouts.
type shardFormat struct {
	magic, version int64
	width          int // bytes per token
}

var (
	format16 = shardFormat{ShardMagic, ShardVersion, 2}
	format32 = shardFormat{ShardMagic32, ShardVersion32, 4}
)

// formatFor returns the layout for a vocabulary of vocab ids.
func formatFor(vocab int) shardFormat {
	if vocab > MaxVocab16 {
		return format32
	}
	return format16
}

// Shard is a token file opened for reading, memory-mapped where the system
// allows (else read into memory): an llm.c shard of either width, or a raw
// nanoGPT file of uint16 ids with no header.
type Shard struct {
	Path   string
	Tokens Tokens // the ids (Uint16s or Uint32s), read in place from the mapping
	Header bool   // whether the file has an llm.c header
	mem    []byte // the whole file
	unmap  func() error
}

// OpenShard opens an llm.c shard: the header is required.
func OpenShard(path string) (*Shard, error) { return openShard(path, false) }

// OpenTokenFile opens an llm.c shard or, when the file does not start with
// an llm.c magic number, a raw nanoGPT file of uint16 ids.
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
// errors. With raw false an llm.c header is required; with raw true a file
// that does not start with either magic number is read as raw uint16 ids.
// The tokens (Uint16s or Uint32s) share b's memory where b is suitably
// aligned and the machine is little-endian. It never panics; errors name
// the file and the problem.
func ParseShard(name string, b []byte, raw bool) (tokens Tokens, header bool, err error) {
	fail := func(format string, args ...any) (Tokens, bool, error) {
		return nil, false, fmt.Errorf("token file %s: "+format, append([]any{name}, args...)...)
	}
	if len(b) == 0 {
		return fail("empty")
	}
	le := binary.LittleEndian
	word := func(i int) int64 { return int64(int32(le.Uint32(b[4*i:]))) }
	var f shardFormat
	switch {
	case len(b) >= 4 && word(0) == ShardMagic:
		f = format16
	case len(b) >= 4 && word(0) == ShardMagic32:
		f = format32
	case raw:
		// A file laid out as an llm.c shard whose magic number is wrong is
		// a damaged shard, not raw ids.
		for _, g := range []shardFormat{format16, format32} {
			if len(b) >= ShardHeaderBytes && word(1) == g.version && word(2) >= 0 &&
				int64(len(b)) == ShardHeaderBytes+int64(g.width)*word(2) && allZero(b[12:ShardHeaderBytes]) {
				return fail("bad magic number %d (want %d) in an llm.c shard header", word(0), g.magic)
			}
		}
		if len(b)%2 != 0 {
			return fail("%d bytes, an odd size: raw token files hold 2-byte (uint16) ids", len(b))
		}
		return view[uint16](b), false, nil
	case len(b) < 4:
		return fail("%d bytes, too short for an llm.c shard header (%d bytes)", len(b), ShardHeaderBytes)
	default:
		return fail("bad magic number %d (want %d, or %d for uint32 tokens): not an llm.c token shard", word(0), ShardMagic, ShardMagic32)
	}
	if len(b) < ShardHeaderBytes {
		return fail("truncated header: %d bytes, want %d", len(b), ShardHeaderBytes)
	}
	if v := word(1); v != f.version {
		return fail("shard version %d with magic number %d, want %d", v, f.magic, f.version)
	}
	n := word(2)
	if n < 0 {
		return fail("header has a negative token count %d", n)
	}
	body, size := int64(len(b)-ShardHeaderBytes), int64(f.width)*n
	switch {
	case body < size:
		return fail("truncated body: the header counts %d tokens (%d bytes) but the file holds %d bytes of tokens", n, size, body)
	case body > size:
		return fail("%d bytes after the %d tokens the header counts", body-size, n)
	}
	if f.width == 4 {
		return view[uint32](b[ShardHeaderBytes:]), true, nil
	}
	return view[uint16](b[ShardHeaderBytes:]), true, nil
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

// view returns b's little-endian values of T, in place when b is aligned
// and the machine little-endian, else as a copy.
func view[T uint16 | uint32](b []byte) Uints[T] {
	size := int(unsafe.Sizeof(T(0)))
	n := len(b) / size
	if n == 0 {
		return Uints[T]{}
	}
	if littleEndian && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(size) == 0 {
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
	}
	t := make(Uints[T], n)
	for i := range t {
		if size == 2 {
			t[i] = T(binary.LittleEndian.Uint16(b[2*i:]))
		} else {
			t[i] = T(binary.LittleEndian.Uint32(b[4*i:]))
		}
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
	format    shardFormat
	vocab     int
}

// CreateShard starts a shard that Close will leave at path, for ids below
// vocab: uint16 tokens when vocab is at most MaxVocab16, else uint32.
func CreateShard(path string, vocab int) (*ShardWriter, error) {
	if vocab <= 0 || vocab > MaxVocab {
		return nil, fmt.Errorf("write shard %s: vocabulary size %d is not in [1, %d]", path, vocab, MaxVocab)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	w := &ShardWriter{path: path, tmp: f.Name(), f: f, w: bufio.NewWriterSize(f, 1<<20), buf: make([]byte, 0, 1<<16),
		format: formatFor(vocab), vocab: vocab}
	if _, err := w.w.Write(make([]byte, ShardHeaderBytes)); err != nil { // the header goes in at Close
		w.Abort()
		return nil, fmt.Errorf("write shard %s: %w", path, err)
	}
	return w, nil
}

// Len returns the number of tokens written so far.
func (w *ShardWriter) Len() int { return int(w.n) }

// Write appends ids. Every id must be in [0, vocab).
func (w *ShardWriter) Write(ids []int32) error {
	if w.n+int64(len(ids)) > MaxShardTokens {
		return fmt.Errorf("write shard %s: more than %d tokens", w.path, MaxShardTokens)
	}
	width := w.format.width
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), cap(w.buf)/width)]
		b := w.buf[:width*len(chunk)]
		for i, id := range chunk {
			if id < 0 || int(id) >= w.vocab {
				return fmt.Errorf("write shard %s: token id %d is not below the vocabulary size %d", w.path, id, w.vocab)
			}
			if width == 2 {
				binary.LittleEndian.PutUint16(b[2*i:], uint16(id))
			} else {
				binary.LittleEndian.PutUint32(b[4*i:], uint32(id))
			}
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
	binary.LittleEndian.PutUint32(hdr[0:], uint32(w.format.magic))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(w.format.version))
	binary.LittleEndian.PutUint32(hdr[8:], uint32(w.n))
	if _, err := w.f.WriteAt(hdr[:], 0); err != nil {
		return "", err
	}
	if err := w.f.Sync(); err != nil {
		return "", fmt.Errorf("sync: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(w.f, 0, ShardHeaderBytes+int64(w.format.width)*w.n)); err != nil {
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

// WriteShard writes ids, each below vocab, as an llm.c shard at path,
// atomically, and returns the file's SHA-256 in hex.
func WriteShard(path string, vocab int, ids []int32) (string, error) {
	w, err := CreateShard(path, vocab)
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
