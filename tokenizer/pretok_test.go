package tokenizer

import (
	"bytes"
	"strings"
	"testing"
	"unicode"
)

func pieces(s string) []string {
	var out []string
	pretokenize([]byte(s), func(p []byte) { out = append(out, string(p)) })
	return out
}

// The expected pieces follow from the regular expression read with \s as
// Unicode White_Space (Python's regex module, tiktoken); the GPT-2 fixture
// test checks the same cases against the references' ids.
func TestPretokenize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"hello world", []string{"hello", " world"}},
		{"Hello, World!", []string{"Hello", ",", " World", "!"}},
		// Contractions: lowercase ASCII only, and only where a piece starts.
		{"it's we're they've I'm you'll he'd can't", []string{"it", "'s", " we", "'re", " they", "'ve", " I", "'m", " you", "'ll", " he", "'d", " can", "'t"}},
		{"IT'S", []string{"IT", "'", "S"}},
		{"'s's", []string{"'s", "'s"}},
		{"''s", []string{"''", "s"}},
		{" 's", []string{" '", "s"}},
		{"x'l", []string{"x", "'", "l"}},
		{"x'll've", []string{"x", "'ll", "'ve"}},
		{"rock'n'roll", []string{"rock", "'", "n", "'", "roll"}},
		{"it’s", []string{"it", "’", "s"}},
		// Numbers: \p{N} runs, with an optional leading space.
		{"abc123def 456 7.5 1,000", []string{"abc", "123", "def", " 456", " 7", ".", "5", " 1", ",", "000"}},
		{"x² Ⅻ ٣٤", []string{"x", "²", " Ⅻ", " ٣٤"}},
		// Punctuation runs take a leading space, and everything that is not
		// a letter, digit or whitespace (emoji, joiners, apostrophes).
		{"wait... what?!? (yes)", []string{"wait", "...", " what", "?!?", " (", "yes", ")"}},
		{"a 😀😀 b", []string{"a", " 😀😀", " b"}},
		{"👨\u200d👩\u200d👧!", []string{"👨\u200d👩\u200d👧!"}},
		{"!'s", []string{"!'", "s"}},
		// \s+(?!\S): a run of whitespace before a non-space gives its last
		// character to the next piece; \s+ takes a single one.
		{"a  b", []string{"a", " ", " b"}},
		{"a   b", []string{"a", "  ", " b"}},
		{"a    !", []string{"a", "   ", " !"}},
		{"a   42", []string{"a", "  ", " 42"}},
		{"a\n\nb", []string{"a", "\n", "\n", "b"}},
		{"a\n\n\nb", []string{"a", "\n\n", "\n", "b"}},
		{"a \nb", []string{"a", " ", "\n", "b"}},
		{"a\n b", []string{"a", "\n", " b"}},
		{"a\n  b", []string{"a", "\n ", " b"}},
		{"a   ", []string{"a", "   "}},
		{"   ", []string{"   "}},
		{" ", []string{" "}},
		{"a \n", []string{"a", " \n"}},
		// CRLF and tabs are whitespace like any other.
		{"one\r\ntwo\r\n", []string{"one", "\r", "\n", "two", "\r\n"}},
		{"one\r\n\r\ntwo", []string{"one", "\r\n\r", "\n", "two"}},
		{"\tx", []string{"\t", "x"}},
		{"a\t\tb", []string{"a", "\t", "\t", "b"}},
		{"a \tb", []string{"a", " ", "\t", "b"}},
		{"a\t b", []string{"a", "\t", " b"}},
		// Unicode whitespace: NBSP, U+3000, \v, \f, U+0085, U+2028 are \s;
		// only U+0020 is the optional leading space.
		{"a\u00a0b", []string{"a", "\u00a0", "b"}},
		{"a\u00a0\u00a0b", []string{"a", "\u00a0", "\u00a0", "b"}},
		{"a\u00a0 b", []string{"a", "\u00a0", " b"}},
		{"a \u00a0b", []string{"a", " ", "\u00a0", "b"}},
		{"東京\u3000\u3000大阪", []string{"東京", "\u3000", "\u3000", "大阪"}},
		{"a\u3000\u3000\u3000", []string{"a", "\u3000\u3000\u3000"}},
		{"a\vb", []string{"a", "\v", "b"}},
		{"a\v\v b", []string{"a", "\v\v", " b"}},
		{"a\fb", []string{"a", "\f", "b"}},
		{"a\u0085b", []string{"a", "\u0085", "b"}},
		{"!\u0085!", []string{"!", "\u0085", "!"}},
		{"a \u0085b", []string{"a", " ", "\u0085", "b"}},
		{"a\u2028\u2029b", []string{"a", "\u2028", "\u2029", "b"}},
		// Not whitespace: zero-width space, BOM, U+001C (Python's re, but
		// not regex or tiktoken, calls it space) are symbols.
		{"a\u200bb", []string{"a", "\u200b", "b"}},
		{"a \ufeffb", []string{"a", " \ufeff", "b"}},
		{"!\ufeff!", []string{"!\ufeff!"}},
		{"a\x1c\x1cb", []string{"a", "\x1c\x1c", "b"}},
		// Letters beyond ASCII; combining marks are not letters.
		{"Straße grüßt", []string{"Straße", " grüßt"}},
		{"Ελληνικά кириллица 中文 한국어", []string{"Ελληνικά", " кириллица", " 中文", " 한국어"}},
		{"cafe\u0301s", []string{"cafe", "\u0301", "s"}},
		{"हिन्दी", []string{"ह", "ि", "न", "्", "द", "ी"}},
		// Invalid UTF-8 bytes are symbols.
		{"a\xff\xfeb \xc3", []string{"a", "\xff\xfe", "b", " \xc3"}},
	} {
		got := pieces(c.in)
		if strings.Join(got, "|") != strings.Join(c.want, "|") || len(got) != len(c.want) {
			t.Errorf("pretokenize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// Go's unicode.IsSpace is White_Space, the \s of tiktoken and of Python's
// regex module; Go's regexp \s is not.
func TestWhitespaceClass(t *testing.T) {
	space := "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
	for _, r := range space {
		if runeClass(r) != clsSpace {
			t.Errorf("%U is not whitespace", r)
		}
	}
	for _, r := range "\u200b\u180e\ufeff\x1c\x1d\x1e\x1f\u2060\u00ad" {
		if runeClass(r) != clsOther {
			t.Errorf("%U is not a symbol", r)
		}
	}
	n := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if runeClass(r) == clsSpace {
			n++
		}
	}
	if n != 25 {
		t.Errorf("%d whitespace code points, want White_Space's 25", n)
	}
}

func TestSplitPoint(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"hello", 0},
		{"hello ", 5},
		{"hello world", 5},
		{"one two  ", 7},
		{"x'", 1},
		{"x'l", 1},
		{"abc!", 3},
		{"!!!a", 3},
		{"!'s", 0}, // the apostrophe could start a contraction
		{"12ab", 2},
		{"   ", 0},
		{"a\u00e9\u00e9 b", 5},
		{"ab \xc3", 2}, // the last rune may be cut
		{"ab\xc3\xa9c ", 5},
	} {
		if got := SplitPoint([]byte(c.in)); got != c.want {
			t.Errorf("SplitPoint(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

// FuzzPretokenize: the pieces cover the input in order, none empty, and
// every SplitPoint prefix pre-tokenizes the same alone as inside any
// continuation.
func FuzzPretokenize(f *testing.F) {
	for _, s := range []string{"hello world", "a  b", "it's", "x'll", "\u00a0\u3000 x", "12ab!!", "\xff\xc3", "😀 a"} {
		f.Add([]byte(s), []byte("'ll  a"))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var got [][]byte
		pretokenize(a, func(p []byte) {
			if len(p) == 0 {
				t.Fatalf("empty piece in %q", a)
			}
			got = append(got, p)
		})
		if !bytes.Equal(bytes.Join(got, nil), a) {
			t.Fatalf("pieces of %q do not join up", a)
		}
		n := SplitPoint(a)
		if n < 0 || n > len(a) {
			t.Fatalf("SplitPoint(%q) = %d", a, n)
		}
		whole := append(append([]byte(nil), a...), b...)
		p1 := pieces(string(whole[:n]))
		p2 := pieces(string(whole[n:]))
		all := pieces(string(whole))
		if strings.Join(append(p1, p2...), "|") != strings.Join(all, "|") || len(p1)+len(p2) != len(all) {
			t.Fatalf("split of %q at %d: %q + %q, whole %q", whole, n, p1, p2, all)
		}
	})
}
