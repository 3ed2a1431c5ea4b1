package train

import (
	"github.com/fleetml/fleet/tokenizer"
)

// openSpec opens a tokenizer spec other than char:FILE (bpe:FILE,
// gpt2:FILE, gpt2:DIR) through package tokenizer.
func openSpec(spec string) (Tokenizer, error) {
	t, err := tokenizer.Open(spec)
	if err != nil {
		return nil, err
	}
	return specTokenizer{t}, nil
}

// specTokenizer adapts a tokenizer.Tokenizer to Tokenizer.
type specTokenizer struct{ t tokenizer.Tokenizer }

func (s specTokenizer) Encode(text string) ([]int32, error) {
	if st, ok := s.t.(interface {
		EncodeStrict([]byte) ([]int32, error)
	}); ok {
		return st.EncodeStrict([]byte(text))
	}
	return s.t.Encode([]byte(text)), nil
}

func (s specTokenizer) Decode(ids []int32) string {
	if b, err := s.t.Decode(ids); err == nil {
		return string(b)
	}
	return decodeEach(ids, s.t.Decode)
}

func (s specTokenizer) Size() int { return s.t.VocabSize() }
