package tokenizer

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/data"
)

// chunkReader yields b in reads of the given sizes, in turn.
type chunkReader struct {
	b     []byte
	sizes []int
	i     int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.b), r.sizes[r.i%len(r.sizes)])
	r.i++
	copy(p, r.b[:n])
	r.b = r.b[n:]
	return n, nil
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{"), 0o644)
	for _, c := range []struct{ spec, want string }{
		{"", "unknown tokenizer"},
		{"sentencepiece:x.model", `unknown tokenizer "sentencepiece:x.model"`},
		{"char", `"char" needs a file`},
		{"gpt2:", `"gpt2:" needs a file`},
		{"gpt2", `"gpt2" needs a file`},
		{"none", `"none" (raw token ids) needs a vocabulary size`},
		{"none:5", `unknown tokenizer "none:5"`},
		{"char:" + filepath.Join(dir, "none.json"), "none.json: no such file"},
		{"bpe:" + filepath.Join(dir, "none.json"), "none.json: no such file"},
		{"gpt2:" + filepath.Join(dir, "none.tiktoken"), "none.tiktoken: no such file"},
		{"gpt2:" + dir, "encoder.json: no such file"},
		{"bpe:" + bad, "bpe tokenizer " + bad + ": not a bpe tokenizer file"},
		{"gpt2:" + bad, "gpt2 tokenizer " + bad + ": line 1"},
		{"char:" + bad, bad},
	} {
		_, err := Open(c.spec, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%q): error %v, want %q", c.spec, err, c.want)
		}
	}
}

// TestOpenEmptyFile: a tokenizer file of 0 bytes (or only white space)
// is an error that names the file and says it is empty, for every kind
// that reads one: char:, bpe:, gpt2: (a rank file, or either file of a
// folder), hf: (a file or a folder's), and a run's tokenizer.json.
func TestOpenEmptyFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.json")
	blank := filepath.Join(dir, "blank.json")
	os.WriteFile(empty, nil, 0o644)
	os.WriteFile(blank, []byte(" \n\t\n"), 0o644)
	var base []string
	for i := range 256 {
		base = append(base, string(byteUnicode[i]))
	}
	noEncoder := encoderDir(t, base, "#version: 0.2\n")
	os.WriteFile(filepath.Join(noEncoder, "encoder.json"), nil, 0o644)
	noMerges := encoderDir(t, base, "")
	hfDir := t.TempDir()
	os.WriteFile(filepath.Join(hfDir, "tokenizer.json"), nil, 0o644)
	for _, c := range []struct{ spec, file string }{
		{"char:" + empty, empty},
		{"char:" + blank, blank},
		{"bpe:" + empty, empty},
		{"bpe:" + blank, blank},
		{"gpt2:" + empty, empty},
		{"gpt2:" + noEncoder, filepath.Join(noEncoder, "encoder.json")},
		{"gpt2:" + noMerges, filepath.Join(noMerges, "vocab.bpe")},
		{"hf:" + empty, empty},
		{"hf:" + hfDir, filepath.Join(hfDir, "tokenizer.json")},
	} {
		_, err := Open(c.spec, Options{})
		if err == nil || !strings.Contains(err.Error(), c.file+": empty file") {
			t.Errorf("Open(%q): error %v, want it to name %s and say it is empty", c.spec, err, c.file)
		}
	}
	if _, err := LoadRecord(empty); err == nil || !strings.Contains(err.Error(), empty+": empty file") {
		t.Errorf("LoadRecord of an empty file: %v", err)
	}
}

