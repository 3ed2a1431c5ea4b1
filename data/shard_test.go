package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetml/fleet/internal/rng"
)

func randomIDs(n, vocab int, seed uint64) []int32 {
	g := rng.New(seed)
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(g.Intn(vocab))
	}
	return ids
}

func widen(t Tokens) []int32 {
	out := make([]int32, t.Len())
	t.Read(out, 0)
	return out
}

// shardBytes is an llm.c shard built by hand: header words, then tokens.
func shardBytes(magic, version, count int32, toks []uint16) []byte {
	b := make([]byte, ShardHeaderBytes+2*len(toks))
	binary.LittleEndian.PutUint32(b[0:], uint32(magic))
	binary.LittleEndian.PutUint32(b[4:], uint32(version))
	binary.LittleEndian.PutUint32(b[8:], uint32(count))
	for i, v := range toks {
		binary.LittleEndian.PutUint16(b[ShardHeaderBytes+2*i:], v)
	}
	return b
}

// shardBytes32 is shardBytes with uint32 tokens.
func shardBytes32(magic, version, count int32, toks []uint32) []byte {
	b := make([]byte, ShardHeaderBytes+4*len(toks))
	copy(b, shardBytes(magic, version, count, nil))
	for i, v := range toks {
		binary.LittleEndian.PutUint32(b[ShardHeaderBytes+4*i:], v)
	}
	return b
}

