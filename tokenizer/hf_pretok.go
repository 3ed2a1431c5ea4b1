package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The split patterns of tokenizer.json files that fleet knows. Each is
// matched by a hand-written state machine, since Go's regexp has no
// lookahead; a Split pre-tokenizer with any other pattern is refused.
// (They are written here with \pL and \pN for \p{L} and \p{N}, which
// the files spell out.)
var (
	// patGPT2 is GPT-2's expression (pretok.go), which a ByteLevel
	// pre-tokenizer with use_regex applies and which some files spell out
	// in a Split.
	patGPT2 = expandClasses(`'s|'t|'re|'ve|'m|'ll|'d| ?\pL+| ?\pN+| ?[^\s\pL\pN]+|\s+(?!\S)|\s+`)
	// patLlama3 is Llama 3's (tiktoken's cl100k_base), digits in threes.
	patLlama3 = expandClasses(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN{1,3}| ?[^\s\pL\pN]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)
	// patQwen2 is Qwen2's: Llama 3's with single digits.
	patQwen2 = expandClasses(`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\pL\pN]?\pL+|\pN| ?[^\s\pL\pN]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`)
)

// expandClasses writes \pL and \pN as the files do, \p{L} and \p{N}.
func expandClasses(s string) string {
	return strings.NewReplacer(`\pL`, `\p{`+"L}", `\pN`, `\p{`+"N}").Replace(s)
}

// hfPattern is a known split pattern: its matcher, which returns the end
// of the piece that starts at s[p], and its boundary rule for split
// points: whether no piece can span prev followed by next.
type hfPattern struct {
	match func(s []byte, p int) int
	safe  func(prev, next rune) bool
}

var knownPatterns = map[string]hfPattern{
	patGPT2:   {pretokenEnd, safeBoundary},
	patLlama3: {func(s []byte, p int) int { return llama3End(s, p, 3) }, llama3Safe},
	patQwen2:  {func(s []byte, p int) int { return llama3End(s, p, 1) }, llama3Safe},
}

// contractionFold is contraction for (?i:'s|'t|'re|'ve|'m|'ll|'d): the
// letters in either case, and U+017F (ſ), whose case folding is s, for s,
// as Oniguruma (the Rust tokenizers) and JavaScript's case-insensitive
// Unicode expressions fold it.
func contractionFold(rest []byte) int {
	if len(rest) == 0 {
		return 0
	}
	lower := func(b byte) byte {
		if 'A' <= b && b <= 'Z' {
			return b + 'a' - 'A'
		}
		return b
	}
	switch lower(rest[0]) {
	case 's', 't', 'm', 'd':
		return 1
	case 'r', 'v':
		if len(rest) > 1 && lower(rest[1]) == 'e' {
			return 2
		}
	case 'l':
		if len(rest) > 1 && lower(rest[1]) == 'l' {
			return 2
		}
	case 0xC5:
		if len(rest) > 1 && rest[1] == 0xBF { // ſ
			return 2
		}
	}
	return 0
}

// llama3End returns the end of the piece that starts at s[p] under the
// expression
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// with D = maxDigits (3 for Llama 3, 1 for Qwen2), leftmost-first
// alternation and greedy, backtracking quantifiers, and the classes of
// pretok.go (\s is Unicode White_Space; bytes that are not valid UTF-8
// are symbols).
func llama3End(s []byte, p int, maxDigits int) int {
	r, w, c := at(s, p)
	if r == '\'' {
		if n := contractionFold(s[p+1:]); n > 0 {
			return p + 1 + n
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == clsLetter {
		return runEnd(s, p+w, clsLetter)
	}
	if c != clsNumber && r != '\r' && r != '\n' && p+w < len(s) {
		if _, w1, c1 := at(s, p+w); c1 == clsLetter {
			return runEnd(s, p+w+w1, clsLetter)
		}
	}
	// \p{N}{1,D}
	if c == clsNumber {
		q := p + w
		for n := 1; n < maxDigits && q < len(s); n++ {
			_, w1, c1 := at(s, q)
			if c1 != clsNumber {
				break
			}
			q += w1
		}
		return q
	}
	// " ?[^\s\p{L}\p{N}]+[\r\n]*"
	q, qc, qw := p, c, w
	if r == ' ' && p+1 < len(s) {
		if _, w1, c1 := at(s, p+1); c1 == clsOther {
			q, qc, qw = p+1, c1, w1
		}
	}
	if qc == clsOther {
		q = runEnd(s, q+qw, clsOther)
		for q < len(s) && (s[q] == '\r' || s[q] == '\n') {
			q++
		}
		return q
	}
	// Whitespace. "\s*[\r\n]+": the run, up to its last \r or \n (bytes
	// that occur in no other character's UTF-8).
	e := runEnd(s, p, clsSpace)
	for i := e - 1; i >= p; i-- {
		if s[i] == '\r' || s[i] == '\n' {
			return i + 1
		}
	}
	// "\s+(?!\S)|\s+": the run, less its last character when that is
	// followed by a non-space and is not the first.
	if e == len(s) {
		return e
	}
	_, lw := utf8.DecodeLastRune(s[p:e])
	if e-lw > p {
		return e - lw
	}
	return e
}

// llama3Safe is safeBoundary for the Llama 3 family: no piece spans a
// letter followed by a non-letter, a number followed by a non-number, or
// a symbol (not an apostrophe) followed by a number or by whitespace
// other than \r and \n. (A symbol before a letter joins it, and one
// before a line break takes the break.)
func llama3Safe(prev, next rune) bool {
	pc, nc := runeClass(prev), runeClass(next)
	switch pc {
	case clsLetter, clsNumber:
		return nc != pc
	case clsOther:
		return prev != '\'' && (nc == clsNumber || nc == clsSpace && next != '\r' && next != '\n')
	}
	return false
}

// digitsEnd is the Digits pre-tokenizer: runs of numbers (each number
// alone when individual) and runs of anything else. Numbers are
// unicode.IsNumber (categories Nd, Nl and No, as Rust's char::is_numeric).
func digitsEnd(s []byte, p int, individual bool) int {
	r, w := utf8.DecodeRune(s[p:])
	num := unicode.IsNumber(r)
	if num && individual {
		return p + w
	}
	q := p + w
	for q < len(s) {
		r, w := utf8.DecodeRune(s[q:])
		if unicode.IsNumber(r) != num {
			break
		}
		q += w
	}
	return q
}
