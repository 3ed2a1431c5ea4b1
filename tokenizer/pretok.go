package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The GPT-2 pre-tokenizer splits text into pieces ("pre-tokens") that BPE
// then encodes one by one; merges never cross a piece boundary. It matches
// GPT-2's regular expression
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// as Python's regex module and tiktoken run it: leftmost-first
// alternation, greedy runs, and \s meaning Unicode White_Space (which
// includes U+0085, U+00A0, U+3000 and \v, and which Go's unicode.IsSpace
// implements exactly; Go's regexp \s is ASCII only and would be wrong).
// Go's regexp also has no lookahead, so the expression is written out as a
// small state machine over runes.
//
// Bytes that are not valid UTF-8 (which the regular expression never sees,
// since GPT-2 encodes Unicode strings) count as U+FFFD, a symbol: they
// join runs of punctuation.

// Character classes of the expression.
const (
	clsOther  uint8 = iota // [^\s\p{L}\p{N}]
	clsLetter              // \p{L}
	clsNumber              // \p{N}
	clsSpace               // \s (Unicode White_Space)
)

// asciiClass is the class of each ASCII byte.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for b := range t {
		t[b] = runeClass(rune(b))
	}
	return t
}()

func runeClass(r rune) uint8 {
	switch {
	case unicode.IsLetter(r):
		return clsLetter
	case unicode.IsNumber(r):
		return clsNumber
	case unicode.IsSpace(r):
		return clsSpace
	}
	return clsOther
}

// at decodes the rune at s[p] and returns it with its width and class.
// An invalid or incomplete encoding is one byte of class other.
func at(s []byte, p int) (r rune, w int, c uint8) {
	if b := s[p]; b < utf8.RuneSelf {
		return rune(b), 1, asciiClass[b]
	}
	r, w = utf8.DecodeRune(s[p:])
	if r == utf8.RuneError && w == 1 {
		return r, 1, clsOther
	}
	return r, w, runeClass(r)
}

// runEnd returns the end of the run of class c that starts at p.
func runEnd(s []byte, p int, c uint8) int {
	for p < len(s) {
		if b := s[p]; b < utf8.RuneSelf {
			if asciiClass[b] != c {
				return p
			}
			p++
			continue
		}
		_, w, rc := at(s, p)
		if rc != c {
			return p
		}
		p += w
	}
	return p
}

// contraction returns the length of the contraction suffix ('s, 't, 're,
// 've, 'm, 'll, 'd; lowercase ASCII only, as in GPT-2) that rest, the
// text after an apostrophe, starts with, or 0.
func contraction(rest []byte) int {
	if len(rest) == 0 {
		return 0
	}
	switch rest[0] {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(rest) > 1 && rest[1] == 'e' {
			return 2
		}
	case 'l':
		if len(rest) > 1 && rest[1] == 'l' {
			return 2
		}
	}
	return 0
}

// pretokenEnd returns the end of the pre-token that starts at s[p]
// (p < len(s)).
func pretokenEnd(s []byte, p int) int {
	r, w, c := at(s, p)
	switch r {
	case '\'':
		if n := contraction(s[p+1:]); n > 0 {
			return p + 1 + n
		}
	case ' ':
		// " ?\p{L}+", " ?\p{N}+" and " ?[^\s\p{L}\p{N}]+" take a
		// leading space; before whitespace, the space is whitespace.
		if p+1 < len(s) {
			if _, w1, c1 := at(s, p+1); c1 != clsSpace {
				return runEnd(s, p+1+w1, c1)
			}
		}
	}
	if c != clsSpace {
		return runEnd(s, p+w, c)
	}
	// "\s+(?!\S)|\s+": a run of whitespace, less its last character when
	// more than one character is followed by a non-space, so that the last
	// one can join the next pre-token (" word"). A single whitespace
	// character before a non-space is a pre-token by itself.
	q, last, n := p+w, w, 1
	for q < len(s) {
		_, w, c := at(s, q)
		if c != clsSpace {
			break
		}
		q, last, n = q+w, w, n+1
	}
	if q == len(s) || n == 1 {
		return q
	}
	return q - last
}

// pretokenize calls fn with each pre-token of s in order.
func pretokenize(s []byte, fn func(piece []byte)) {
	for p := 0; p < len(s); {
		e := pretokenEnd(s, p)
		fn(s[p:e])
		p = e
	}
}

// SplitPoint returns the length of the longest prefix of chunk that ends
// at a pre-token boundary that nothing after chunk can move: for any text
// that starts with chunk, encoding chunk[:n] and the rest separately gives
// the same ids as encoding the whole. It returns 0 when chunk has no such
// point (for example, when it is all whitespace or one long word); the
// caller should then read more, and at the end of the input encode what
// is left as a whole.
//
// A boundary qualifies when the characters on both sides of it are
// complete, valid UTF-8 and the one before it is a letter followed by a
// non-letter, a digit followed by a non-digit, or a symbol other than an
// apostrophe followed by a letter, digit or whitespace. No pre-token can
// span such a boundary, whatever follows. This holds for every tokenizer
// of this package (for char, any boundary between characters would do).
func SplitPoint(chunk []byte) int { return splitPoint(chunk, 0) }

// splitPoint is SplitPoint looking no further back than min.
func splitPoint(chunk []byte, min int) int {
	q := len(chunk)
	for q > min {
		pr, pw := utf8.DecodeLastRune(chunk[:q])
		if pr == utf8.RuneError && pw <= 1 {
			q -= max(pw, 1)
			continue
		}
		if q < len(chunk) {
			nr, nw := utf8.DecodeRune(chunk[q:])
			if !(nr == utf8.RuneError && nw <= 1) && safeBoundary(pr, nr) {
				return q
			}
		}
		q -= pw
	}
	return 0
}

// safeBoundary reports whether a pre-token always ends between prev and
// next.
func safeBoundary(prev, next rune) bool {
	pc, nc := runeClass(prev), runeClass(next)
	switch pc {
	case clsLetter, clsNumber:
		return nc != pc
	case clsOther:
		return prev != '\'' && nc != clsOther
	}
	return false
}