func TestShardRoundTrip(t *testing.T) {
	dir := t.TempDir()
	// GPT-2's vocabulary takes uint16 shards; Llama 3's, uint32 ones.
	for _, vocab := range []int{50257, 128256} {
		for _, n := range []int{0, 1, 1000, 100_000} {
			ids := randomIDs(n, vocab, uint64(n))
			p := filepath.Join(dir, "s.bin")
			sha, err := WriteShard(p, vocab, ids)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(p)
			// Byte-exact llm.c layout.
			var want []byte
			if vocab <= MaxVocab16 {
				w := make([]uint16, n)
				for i, id := range ids {
					w[i] = uint16(id)
				}
				want = shardBytes(ShardMagic, ShardVersion, int32(n), w)
			} else {
				w := make([]uint32, n)
				for i, id := range ids {
					w[i] = uint32(id)
				}
				want = shardBytes32(ShardMagic32, ShardVersion32, int32(n), w)
			}
			if !bytes.Equal(b, want) {
				t.Fatalf("vocab %d, n=%d: the %d-byte file is not the llm.c layout", vocab, n, len(b))
			}
			if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sha {
				t.Errorf("vocab %d, n=%d: returned SHA-256 %s is not the file's", vocab, n, sha)
			}
			s, err := OpenShard(p)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Header || !slices.Equal(widen(s.Tokens), ids) {
				t.Errorf("vocab %d, n=%d: read back %d tokens, header %v", vocab, n, s.Tokens.Len(), s.Header)
			}
			if m := MaxID(s.Tokens); n > 0 && m != slices.Max(ids) {
				t.Errorf("vocab %d, n=%d: MaxID %d, want %d", vocab, n, m, slices.Max(ids))
			}
			if s.SHA256() != sha {
				t.Errorf("vocab %d, n=%d: Shard.SHA256 differs", vocab, n)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("folder holds %d files, want just the shard (no temporaries)", len(entries))
	}
}

// TestMaxIDBeyondInt32: a uint32 id above MaxInt32 reads as MaxInt32, so
// the trainer's vocabulary check refuses it.
func TestMaxIDBeyondInt32(t *testing.T) {
	if m := MaxID(Uint32s{3, 1 << 31, 5}); m != math.MaxInt32 {
		t.Errorf("MaxID = %d, want %d", m, math.MaxInt32)
	}
}

func TestShardWriterRejectsIDs(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "s.bin")
	for _, vocab := range []int{50257, 128256} {
		for _, id := range []int32{-1, int32(vocab), 1 << 30} {
			if _, err := WriteShard(p, vocab, []int32{1, id}); err == nil || !strings.Contains(err.Error(), p) ||
				!strings.Contains(err.Error(), fmt.Sprintf("token id %d is not below the vocabulary size %d", id, vocab)) {
				t.Errorf("vocab %d, id %d: err = %v", vocab, id, err)
			}
		}
	}
	for _, vocab := range []int{0, -5} {
		if _, err := CreateShard(p, vocab); err == nil || !strings.Contains(err.Error(), "vocabulary size") {
			t.Errorf("vocab %d: err = %v", vocab, err)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("a failed write left %d files", len(entries))
	}
}

func TestShardErrors(t *testing.T) {
	toks := []uint16{1, 2, 3, 4}
	good := shardBytes(ShardMagic, 1, 4, toks)
	for _, tc := range []struct {
		name string
		b    []byte
		raw  bool
		want string
	}{
		{"empty", nil, false, "empty"},
		{"empty raw", nil, true, "empty"},
		{"bad magic", shardBytes(12345, 1, 4, toks), false, "bad magic number 12345"},
		{"bad magic, header shaped", shardBytes(12345, 1, 4, toks), true, "bad magic number 12345"},
		{"short", []byte{1, 2}, false, "too short"},
		{"truncated header", good[:100], false, "truncated header"},
		{"truncated body", good[:len(good)-3], false, "truncated body: the header counts 4 tokens"},
		{"truncated body raw", good[:len(good)-2], true, "truncated body"},
		{"extra bytes", append(slices.Clone(good), 0, 0), false, "2 bytes after the 4 tokens"},
		{"version 2", shardBytes(ShardMagic, 2, 4, toks), false, "version 2 with magic number 20240520, want 1"},
		{"version 7", shardBytes(ShardMagic, 7, 4, toks), false, "version 7 with magic number 20240520, want 1"},
		{"uint32 version 1", shardBytes32(ShardMagic32, 1, 2, []uint32{1, 2}), false, "version 1 with magic number 20240801, want 7"},
		{"uint32 truncated body", shardBytes32(ShardMagic32, 7, 3, []uint32{1, 2}), false, "the header counts 3 tokens (12 bytes)"},
		{"uint32 bad magic, header shaped", shardBytes32(12345, 7, 2, []uint32{1, 2}), true, "bad magic number 12345 (want 20240801)"},
		{"negative count", shardBytes(ShardMagic, 1, -4, toks), false, "negative token count"},
		{"odd raw", []byte{1, 2, 3}, true, "odd size"},
	} {
		_, _, err := ParseShard("dir/x.bin", tc.b, tc.raw)
		if err == nil || !strings.Contains(err.Error(), "dir/x.bin") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming the file and %q", tc.name, err, tc.want)
		}
	}
	// Through files: missing, a folder.
	dir := t.TempDir()
	missing := filepath.Join(dir, "nope.bin")
	if _, err := OpenShard(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing: err = %v", err)
	}
	if _, err := OpenShard(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("folder: err = %v", err)
	}
	empty := filepath.Join(dir, "empty.bin")
	os.WriteFile(empty, nil, 0o644)
	if _, err := OpenTokenFile(empty); err == nil || !strings.Contains(err.Error(), empty+": empty") {
		t.Errorf("empty file: err = %v", err)
	}
}

func TestRawTokenFile(t *testing.T) {
	dir := t.TempDir()
	ids := randomIDs(5001, 65, 1)
	b := make([]byte, 2*len(ids))
	for i, id := range ids {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(id))
	}
	p := filepath.Join(dir, "train.bin")
	os.WriteFile(p, b, 0o644)
	s, err := OpenTokenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Header || !slices.Equal(widen(s.Tokens), ids) {
		t.Errorf("raw file read as %d tokens, header %v", s.Tokens.Len(), s.Header)
	}
	if _, err := OpenShard(p); err == nil || !strings.Contains(err.Error(), "bad magic number") {
		t.Errorf("OpenShard on a raw file: err = %v", err)
	}
	// An llm.c shard through OpenTokenFile keeps its header.
	q := filepath.Join(dir, "shard.bin")
	WriteShard(q, 65, ids)
	s2, err := OpenTokenFile(q)
	if err != nil || !s2.Header || !slices.Equal(widen(s2.Tokens), ids) {
		t.Errorf("shard through OpenTokenFile: %v", err)
	}
	s2.Close()
}

