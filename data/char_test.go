package data

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCharRoundTrip(t *testing.T) {
	text := "héllo, wörld! 日本語 🙂\n\tzebra"
	c := NewChar(text)
	ids, err := c.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != utf8.RuneCountInString(text) {
		t.Errorf("encoded %d ids, want %d", len(ids), utf8.RuneCountInString(text))
	}
	for _, id := range ids {
		if id < 0 || int(id) >= c.Size() {
			t.Fatalf("id %d out of range [0, %d)", id, c.Size())
		}
	}
	if got := c.Decode(ids); got != text {
		t.Errorf("Decode(Encode(text)) = %q, want %q", got, text)
	}
}

func TestCharVocab(t *testing.T) {
	c := NewChar("banana é a")
	want := []rune{' ', 'a', 'b', 'n', 'é'}
	if !slices.Equal(c.chars, want) {
		t.Errorf("vocab = %q, want %q", string(c.chars), string(want))
	}
	if c.Size() != len(want) {
		t.Errorf("Size = %d, want %d", c.Size(), len(want))
	}
	ids, err := c.Encode("ab é")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []int32{1, 2, 0, 4}) {
		t.Errorf("Encode = %v", ids)
	}
	if got := c.Decode([]int32{2, -1, 5, 1}); got != "b\uFFFD\uFFFDa" {
		t.Errorf("Decode with bad ids = %q", got)
	}
}

func TestCharUnknown(t *testing.T) {
	c := NewChar("abc")
	_, err := c.Encode("abxyz")
	if err == nil {
		t.Fatal("Encode of unknown characters succeeded")
	}
	if !strings.Contains(err.Error(), `"x"`) || strings.Contains(err.Error(), `"y"`) {
		t.Errorf("error does not name the first unknown character: %v", err)
	}
}

func TestCharJSON(t *testing.T) {
	c := NewChar("<héllo & \"world\">\n\\")
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["type"] != "char" || m["chars"] != string(c.chars) || len(m) != 2 {
		t.Errorf("JSON = %s", b)
	}
	var d Char
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.chars, c.chars) {
		t.Errorf("round trip vocab = %q, want %q", string(d.chars), string(c.chars))
	}
	ids, err := d.Encode("héllo")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := c.Encode("héllo")
	if !slices.Equal(ids, want) {
		t.Errorf("round trip ids = %v, want %v", ids, want)
	}

	for _, bad := range []string{
		`{"type":"bpe","chars":"ab"}`,
		`{"type":"char","chars":"ba"}`,
		`{"type":"char","chars":"aab"}`,
		`[1,2]`,
	} {
		var e Char
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Errorf("Unmarshal(%s) succeeded", bad)
		}
	}
}

func TestCharSaveLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	c := NewChar("Ünïcödé text\n")
	if err := SaveChar(p, c); err != nil {
		t.Fatal(err)
	}
	d, err := LoadChar(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.chars, c.chars) || d.Size() != c.Size() {
		t.Errorf("loaded vocab = %q, want %q", string(d.chars), string(c.chars))
	}
	missing := filepath.Join(dir, "nope.json")
	if _, err := LoadChar(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("LoadChar(missing) err = %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, bad, "not json")
	if _, err := LoadChar(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("LoadChar(bad) err = %v", err)
	}
}

// TestCharTokenizer: Char is a Tokenizer with no end-of-text token, named
// by its file once saved or loaded.
func TestCharTokenizer(t *testing.T) {
	var tok Tokenizer = NewChar("abc")
	if _, ok := tok.EOT(); ok || tok.Spec() != "" || tok.Size() != 3 {
		t.Errorf("EOT %v, Spec %q, Size %d", ok, tok.Spec(), tok.Size())
	}
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := SaveChar(p, NewChar("abc")); err != nil {
		t.Fatal(err)
	}
	c, err := LoadChar(p)
	if err != nil || c.Spec() != "char:"+p {
		t.Fatalf("LoadChar: %v, spec %q", err, c.Spec())
	}
	named := c.WithSpec("char:tokenizer.json")
	if named.Spec() != "char:tokenizer.json" || c.Spec() != "char:"+p || named.Size() != c.Size() {
		t.Errorf("WithSpec: %q (the original %q)", named.Spec(), c.Spec())
	}
}

// TestCharEncodeBytes: the ids of every kind of character (ASCII, others,
// bytes that are not valid UTF-8, which are U+FFFD) are their positions in
// the vocabulary.
func TestCharEncodeBytes(t *testing.T) {
	text := "a\x00é\xff日\x80z\u00a0\U0001F642\xe6\x97"
	c := NewChar(text)
	ids, err := c.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	var want []int32
	for _, r := range text {
		want = append(want, int32(slices.Index(c.chars, r)))
	}
	if !slices.Equal(ids, want) {
		t.Errorf("Encode = %v, want %v", ids, want)
	}
	if _, err := NewChar("é").Encode("éa"); err == nil || !strings.Contains(err.Error(), `"a" (at byte 2)`) {
		t.Errorf("an unknown ASCII character: %v", err)
	}
}
