package tokenizer

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func sampleText(tb testing.TB) []byte {
	tb.Helper()
	b, err := os.ReadFile("../testdata/gpt2_sample.txt")
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

var sampleBPE = sync.OnceValues(func() (*BPE, error) {
	b, err := os.ReadFile("../testdata/gpt2_sample.txt")
	if err != nil {
		return nil, err
	}
	return TrainBPEText(600, b, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 20)))
})

func trained(tb testing.TB) *BPE {
	tb.Helper()
	t, err := sampleBPE()
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// The classic example: in "aaabdaaabac" the pair "aa" is most frequent.
// Within pre-tokens only, so the words are separated by spaces here.
func TestTrainSmall(t *testing.T) {
	bpe, err := TrainBPEText(260, []byte("aaabdaaabac"))
	if err != nil {
		t.Fatal(err)
	}
	// Counts: aa 4, ab 2, the others 1 -> aa; then in
	// [aa a b d aa a b a c]: (aa a) 2 and (a b) 2 tie, and ties go to the
	// smaller first id: (97 98) "ab" before (256 97) "aaa"; then
	// (aa ab) 2.
	want := []string{"aa", "ab", "aaab"}
	for i, m := range bpe.Merges() {
		if got := string(bpe.Token(m.ID)); got != want[i] {
			t.Errorf("merge %d makes %q, want %q", i, got, want[i])
		}
	}
	if got := bpe.encode([]byte("aaabdaaabac")); len(got) != 5 || got[0] != 258 || got[2] != 258 {
		t.Errorf("Encode = %v, want [258 100 258 97 99]", got)
	}
	if id, ok := bpe.EOT(); !ok || id != 259 || bpe.Size() != 260 {
		t.Errorf("EOT %d %v, Size %d", id, ok, bpe.Size())
	}
}

func TestTrainErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.txt")
	os.WriteFile(empty, nil, 0o644)
	small := filepath.Join(dir, "small.txt")
	os.WriteFile(small, []byte("ab ab"), 0o644)
	for _, c := range []struct {
		inputs []string
		n      int
		want   string
	}{
		{[]string{small}, 256, "out of range"},
		{[]string{small}, 65536, "out of range"},
		{nil, 300, "no input files"},
		{[]string{empty}, 300, empty + " is empty"},
		{[]string{filepath.Join(dir, "missing.txt")}, 300, "missing.txt: no such file"},
		{[]string{small}, 300, "a vocabulary of 259 is the most"},
	} {
		_, err := TrainBPE(c.inputs, c.n)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("TrainBPE(%q, %d) error %v, want %q", c.inputs, c.n, err, c.want)
		}
	}
}

func TestTrainDeterministic(t *testing.T) {
	text := sampleText(t)
	a, err := TrainBPEText(700, text)
	if err != nil {
		t.Fatal(err)
	}
	b, err := TrainBPEText(700, text)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size() != 700 || len(a.Merges()) != 700-257 {
		t.Fatalf("vocab %d with %d merges", a.Size(), len(a.Merges()))
	}
	for i := range a.Merges() {
		if a.Merges()[i] != b.Merges()[i] {
			t.Fatalf("merge %d differs between runs: %v, %v", i, a.Merges()[i], b.Merges()[i])
		}
	}
	ids := a.encode(text)
	if back := a.Decode(ids); back != string(text) {
		t.Fatalf("round trip fails")
	}
	if r := float64(len(ids)) / float64(len(text)); r > 0.5 {
		t.Errorf("%d tokens for %d bytes of the text trained on: ratio %.3f", len(ids), len(text), r)
	}
}

