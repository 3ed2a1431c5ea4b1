package data

import (
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
// character's id is its position in that list.
type Char struct {
	chars []rune
	index map[rune]int32
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
	index := make(map[rune]int32, len(chars))
	for i, r := range chars {
		index[r] = int32(i)
	}
	return &Char{chars: chars, index: index}
}

// Size returns the vocabulary size.
func (c *Char) Size() int { return len(c.chars) }

// Encode returns the ids of the characters of s. It fails on the first
// character that is not in the vocabulary.
func (c *Char) Encode(s string) ([]int32, error) {
	ids := make([]int32, 0, len(s))
	for i, r := range s {
		id, ok := c.index[r]
		if !ok {
			return nil, fmt.Errorf("data: character %q (at byte %d) is not in the tokenizer's vocabulary", string(r), i)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// Decode returns the text for ids. Ids outside the vocabulary decode to
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

// LoadChar reads a tokenizer that SaveChar wrote.
func LoadChar(path string) (*Char, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, unwrapPath(err))
	}
	c := new(Char)
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return c, nil
}
