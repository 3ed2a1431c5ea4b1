package data

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pairTok is a stand-in for a BPE tokenizer: bytes are their own ids,
// except that "ab" is one token, 256, and id 257 is end-of-text. A chunk
// can be cut after any byte but 'a'.
type pairTok struct{ vocab int }

func (pairTok) Encode(text string) ([]int32, error) {
	var ids []int32
	for i := 0; i < len(text); i++ {
		if text[i] == 'a' && i+1 < len(text) && text[i+1] == 'b' {
			ids = append(ids, 256)
			i++
			continue
		}
		ids = append(ids, int32(text[i]))
	}
	return ids, nil
}

func (pairTok) Decode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		switch {
		case id == 256:
			b = append(b, "ab"...)
		case id >= 0 && id < 256:
			b = append(b, byte(id))
		default:
			b = append(b, "\uFFFD"...)
		}
	}
	return string(b)
}

func (t pairTok) Size() int {
	if t.vocab != 0 {
		return t.vocab
	}
	return 258
}
func (pairTok) EOT() (int32, bool) { return 257, true }
func (pairTok) Spec() string       { return "pair:test" }

func pairBoundary(b []byte) int {
	q := len(b)
	for q > 0 && b[q-1] == 'a' {
		q--
	}
	return q
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readAll(t Tokens) []int32 {
	out := make([]int32, t.Len())
	t.Read(out, 0)
	return out
}

func openPrepared(t *testing.T, dir string) *Prepared {
	t.Helper()
	p, err := OpenPrepared(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.Verify(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPrepareChar: with the character tokenizer built from the inputs, the
// shards hold exactly the ids of the concatenated text, split as Split
// splits them, whatever the chunk and shard sizes; and the loader draws
// from them exactly the windows the sampler draws from the ids in memory.
func TestPrepareChar(t *testing.T) {
	in := t.TempDir()
	var text strings.Builder
	for i := 0; text.Len() < 50_000; i++ {
		fmt.Fprintf(&text, "line %d: the quick brown fox, %d jumps.\n", i, i*i)
	}
	full := text.String()
	writeFiles(t, in, map[string]string{"b/part2.txt": full[20000:], "a/part1.txt": full[:20000], ".hidden": "ignored", "c/empty.txt": ""})
	want := NewChar(full)
	c, err := CharVocab([]string{in}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.chars, want.chars) {
		t.Fatalf("CharVocab = %q, want %q", string(c.chars), string(want.chars))
	}
	ids, _ := want.Encode(full)
	wantTrain, wantVal := Split(ids)
	for _, tc := range []struct{ chunk, shard, workers int }{{1 << 20, 0, 1}, {100, 7000, 3}, {3, 100_000, 2}} {
		out := filepath.Join(t.TempDir(), "out")
		man, err := Prepare(PrepareConfig{Tokenizer: c.WithSpec("char:tokenizer.json"), Inputs: []string{in}, Out: out,
			ValFraction: 0.1, ShardTokens: tc.shard, ChunkBytes: tc.chunk, Workers: tc.workers})
		if err != nil {
			t.Fatal(err)
		}
		if man.Documents != 2 || man.InputBytes != int64(len(full)) || man.VocabSize != c.Size() || man.EOT != nil {
			t.Errorf("manifest %+v", man)
		}
		p := openPrepared(t, out)
		if !slices.Equal(readAll(p.Train), wantTrain) || !slices.Equal(readAll(p.Val), wantVal) {
			t.Fatalf("chunk %d, shard %d: shards hold %d+%d tokens, not the %d+%d of the text",
				tc.chunk, tc.shard, p.Train.Len(), p.Val.Len(), len(wantTrain), len(wantVal))
		}
		if tc.shard == 7000 && len(man.Train.Shards) != (len(wantTrain)+6999)/7000 {
			t.Errorf("%d train shards of 7000 for %d tokens", len(man.Train.Shards), len(wantTrain))
		}
		if p.Manifest.Tokenizer != "char:tokenizer.json" {
			t.Errorf("manifest tokenizer %s", p.Manifest.Tokenizer)
		}
		// The manifest on disk is the one returned.
		var onDisk Manifest
		b, _ := os.ReadFile(filepath.Join(out, ManifestFile))
		if err := json.Unmarshal(b, &onDisk); err != nil || onDisk.Train.Tokens != man.Train.Tokens {
			t.Errorf("manifest on disk: %v", err)
		}

		// The loader over the shards draws the sampler's windows over the ids.
		s, _ := NewSampler(wantTrain, 32, 9, StreamTrain)
		l := newLoader(t, p.Train, 32, 9, LoaderConfig{Batch: 4, Accum: 2, Workers: 2, Vocab: man.VocabSize})
		got, _ := drawAll(t, l, 0, 5)
		var wantX []int32
		for step := range 5 {
			for m := range 2 {
				x, _ := batch(s, step, MicroBatchFirst(4, 2, 0, m), 4)
				wantX = append(wantX, x...)
			}
		}
		if !slices.Equal(got, wantX) {
			t.Fatal("loader over prepared shards differs from the sampler over the ids")
		}
	}
}

// TestPrepareNonASCII: multi-byte characters cut anywhere by the chunks
// still encode exactly.
func TestPrepareNonASCII(t *testing.T) {
	in := t.TempDir()
	full := strings.Repeat("héllo wörld, 日本語 🙂\n", 500) + "\xff\xfe invalid bytes"
	writeFiles(t, in, map[string]string{"x.txt": full})
	c, err := CharVocab([]string{filepath.Join(in, "x.txt")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.chars, NewChar(full).chars) {
		t.Fatalf("CharVocab = %q", string(c.chars))
	}
	ids, _ := c.Encode(full)
	for _, chunk := range []int{1, 2, 5, 4096} {
		out := t.TempDir()
		if _, err := Prepare(PrepareConfig{Tokenizer: c.WithSpec("char:v"), Inputs: []string{in}, Out: out, ValFraction: 0.25, ChunkBytes: chunk}); err != nil {
			t.Fatal(err)
		}
		p := openPrepared(t, out)
		if got := append(readAll(p.Train), readAll(p.Val)...); !slices.Equal(got, ids) {
			t.Fatalf("chunk %d: tokens differ from the text's", chunk)
		}
		if f := float64(p.Val.Len()) / float64(len(ids)); f < 0.2 || f > 0.3 {
			t.Errorf("chunk %d: val holds %.3f of the tokens, want about 0.25", chunk, f)
		}
	}
}

// TestPrepareDocuments: with a tokenizer that merges across bytes, chunks
// cut only at boundaries, so the ids are those of each document encoded
// whole, with end-of-text between documents; the result does not depend
// on the chunk size or the number of workers.
func TestPrepareDocuments(t *testing.T) {
	in := t.TempDir()
	docs := map[string]string{
		"1.txt": strings.Repeat("abcab aab ", 300),
		"2.txt": strings.Repeat("a", 5000) + "b" + strings.Repeat("xyab", 100), // a run longer than the chunk
		"3.txt": "ab",
	}
	writeFiles(t, in, docs)
	var want []int32
	for i, name := range []string{"1.txt", "2.txt", "3.txt"} {
		if i > 0 {
			want = append(want, 257)
		}
		ids, _ := pairTok{}.Encode(docs[name])
		want = append(want, ids...)
	}
	// A vocabulary beyond 16 bits (ids as before): uint32 shards, the same
	// tokens read back.
	wideOut := t.TempDir()
	if _, err := Prepare(PrepareConfig{Tokenizer: pairTok{vocab: 128256}, Boundary: pairBoundary, Inputs: []string{in}, Out: wideOut,
		ValFraction: 0.3, ShardTokens: 1000}); err != nil {
		t.Fatal(err)
	}
	wide := openPrepared(t, wideOut)
	if got := append(readAll(wide.Train), readAll(wide.Val)...); !slices.Equal(got, want) {
		t.Fatalf("uint32 shards: %d tokens differ from the documents encoded whole (%d)", len(got), len(want))
	}
	if b, _ := os.ReadFile(filepath.Join(wideOut, "train_000000.bin")); len(b) != ShardHeaderBytes+4*1000 ||
		binary.LittleEndian.Uint32(b) != ShardMagic32 {
		t.Errorf("a 128,256-id vocabulary's shard is %d bytes, magic %d: want uint32 tokens", len(b), binary.LittleEndian.Uint32(b))
	}
	var first *Manifest
	for _, tc := range []struct{ chunk, workers int }{{1 << 20, 1}, {64, 1}, {7, 4}, {1, 2}} {
		for _, f := range []float64{0, 0.3} {
			out := t.TempDir()
			man, err := Prepare(PrepareConfig{Tokenizer: pairTok{}, Boundary: pairBoundary, Inputs: []string{in}, Out: out,
				ValFraction: f, ChunkBytes: tc.chunk, Workers: tc.workers, ShardTokens: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if man.EOT == nil || *man.EOT != 257 || man.Tokenizer != "pair:test" {
				t.Errorf("manifest EOT %v, tokenizer %s", man.EOT, man.Tokenizer)
			}
			p := openPrepared(t, out)
			got := append(readAll(p.Train), readAll(p.Val)...)
			if !slices.Equal(got, want) {
				t.Fatalf("chunk %d, workers %d, val %v: %d tokens differ from the documents encoded whole (%d)",
					tc.chunk, tc.workers, f, len(got), len(want))
			}
			if f == 0 && p.Val.Len() != 0 {
				t.Errorf("val fraction 0 gave %d val tokens", p.Val.Len())
			}
			if f == 0.3 {
				if first == nil {
					first = man
				} else if man.Train.Tokens != first.Train.Tokens {
					t.Errorf("chunk %d: the val cut moved (%d train tokens, %d before)", tc.chunk, man.Train.Tokens, first.Train.Tokens)
				}
			}
		}
	}
}

func TestPrepareBadInput(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"good.txt": "hello world\n", "empty.txt": "", "emptydir/e.txt": "", "plain": "x", "ω.txt": "ωω"})
	os.Mkdir(filepath.Join(dir, "nofiles"), 0o755)
	good := filepath.Join(dir, "good.txt")
	c := NewChar("hello world\n")
	enc := c.WithSpec("char:v")
	out := filepath.Join(dir, "out")
	for _, tc := range []struct {
		name string
		cfg  PrepareConfig
		want string
	}{
		{"missing", PrepareConfig{Tokenizer: enc, Inputs: []string{filepath.Join(dir, "nope.txt")}, Out: out}, "nope.txt: no such file"},
		{"empty file", PrepareConfig{Tokenizer: enc, Inputs: []string{good, filepath.Join(dir, "empty.txt")}, Out: out}, "empty.txt: empty"},
		{"folder of empty files", PrepareConfig{Tokenizer: enc, Inputs: []string{filepath.Join(dir, "emptydir")}, Out: out}, "emptydir: the folder holds no files with any bytes"},
		{"folder with no files", PrepareConfig{Tokenizer: enc, Inputs: []string{filepath.Join(dir, "nofiles")}, Out: out}, "nofiles: folder has no files"},
		{"no inputs", PrepareConfig{Tokenizer: enc, Out: out}, "no input files"},
		{"no vocabulary", PrepareConfig{Tokenizer: pairTok{vocab: -1}, Inputs: []string{good}, Out: out}, "pair:test has a vocabulary of -1, not in [1, 2147483647]"},
		{"unwritable out", PrepareConfig{Tokenizer: enc, Inputs: []string{good}, Out: filepath.Join(dir, "plain", "out")}, "plain/out"},
		{"character outside the vocabulary", PrepareConfig{Tokenizer: enc, Inputs: []string{good, filepath.Join(dir, "ω.txt")}, Out: out}, "ω.txt: tokenizer char:v cannot encode it"},
		{"val fraction", PrepareConfig{Tokenizer: enc, Inputs: []string{good}, Out: out, ValFraction: 1}, "val fraction 1 is not in [0, 1)"},
		{"shard size", PrepareConfig{Tokenizer: enc, Inputs: []string{good}, Out: out, ShardTokens: -5}, "shard size -5"},
		{"input inside out", PrepareConfig{Tokenizer: enc, Inputs: []string{good}, Out: dir}, "good.txt is inside the output folder"},
	} {
		_, err := Prepare(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	// Failed runs leave no shards or temporaries behind.
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("failed runs left %d files in --out", len(entries))
	}
	if _, err := CharVocab([]string{filepath.Join(dir, "empty.txt")}, nil); err == nil || !strings.Contains(err.Error(), "empty.txt: empty") {
		t.Errorf("CharVocab of an empty file: %v", err)
	}
}

// TestPrepareReplaces: preparing into the same folder again leaves only
// the new shards (and the files Prepare was given).
func TestPrepareReplaces(t *testing.T) {
	in := t.TempDir()
	writeFiles(t, in, map[string]string{"x.txt": strings.Repeat("abc def\n", 1000)})
	out := t.TempDir()
	c, _ := CharVocab([]string{in}, nil)
	cfg := PrepareConfig{Tokenizer: c.WithSpec("char:v"), Inputs: []string{in}, Out: out, ValFraction: 0.1, ShardTokens: 500}
	if _, err := Prepare(cfg); err != nil {
		t.Fatal(err)
	}
	cfg.ShardTokens = 0
	cfg.Files = map[string][]byte{"tokenizer.json": []byte("{}\n")}
	man, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(out)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{ManifestFile, "tokenizer.json", "train_000000.bin", "val_000000.bin"}) || len(man.Train.Shards) != 1 {
		t.Errorf("folder holds %v", names)
	}
}

func TestOpenPreparedErrors(t *testing.T) {
	in := t.TempDir()
	writeFiles(t, in, map[string]string{"x.txt": strings.Repeat("abc def\n", 1000)})
	c, _ := CharVocab([]string{in}, nil)
	prep := func() string {
		out := t.TempDir()
		if _, err := Prepare(PrepareConfig{Tokenizer: c.WithSpec("char:v"), Inputs: []string{in}, Out: out, ValFraction: 0.1}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	edit := func(dir string, fn func(m *Manifest)) {
		p := filepath.Join(dir, ManifestFile)
		b, _ := os.ReadFile(p)
		var m Manifest
		json.Unmarshal(b, &m)
		fn(&m)
		b, _ = json.Marshal(m)
		os.WriteFile(p, b, 0o644)
	}
	for _, tc := range []struct {
		name string
		fn   func(dir string)
		want string
	}{
		{"truncated shard", func(d string) { os.Truncate(filepath.Join(d, "train_000000.bin"), 2000) }, "train_000000.bin: truncated body"},
		{"missing shard", func(d string) { os.Remove(filepath.Join(d, "val_000000.bin")) }, "val_000000.bin: no such file"},
		{"count mismatch", func(d string) { edit(d, func(m *Manifest) { m.Train.Shards[0].Tokens++ }) }, "but manifest"},
		{"bad format", func(d string) { edit(d, func(m *Manifest) { m.Format = "other" }) }, `format "other"`},
		{"bad vocabulary", func(d string) { edit(d, func(m *Manifest) { m.VocabSize = -3 }) }, "vocabulary size -3"},
		{"vocabulary of another width", func(d string) { edit(d, func(m *Manifest) { m.VocabSize = 70000 }) }, "holds uint16 tokens, but manifest"},
		{"escaping name", func(d string) { edit(d, func(m *Manifest) { m.Val.Shards[0].File = "../x.bin" }) }, "is not a file in the folder"},
		{"not json", func(d string) { os.WriteFile(filepath.Join(d, ManifestFile), []byte("{"), 0o644) }, "manifest"},
	} {
		d := prep()
		tc.fn(d)
		p, err := OpenPrepared(d)
		if err == nil {
			p.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), d) {
			t.Errorf("%s: err = %v, want %q and the folder", tc.name, err, tc.want)
		}
	}
	// A changed shard of the right size passes Open but fails Verify.
	d := prep()
	f := filepath.Join(d, "train_000000.bin")
	b, _ := os.ReadFile(f)
	b[len(b)-1] ^= 1
	os.WriteFile(f, b, 0o644)
	p, err := OpenPrepared(d)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Verify(); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("Verify of a changed shard: %v", err)
	}
}

func TestTokenFiles(t *testing.T) {
	dir := t.TempDir()
	trainIDs, valIDs := randomIDs(3000, 65, 1), randomIDs(400, 65, 2)
	raw := func(name string, ids []int32) {
		b := make([]byte, 2*len(ids))
		for i, id := range ids {
			b[2*i], b[2*i+1] = byte(id), byte(id>>8)
		}
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	raw("train.bin", trainIDs)
	raw("val.bin", valIDs)
	os.WriteFile(filepath.Join(dir, "meta.pkl"), []byte("not read"), 0o644)
	if !IsTokenData(dir) || !IsTokenData(filepath.Join(dir, "train.bin")) || IsTokenData(filepath.Join(dir, "meta.pkl")) {
		t.Error("IsTokenData")
	}
	train, val, files, err := TokenFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(readAll(train), trainIDs) || !slices.Equal(readAll(val), valIDs) || len(files) != 2 {
		t.Error("nanoGPT folder read wrong")
	}
	for _, f := range files {
		f.Close()
	}
	// llm.c names, several shards, headers.
	d2 := t.TempDir()
	WriteShard(filepath.Join(d2, "tiny_train_000002.bin"), MaxVocab16, trainIDs[1000:])
	WriteShard(filepath.Join(d2, "tiny_train_000001.bin"), MaxVocab16, trainIDs[:1000])
	WriteShard(filepath.Join(d2, "tiny_val_000000.bin"), MaxVocab16, valIDs)
	train, val, files, err = TokenFiles(d2)
	if err != nil || !slices.Equal(readAll(train), trainIDs) || !slices.Equal(readAll(val), valIDs) {
		t.Errorf("llm.c folder: %v", err)
	}
	for _, f := range files {
		f.Close()
	}
	// One file: split 90/10.
	train, val, files, err = TokenFiles(filepath.Join(dir, "train.bin"))
	if err != nil {
		t.Fatal(err)
	}
	tr, va := Split(trainIDs)
	if !slices.Equal(readAll(train), tr) || !slices.Equal(readAll(val), va) {
		t.Error("single file split wrong")
	}
	files[0].Close()
	// A folder without val files.
	os.Remove(filepath.Join(dir, "val.bin"))
	if _, _, _, err := TokenFiles(dir); err == nil || !strings.Contains(err.Error(), "*val*") {
		t.Errorf("no val files: %v", err)
	}
}