// FuzzParseShard: on any bytes the reader returns tokens or an error that
// names the file; it never panics, and what it accepts is consistent with
// the size.
func FuzzParseShard(f *testing.F) {
	f.Add(shardBytes(ShardMagic, 1, 2, []uint16{7, 9}), false)
	f.Add(shardBytes(ShardMagic, 1, 3, []uint16{7, 9}), true)
	f.Add(shardBytes(ShardMagic, 2, 2, []uint16{7, 9}), false)
	f.Add(shardBytes(1, 1, 2, []uint16{7, 9}), true)
	f.Add(shardBytes32(ShardMagic32, 7, 2, []uint32{7, 1 << 20}), false)
	f.Add([]byte{1, 0, 2, 0}, true)
	f.Add([]byte{1}, false)
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, b []byte, raw bool) {
		toks, header, err := ParseShard("fuzz.bin", b, raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "token file fuzz.bin: ") || len(err.Error()) < len("token file fuzz.bin: ")+5 {
				t.Fatalf("error %q does not name the file and the problem", err)
			}
			return
		}
		switch {
		case header && ShardHeaderBytes+2*toks.Len() != len(b) && ShardHeaderBytes+4*toks.Len() != len(b):
			t.Fatalf("%d tokens with a header from %d bytes", toks.Len(), len(b))
		case !header && (!raw || 2*toks.Len() != len(b)):
			t.Fatalf("%d raw tokens from %d bytes (raw %v)", toks.Len(), len(b), raw)
		}
		if toks.Len() > 0 {
			dst := make([]int32, toks.Len())
			toks.Read(dst, 0)
			off := 0
			if header {
				off = ShardHeaderBytes
			}
			width := len(b[off:]) / toks.Len()
			last := int32(binary.LittleEndian.Uint16(b[off+2*(toks.Len()-1):]))
			if width == 4 {
				last = int32(binary.LittleEndian.Uint32(b[off+4*(toks.Len()-1):]))
			}
			if dst[len(dst)-1] != last {
				t.Fatalf("last token %d, bytes say %d", dst[len(dst)-1], last)
			}
		}
	})
}

func TestConcatRead(t *testing.T) {
	flat := randomIDs(1000, 1000, 3)
	var parts []Tokens
	for lo := 0; lo < len(flat); {
		hi := min(len(flat), lo+1+int(flat[lo])%97)
		u := make(Uint16s, hi-lo)
		for i := range u {
			u[i] = uint16(flat[lo+i])
		}
		parts = append(parts, u, Int32s{}) // empty parts in between too
		lo = hi
	}
	c := NewConcat(parts...)
	if c.Len() != len(flat) {
		t.Fatalf("Len %d, want %d", c.Len(), len(flat))
	}
	g := rng.New(9)
	for range 2000 {
		off := g.Intn(len(flat))
		n := g.Intn(len(flat) - off + 1)
		dst := make([]int32, n)
		c.Read(dst, off)
		if !slices.Equal(dst, flat[off:off+n]) {
			t.Fatalf("Read(%d, %d) differs", off, n)
		}
	}
	if MaxID(c) != slices.Max(flat) || MaxID(Int32s(flat)) != slices.Max(flat) || MaxID(Int32s{}) != -1 {
		t.Errorf("MaxID = %d, want %d", MaxID(c), slices.Max(flat))
	}
	train, val := SplitTokens(c)
	tr, va := Split(flat)
	a, b := make([]int32, train.Len()), make([]int32, val.Len())
	train.Read(a, 0)
	val.Read(b, 0)
	if !slices.Equal(a, tr) || !slices.Equal(b, va) {
		t.Error("SplitTokens differs from Split")
	}
}

// TestSamplerOverShards: the windows drawn from shards are those drawn from
// the same ids in memory, also where a window straddles two shards.
func TestSamplerOverShards(t *testing.T) {
	flat := randomIDs(3000, 65, 4)
	var parts []Tokens
	for lo := 0; lo < len(flat); lo += 70 {
		hi := min(len(flat), lo+70)
		u := make(Uint16s, hi-lo)
		for i := range u {
			u[i] = uint16(flat[lo+i])
		}
		parts = append(parts, u)
	}
	a, _ := NewSampler(flat, 32, 5, StreamTrain)
	b, _ := NewTokenSampler(NewConcat(parts...), 32, 5, StreamTrain)
	for step := range 20 {
		xa, ya := batch(a, step, 0, 16)
		xb, yb := batch(b, step, 0, 16)
		if !slices.Equal(xa, xb) || !slices.Equal(ya, yb) {
			t.Fatalf("step %d: windows from shards differ from those in memory", step)
		}
	}
}
