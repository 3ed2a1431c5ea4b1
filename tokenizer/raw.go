package tokenizer

import (
	"errors"
	"strconv"
)

// Raw is the tokenizer of a model trained on raw token ids without a
// tokenizer (token files and no --tokenizer): its value is the vocabulary
// size. It cannot encode text, and decodes ids as numbers separated by
// spaces. Its spec is "none", and a run's tokenizer.json records it as
// {"type": "none", "vocab_size": N}.
type Raw int

// Encode fails: raw token ids have no text.
func (Raw) Encode(string) ([]int32, error) {
	return nil, errors.New("the run was trained on raw token ids without a tokenizer, so it cannot encode text " +
		"(train with --tokenizer SPEC to record one)")
}

// Decode writes the ids as decimal numbers separated by spaces.
func (Raw) Decode(ids []int32) string {
	var b []byte
	for i, id := range ids {
		if i > 0 {
			b = append(b, ' ')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return string(b)
}

// Size returns the vocabulary size.
func (r Raw) Size() int { return int(r) }

// EOT reports that raw token ids have no end-of-text token that is known.
func (Raw) EOT() (int32, bool) { return -1, false }

// Spec returns "none".
func (Raw) Spec() string { return "none" }
