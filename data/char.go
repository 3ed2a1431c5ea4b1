package data

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/fleetml/fleet/internal/atomicfile"
)

// Char is nanoGPT's character tokenizer: the vocabulary is the sorted
// unique Unicode code points of the text it was built from, and a
// character's id is its position in that list. It is a Tokenizer with no
// end-of-text token. A Char does not change once made, and is safe for
// concurrent use.
type Char struct {
	chars []rune
	index map[rune]int32
	ascii [utf8.RuneSelf]int32 // the ids of the ASCII characters, -1 where none
	spec  string               // how to open it again: "char:FILE", or ""
}

// NewChar builds the tokenizer whose vocabulary is the distinct characters
// of text. (Invalid UTF-8 bytes count as U+FFFD.)
func NewChar(text string) *Char {
	seen := make(map[rune]bool)
	var chars []rune
	for _, r := range text {
		if !seen[r] {
			seen[r] = true
			chars = append(chars, r)
		}
	}
	slices.Sort(chars)
	return newCharFrom(chars)
}

func newCharFrom(chars []rune) *Char {
	c := &Char{chars: chars, index: make(map[rune]int32, len(chars))}
	for i := range c.ascii {
		c.ascii[i] = -1
	}
	for i, r := range chars {
		c.index[r] = int32(i)
		if r < utf8.RuneSelf {
			c.ascii[r] = int32(i)
		}
	}
	return c
}

// Size returns the vocabulary size.
func (c *Char) Size() int { return len(c.chars) }

// EOT reports that the character tokenizer has no end-of-text token: its
// documents are concatenated as they are.
func (c *Char) EOT() (int32, bool) { return -1, false }

// Spec returns "char:FILE" for a tokenizer read from FILE (LoadChar), the
// spec given to WithSpec, or "" for one built from text.
func (c *Char) Spec() string { return c.spec }

// WithSpec returns c (the same vocabulary, shared) with spec as its Spec:
// the name under which it can be opened again, such as "char:FILE" where
// it is saved.
func (c *Char) WithSpec(spec string) *Char {
	d := *c
	d.spec = spec
	return &d
}

// Encode returns the ids of the characters of s (a byte that is not valid
// UTF-8 is U+FFFD, as in NewChar). It fails on the first character that
// is not in the vocabulary.
func (c *Char) Encode(s string) ([]int32, error) {
	ids := make([]int32, 0, len(s))
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			id := c.ascii[b]
			if id < 0 {
				return nil, unknownChar(rune(b), i)
			}
			ids = append(ids, id)
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		id, ok := c.index[r]
		if !ok {
			return nil, unknownChar(r, i)
		}
		ids = append(ids, id)
		i += w
	}
	return ids, nil
}

func unknownChar(r rune, at int) error {
	return fmt.Errorf("data: character %q (at byte %d) is not in the tokenizer's vocabulary", string(r), at)
}

// Decode returns the text of ids. Ids outside the vocabulary decode to
// U+FFFD.
func (c *Char) Decode(ids []int32) string {
	var sb strings.Builder
	sb.Grow(len(ids))
	for _, id := range ids {
		if id < 0 || int(id) >= len(c.chars) {
			sb.WriteRune(utf8.RuneError)
			continue
		}
		sb.WriteRune(c.chars[id])
	}
	return sb.String()
}

type charJSON struct {
	Type  string `json:"type"`
	Chars string `json:"chars"`
}

// MarshalJSON writes {"type":"char","chars":"<the vocabulary in order>"}.
func (c *Char) MarshalJSON() ([]byte, error) {
	return json.Marshal(charJSON{Type: "char", Chars: string(c.chars)})
}

// UnmarshalJSON reads what MarshalJSON writes. The characters must be
// valid UTF-8, sorted and distinct.
func (c *Char) UnmarshalJSON(b []byte) error {
	var j charJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("data: char tokenizer: %w", err)
	}
	if j.Type != "char" {
		return fmt.Errorf("data: tokenizer type is %q, want \"char\"", j.Type)
	}
	if !utf8.ValidString(j.Chars) {
		return fmt.Errorf("data: char tokenizer: characters are not valid UTF-8")
	}
	chars := []rune(j.Chars)
	for i := 1; i < len(chars); i++ {
		if chars[i] <= chars[i-1] {
			return fmt.Errorf("data: char tokenizer: characters are not sorted and distinct (%q after %q)",
				string(chars[i]), string(chars[i-1]))
		}
	}
	*c = *newCharFrom(chars)
	return nil
}

// SaveChar writes c as JSON to path, atomically.
func SaveChar(path string, c *Char) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("save tokenizer %s: %w", path, err)
	}
	b = append(b, '\n')
	if err := atomicfile.WriteFile(path, b); err != nil {
		return fmt.Errorf("save tokenizer: %w", err)
	}
	return nil
}

// LoadChar reads a tokenizer that SaveChar wrote; its Spec is
// "char:"+path.
func LoadChar(path string) (*Char, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, unwrapPath(err))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("char tokenizer %s: empty file", path)
	}
	c := new(Char)
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	c.spec = "char:" + path
	return c, nil
}