// At vocabulary 1024, BPE trained on tinyshakespeare needs fewer than half
// as many tokens as bytes, on text it did not see.
func TestTrainCompresses(t *testing.T) {
	text := tinyShakespeare(t)
	cut := len(text) * 9 / 10
	for text[cut] != '\n' {
		cut++
	}
	dir := t.TempDir()
	train := filepath.Join(dir, "train.txt")
	if err := os.WriteFile(train, text[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	bpe, err := TrainBPE([]string{train}, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if bpe.Size() != 1024 {
		t.Fatalf("Size %d", bpe.Size())
	}
	val := text[cut:]
	ids := bpe.encode(val)
	r := float64(len(ids)) / float64(len(val))
	t.Logf("held-out text: %d bytes, %d tokens (%.3f tokens/byte)", len(val), len(ids), r)
	if r >= 0.5 {
		t.Errorf("tokens/bytes %.3f, want < 0.5", r)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= 1023 {
			t.Fatalf("id %d out of range", id)
		}
	}
	// Saved and loaded, it encodes the same.
	path := filepath.Join(dir, "bpe.json")
	if err := bpe.Save(path); err != nil {
		t.Fatal(err)
	}
	if bpe.Spec() != "bpe:"+path {
		t.Errorf("Spec %q", bpe.Spec())
	}
	tok, err := Open(bpe.Spec(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := mustEncode(t, tok, val); firstDiff(got, ids) != len(ids) || len(got) != len(ids) {
		t.Errorf("the loaded BPE encodes differently")
	}
}

func TestSaveLoad(t *testing.T) {
	bpe := trained(t)
	path := filepath.Join(t.TempDir(), "tok.json")
	if err := bpe.Save(path); err != nil {
		t.Fatal(err)
	}
	b2, err := LoadBPE(path)
	if err != nil {
		t.Fatal(err)
	}
	if b2.Size() != bpe.Size() || len(b2.Merges()) != len(bpe.Merges()) {
		t.Fatalf("loaded %d tokens, %d merges", b2.Size(), len(b2.Merges()))
	}
	for i, m := range bpe.Merges() {
		if b2.Merges()[i] != m {
			t.Fatalf("merge %d: %v, want %v", i, b2.Merges()[i], m)
		}
	}
	if id, _ := b2.EOT(); id != int32(bpe.Size()-1) {
		t.Errorf("EOT %d", id)
	}
	text := sampleText(t)
	if got, want := b2.encode(text), bpe.encode(text); firstDiff(got, want) != len(want) || len(got) != len(want) {
		t.Errorf("loaded BPE encodes differently")
	}
}

func TestParseBPEErrors(t *testing.T) {
	head := `"type":"bpe","version":1,"pre_tokenizer":"gpt2"`
	for _, c := range []struct{ in, want string }{
		{``, "empty file"},
		{`{`, "not a bpe tokenizer file"},
		{`[1,2]`, "not a bpe tokenizer file"},
		{`{"type":"char","chars":"ab"}`, "not a bpe tokenizer file"}, // unknown field
		{`{"type":"gpt2","version":1,"pre_tokenizer":"gpt2","vocab_size":257,"eot":256,"merges":[]}`, `type is "gpt2"`},
		{`{` + head + `,"vocab_size":258,"eot":257,"merges":[]}`, "vocab_size is 258"},
		{`{` + head + `,"vocab_size":257,"eot":0,"merges":[]}`, "eot is 0"},
		{`{` + head + `,"vocab_size":258,"eot":257,"merges":[[97,256]]}`, "not a byte or an earlier merge"},
		{`{` + head + `,"vocab_size":258,"eot":257,"merges":[[97]]}`, "want a pair"},
		{`{` + head + `,"vocab_size":258,"eot":257,"merges":[[97,98,99]]}`, "want a pair"},
		{`{` + head + `,"vocab_size":259,"eot":258,"merges":[[97,98],[97,98]]}`, "merged twice"},
		{`{` + head + `,"vocab_size":257,"eot":256,"merges":[]} {}`, "data after"},
		{`{"type":"bpe","version":2,"pre_tokenizer":"gpt2","vocab_size":257,"eot":256,"merges":[]}`, "version 2"},
	} {
		_, err := parseBPE([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseBPE(%s): error %v, want %q", c.in, err, c.want)
		}
	}
	big := `{` + head + `,"vocab_size":65537,"eot":65536,"merges":[` + strings.Repeat("[97,98],", 65279) + `[97,98]]}`
	if _, err := parseBPE([]byte(big)); err == nil || !strings.Contains(err.Error(), "larger than 65535") {
		t.Errorf("65537 tokens: %v", err)
	}
	if _, err := parseBPE([]byte(`{` + head + `,"vocab_size":257,"eot":256,"merges":[]}`)); err != nil {
		t.Errorf("no merges: %v", err)
	}
}

func TestMergeHeapMatchesSmall(t *testing.T) {
	bpe := trained(t)
	rng := rand.New(rand.NewPCG(1, 2))
	text := sampleText(t)
	c := &wordCache{m: map[string][]int32{}}
	for range 2000 {
		n := 2 + rng.IntN(40)
		i := rng.IntN(len(text) - n)
		w := text[i : i+n]
		if rng.IntN(3) == 0 {
			w = bytes.Repeat([]byte{byte('a' + rng.IntN(3))}, n)
		}
		a := bpe.mergeSmall(c, nil, w)
		b := bpe.mergeHeap(nil, w)
		if firstDiff(a, b) != len(a) || len(a) != len(b) {
			t.Fatalf("%q: small %v, heap %v", w, a, b)
		}
	}
}

func FuzzBPERoundTrip(f *testing.F) {
	f.Add([]byte("Hello, world! It's 2024.\r\n\t\u00a0\u3000\u0085\v  end  "))
	f.Add([]byte("\xff\xfe\xc3 invalid"))
	f.Add(bytes.Repeat([]byte("ab "), 200))
	f.Fuzz(func(t *testing.T, b []byte) {
		bpe := trained(t)
		ids := bpe.encode(b)
		if back := bpe.Decode(ids); back != string(b) {
			t.Fatalf("round trip of %q gives %q", b, back)
		}
		if len(b) > 1 {
			c := &wordCache{m: map[string][]int32{}}
			x, y := bpe.mergeSmall(c, nil, b), bpe.mergeHeap(nil, b)
			if firstDiff(x, y) != len(x) || len(x) != len(y) {
				t.Fatalf("%q: small %v, heap %v", b, x, y)
			}
		}
		n := SplitPoint(b)
		split := append(bpe.encode(b[:n]), bpe.encode(b[n:])...)
		if firstDiff(split, ids) != len(ids) || len(split) != len(ids) {
			t.Fatalf("%q split at %d encodes differently", b, n)
		}
	})
}

func FuzzParseBPE(f *testing.F) {
	f.Add([]byte(`{"type":"bpe","version":1,"pre_tokenizer":"gpt2","vocab_size":258,"eot":257,"merges":[[97,98]]}`))
	f.Add([]byte(`{"merges":[[1,-1]]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		bpe, err := parseBPE(b)
		if err == nil {
			ids := bpe.encode([]byte("abc ab"))
			if back := bpe.Decode(ids); back != "abc ab" {
				t.Fatalf("parsed BPE does not round-trip")
			}
		}
	})
}

// BenchmarkTrainBPE trains vocabulary 1024 on tinyshakespeare (1.1 MB).
func BenchmarkTrainBPE(b *testing.B) {
	text := tinyShakespeare(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := TrainBPEText(1024, text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrainBPE8K trains vocabulary 8192 on tinyshakespeare.
func BenchmarkTrainBPE8K(b *testing.B) {
	text := tinyShakespeare(b)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := TrainBPEText(8192, text); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBPEEncode is encode throughput of a trained 1024 BPE.
func BenchmarkBPEEncode(b *testing.B) {
	text := tinyShakespeare(b)
	bpe, err := TrainBPEText(1024, text)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		bpe.encode(text)
	}
}