// mustEncode is tok.Encode of b, failing the test on an error.
func mustEncode(t testing.TB, tok data.Tokenizer, b []byte) []int32 {
	t.Helper()
	ids, err := tok.Encode(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestChar(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := data.SaveChar(path, data.NewChar("hello world\n")); err != nil {
		t.Fatal(err)
	}
	tok, err := Open("char:"+path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tok.(*data.Char); !ok {
		t.Errorf("Open(char:FILE) gave a %T, want the *data.Char itself", tok)
	}
	if tok.Spec() != "char:"+path || tok.Size() != 9 {
		t.Errorf("Spec %q, Size %d", tok.Spec(), tok.Size())
	}
	if _, ok := tok.EOT(); ok {
		t.Errorf("char has an EOT")
	}
	ids := mustEncode(t, tok, []byte("hello"))
	if back := tok.Decode(ids); back != "hello" {
		t.Errorf("round trip: %q", back)
	}
	if _, err := tok.Encode("hexlo"); err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("Encode of an unknown character: %v", err)
	}
	if back := tok.Decode([]int32{9}); back != "\uFFFD" {
		t.Errorf("Decode(9) = %q, want U+FFFD", back)
	}
	docs, err := EncodeDocuments(tok, []byte("he"), []byte("llo"))
	if back := tok.Decode(docs); err != nil || back != "hello" {
		t.Errorf("documents: %q (%v), want them concatenated", back, err)
	}
	err = EncodeReader(tok, strings.NewReader("hello\nhex"), func([]int32) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("EncodeReader: %v", err)
	}
}

func TestEncodeDocuments(t *testing.T) {
	bpe := trained(t)
	eot, _ := bpe.EOT()
	a, b := []byte("first document"), []byte("second one")
	got, err := EncodeDocuments(bpe, a, b)
	want := append(append(mustEncode(t, bpe, a), eot), mustEncode(t, bpe, b)...)
	if err != nil || firstDiff(got, want) != len(want) || len(got) != len(want) {
		t.Errorf("EncodeDocuments = %v (%v), want %v", got, err, want)
	}
	if back := bpe.Decode(got); back != "first document<|endoftext|>second one" {
		t.Errorf("decoded %q", back)
	}
	// The text "<|endoftext|>" is not the token.
	for _, id := range mustEncode(t, bpe, []byte("<|endoftext|>")) {
		if id == eot {
			t.Errorf("Encode produced the end-of-text token")
		}
	}
}

func TestEncodeReader(t *testing.T) {
	bpe := trained(t)
	var text []byte
	sample := sampleText(t)
	defer func(n int) { readChunk = n }(readChunk)
	readChunk = 1 << 12
	for i := 0; len(text) < 1<<18; i++ {
		text = append(text, sample[:len(sample)*(i%7+1)/7]...)
		text = append(text, bytes.Repeat([]byte{' '}, i%5)...)
	}
	// A stretch with no split point, longer than a chunk.
	text = append(text, bytes.Repeat([]byte("  \t"), 5000)...)
	text = append(text, sample...)
	want := mustEncode(t, bpe, text)
	for _, sizes := range [][]int{{1 << 20}, {4096, 1, 7000}, {3333}, {1}} {
		var got []int32
		calls := 0
		err := EncodeReader(bpe, &chunkReader{b: text, sizes: sizes}, func(ids []int32) error {
			got = append(got, ids...)
			calls++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if firstDiff(got, want) != len(want) || len(got) != len(want) {
			t.Errorf("reads of %v: %d ids, want %d, first difference at %d", sizes, len(got), len(want), firstDiff(got, want))
		}
		if calls < 3 {
			t.Errorf("reads of %v: %d calls, want the input in several chunks", sizes, calls)
		}
	}
	stop := fmt.Errorf("stop")
	if err := EncodeReader(bpe, bytes.NewReader(text), func([]int32) error { return stop }); err != stop {
		t.Errorf("EncodeReader returned %v, want fn's error", err)
	}
}

func tiktokenFile(tokens ...string) []byte {
	var b bytes.Buffer
	for i, s := range tokens {
		fmt.Fprintf(&b, "%s %d\n", base64.StdEncoding.EncodeToString([]byte(s)), i)
	}
	return b.Bytes()
}

func bytesTokens() []string {
	var t []string
	for i := range 256 {
		t = append(t, string([]byte{byte(i)}))
	}
	return t
}

func TestParseTiktoken(t *testing.T) {
	good := tiktokenFile(append(bytesTokens(), "ab", "abc", " ab")...)
	tok, err := parseTiktoken(good)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Size() != 260 {
		t.Errorf("Size %d", tok.Size())
	}
	if got := tok.encode([]byte("abc ab")); len(got) != 2 || got[0] != 257 || got[1] != 258 {
		t.Errorf("Encode = %v, want [257 258]", got)
	}
	for _, c := range []struct {
		in   []byte
		want string
	}{
		{nil, "empty file"},
		{[]byte("\n\n"), "no tokens"},
		{[]byte("YQ==\n"), `line 1: want "BASE64 RANK"`},
		{[]byte("YQ== 0\n!!! 1\n"), "line 2: bad base64"},
		{[]byte("YQ== x\n"), `line 1: bad rank "x"`},
		{[]byte("YQ== -1\n"), `bad rank "-1"`},
		{[]byte("YQ== 0\nYg== 0\n"), "line 2: rank 0 given twice"},
		{[]byte("YQ== 0\nYQ== 1\n"), `line 2: token "a" given twice`},
		{[]byte("YQ== 0\nYg== 2\n"), "rank 1 is missing"},
		{[]byte("YQ== 70000\n"), "larger than 65535"},
		{[]byte(" 0\n"), `line 1: want "BASE64 RANK"`},
		{tiktokenFile("a", "b"), "byte 0x00 has no token"},
		{tiktokenFile(append(bytesTokens(), "abc")...), `token "abc" (rank 256) is not made by merging two tokens`},
		{tiktokenFile(append(bytesTokens(), "abc", "ab")...), `token "abc" (rank 256) is not made by merging two tokens`},
	} {
		_, err := parseTiktoken(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseTiktoken(%q): error %v, want %q", c.in, err, c.want)
		}
	}
}

// encoderDir writes encoder.json and vocab.bpe for the given tokens (in
// GPT-2's byte alphabet) and merges.
func encoderDir(t *testing.T, tokens []string, merges string) string {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("{")
	for i, s := range tokens {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%q: %d", s, i)
	}
	b.WriteString("}")
	os.WriteFile(filepath.Join(dir, "encoder.json"), []byte(b.String()), 0o644)
	os.WriteFile(filepath.Join(dir, "vocab.bpe"), []byte(merges), 0o644)
	return dir
}

func TestEncoderJSON(t *testing.T) {
	var base []string
	for i := range 256 {
		base = append(base, string(byteUnicode[i]))
	}
	base = base[:256:256] // appends copy
	dir := encoderDir(t, append(base, "ab", "Ġab", EndOfText), "#version: 0.2\na b\nĠ ab\n")
	tok, err := OpenGPT2(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.EOT(); !ok || id != 258 || tok.Size() != 259 || tok.Spec() != "gpt2:"+dir {
		t.Errorf("EOT %d %v, Size %d, Spec %q", id, ok, tok.Size(), tok.Spec())
	}
	if got := tok.encode([]byte("ab ab")); len(got) != 2 || got[0] != 256 || got[1] != 257 {
		t.Errorf("Encode = %v", got)
	}
	for _, c := range []struct {
		tokens []string
		merges string
		want   string
	}{
		{append(base, "ab"), "#version: 0.2\n", `token 256 ("ab") is not a byte and no merge makes it`},
		{append(base, "ab"), "#version: 0.2\na c\n", `line 2: the merge "ac" is not in encoder.json`},
		{append(base, "ab"), "#version: 0.2\na b c\n", "line 2: want two tokens"},
		{append(base, "ab"), "#version: 0.2\na b\na b\n", `"ac"`},
		{append(base, "ab"), "", "empty file"},
		{append(base, "a\u4e00"), "a \u4e00\n", `not in GPT-2's byte alphabet`},
		{base[1:], "", "byte 0x00"},
	} {
		_, err := OpenGPT2(encoderDir(t, c.tokens, c.merges))
		if c.want == `"ac"` {
			if err == nil || !strings.Contains(err.Error(), "merged twice") && !strings.Contains(err.Error(), "exists already") {
				t.Errorf("duplicate merge: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tokens %d, merges %q: error %v, want %q", len(c.tokens), c.merges, err, c.want)
		}
	}
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "encoder.json"), []byte(`{"a": 5}`), 0o644)
	if _, err := OpenGPT2(dir); err == nil || !strings.Contains(err.Error(), "outside 0 to 0") {
		t.Errorf("bad id: %v", err)
	}
}

func FuzzParseTiktoken(f *testing.F) {
	f.Add(tiktokenFile(append(bytesTokens(), "ab", "abc")...))
	f.Add([]byte("YQ== 0\nYg== 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := parseTiktoken(b)
		if err == nil {
			in := []byte("abc ab\xff")
			if back := tok.Decode(tok.encode(in)); back != string(in) {
				t.Fatalf("parsed tokenizer does not round-trip")
			}
		}
	})
}

func FuzzEncoderJSON(f *testing.F) {
	var base []string
	for i := range 256 {
		base = append(base, fmt.Sprintf("%q: %d", string(byteUnicode[i]), i))
	}
	f.Add([]byte("{"+strings.Join(base, ",")+`, "ab": 256}`), []byte("#version: 0.2\na b\n"))
	f.Add([]byte(`{"a": 0}`), []byte("a b"))
	f.Fuzz(func(t *testing.T, enc, merges []byte) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, "encoder.json"), enc, 0o644)
		os.WriteFile(filepath.Join(dir, "vocab.bpe"), merges, 0o644)
		tok, err := OpenGPT2(dir)
		if err == nil {
			in := []byte("abc ab\xff")
			if back := tok.Decode(tok.encode(in)); back != string(in) {
				t.Fatalf("parsed tokenizer does not round-trip")
			}
		}
	})
}
