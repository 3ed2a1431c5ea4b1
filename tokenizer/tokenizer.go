package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/fleetml/fleet/data"
)

// Tokenizer turns text into token ids and back.
type Tokenizer interface {
	// Encode returns the ids of text. It adds no special token, and text
	// that spells one ("<|endoftext|>") is encoded as ordinary text.
	Encode(text []byte) []int32
	// Decode returns the text of ids. An id outside the vocabulary is an
	// error.
	Decode(ids []int32) ([]byte, error)
	// VocabSize returns the number of ids: every id is below it.
	VocabSize() int
	// EOT returns the id of <|endoftext|>, if the tokenizer has one.
	EOT() (id int32, ok bool)
	// Spec returns the spec that Open takes to open the tokenizer again.
	Spec() string
}

// Open opens the tokenizer that spec names:
//
//	char:FILE   the character tokenizer saved by data.SaveChar (the
//	            tokenizer.json beside a char-level checkpoint)
//	bpe:FILE    a byte-level BPE that TrainBPE made and Save wrote
//	gpt2:FILE   GPT-2's tokenizer from a tiktoken rank file
//	            (r50k_base.tiktoken)
//	gpt2:DIR    GPT-2's tokenizer from a folder holding encoder.json and
//	            vocab.bpe
//
// Nothing is downloaded: the files are the user's.
func Open(spec string) (Tokenizer, error) {
	kind, path, ok := strings.Cut(spec, ":")
	if !ok || path == "" {
		switch kind {
		case "char", "bpe", "gpt2":
			return nil, fmt.Errorf("tokenizer %q needs a file: %s", spec, specHelp)
		}
		return nil, fmt.Errorf("unknown tokenizer %q: %s", spec, specHelp)
	}
	switch kind {
	case "char":
		return OpenChar(path)
	case "bpe":
		return LoadBPE(path)
	case "gpt2":
		return OpenGPT2(path)
	}
	return nil, fmt.Errorf("unknown tokenizer %q: %s", spec, specHelp)
}

const specHelp = "want char:FILE (a char tokenizer.json), bpe:FILE (a trained BPE) or gpt2:FILE|DIR (r50k_base.tiktoken, or a folder with encoder.json and vocab.bpe)"

// Char is the character tokenizer of package data (nanoGPT's
// shakespeare_char): one id per distinct character of the text it was
// built from. It has no end-of-text token; its documents are concatenated
// as they are.
type Char struct {
	c    *data.Char
	spec string
}

// OpenChar reads a char tokenizer that data.SaveChar wrote.
func OpenChar(path string) (*Char, error) {
	c, err := data.LoadChar(path)
	if err != nil {
		return nil, fmt.Errorf("char tokenizer: %w", err)
	}
	return &Char{c: c, spec: "char:" + path}, nil
}

// NewChar wraps c; spec is what Spec returns ("char:FILE" where c is
// saved, or "").
func NewChar(c *data.Char, spec string) *Char { return &Char{c: c, spec: spec} }

// Encode returns the ids of the characters of text; characters outside the
// vocabulary are left out (EncodeStrict reports them instead).
func (c *Char) Encode(text []byte) []int32 {
	ids, err := c.c.Encode(string(text))
	if err == nil {
		return ids
	}
	ids = ids[:0]
	for len(text) > 0 {
		_, w := utf8.DecodeRune(text)
		if one, err := c.c.Encode(string(text[:w])); err == nil {
			ids = append(ids, one...)
		}
		text = text[w:]
	}
	return ids
}

// EncodeStrict is Encode that fails on a character outside the vocabulary.
func (c *Char) EncodeStrict(text []byte) ([]int32, error) {
	ids, err := c.c.Encode(string(text))
	if err != nil {
		return nil, fmt.Errorf("char tokenizer %s: %w", strings.TrimPrefix(c.spec, "char:"), err)
	}
	return ids, nil
}

// Decode returns the text of ids.
func (c *Char) Decode(ids []int32) ([]byte, error) {
	n := c.c.Size()
	for i, id := range ids {
		if id < 0 || int(id) >= n {
			return nil, fmt.Errorf("token %d: id %d is outside the vocabulary (0 to %d)", i, id, n-1)
		}
	}
	return []byte(c.c.Decode(ids)), nil
}

// VocabSize returns the number of characters.
func (c *Char) VocabSize() int { return c.c.Size() }

// EOT reports that the char tokenizer has no end-of-text token.
func (c *Char) EOT() (int32, bool) { return -1, false }

// Spec returns "char:FILE".
func (c *Char) Spec() string { return c.spec }

// EncodeDocuments encodes each document and joins them with <|endoftext|>
// between (not before the first or after the last). A tokenizer with no
// end-of-text token (char) concatenates them as they are.
func EncodeDocuments(t Tokenizer, docs ...[]byte) []int32 {
	eot, hasEOT := t.EOT()
	var ids []int32
	for i, d := range docs {
		if i > 0 && hasEOT {
			ids = append(ids, eot)
		}
		ids = append(ids, t.Encode(d)...)
	}
	return ids
}

// EncodeReader encodes what r yields, chunk by chunk, cut where SplitPoint
// allows, and calls fn with the ids of each chunk in order: the ids are
// those of Encode on the whole input. (A stretch with no split point, such
// as a long run of whitespace, is held until one comes or the input
// ends.) For char, a character outside the vocabulary is an error.
func EncodeReader(t Tokenizer, r io.Reader, fn func(ids []int32) error) error {
	return splitReader(r, func(text []byte, off int64) error {
		ids, err := encodeChecked(t, text)
		if err != nil {
			if off > 0 {
				return fmt.Errorf("in the text from byte %d on: %w", off, err)
			}
			return err
		}
		return fn(ids)
	})
}

// splitReader reads r and calls fn with its bytes in order, in pieces
// that end where SplitPoint allows (the last at the end of the input),
// with the offset of each. The piece is only valid during the call.
func splitReader(r io.Reader, fn func(text []byte, off int64) error) error {
	chunk := readChunk
	buf := make([]byte, 0, chunk)
	scanned := 0 // buf[:scanned] has no split point that needs no more input
	off := int64(0)
	flush := func(n int) error {
		if err := fn(buf[:n], off); err != nil {
			return err
		}
		off += int64(n)
		buf = buf[:copy(buf, buf[n:])]
		scanned = 0
		return nil
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if len(buf) > 0 {
				return flush(len(buf))
			}
			return nil
		}
		if err != nil {
			return err
		}
		if len(buf) >= chunk/2 {
			if k := splitPoint(buf, max(scanned-utf8.UTFMax, 0)); k > 0 {
				if err := flush(k); err != nil {
					return err
				}
				continue
			}
			scanned = len(buf)
		}
	}
}

// readChunk is the size of splitReader's reads (a variable for tests).
var readChunk = 1 << 20

// encodeChecked is Encode, or EncodeStrict where there is one.
func encodeChecked(t Tokenizer, text []byte) ([]int32, error) {
	if s, ok := t.(interface {
		EncodeStrict([]byte) ([]int32, error)
	}); ok {
		return s.EncodeStrict(text)
	}
	return t.Encode(text), nil
}
