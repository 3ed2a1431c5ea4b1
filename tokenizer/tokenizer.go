package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/fleetml/fleet/data"
)

// Options is what Open opens a spec against, besides the spec itself.
type Options struct {
	// Dir is the folder a relative path in the spec is relative to: a
	// prepared folder, whose manifest names its tokenizer relative to
	// itself. "" is the working directory.
	Dir string
	// Chars builds the tokenizer that a bare "char" names: the character
	// vocabulary of the text at hand (fleet prepare's inputs, the text
	// fleet eval evaluates). Nil: "char" needs a file.
	Chars func() (*data.Char, error)
	// VocabSize is the vocabulary of "none", raw token ids (the model's).
	// 0: "none" cannot be opened.
	VocabSize int
}

// Open opens the tokenizer that spec names (see ParseSpec):
//
//	char        the character vocabulary of the text at hand (o.Chars)
//	char:FILE   the character tokenizer that data.SaveChar wrote (the
//	            tokenizer.json beside a char-level run)
//	bpe:FILE    a byte-level BPE that TrainBPE made and Save wrote
//	gpt2:FILE   GPT-2's tokenizer from a tiktoken rank file
//	            (r50k_base.tiktoken)
//	gpt2:DIR    GPT-2's tokenizer from a folder holding encoder.json and
//	            vocab.bpe
//	hf:FILE     a Hugging Face tokenizer.json (OpenHF)
//	hf:DIR      a Hugging Face folder: its tokenizer.json, with BOS and
//	            EOS from its tokenizer_config.json
//	none        raw token ids below o.VocabSize (Raw)
//
// A relative path is relative to o.Dir. The Spec of what Open returns
// has the path made absolute, so that it opens the same tokenizer from
// any folder (a char tokenizer that o.Chars built has none: Spec is "").
// Open is the one place a spec is opened: fleet prepare, fleet train
// (--tokenizer, a prepared folder's manifest), a run's tokenizer.json
// (LoadRecord), fleet sample and eval with --weights FILE, and fleet
// tokenizer all come here. Nothing is downloaded: the files are the
// user's.
func Open(spec string, o Options) (data.Tokenizer, error) {
	s, err := ParseSpec(spec)
	if err != nil {
		return nil, err
	}
	s = s.In(o.Dir)
	path, abs := s.Path, s.Abs().String()
	switch s.Kind {
	case "char":
		if path == "" {
			if o.Chars == nil {
				return nil, fmt.Errorf("tokenizer %q needs a file: %s", spec, specHelp)
			}
			c, err := o.Chars()
			if err != nil {
				return nil, err
			}
			return c, nil
		}
		c, err := data.LoadChar(path)
		if err != nil {
			return nil, err
		}
		return c.WithSpec(abs), nil
	case "bpe":
		t, err := LoadBPE(path)
		if err != nil {
			return nil, err
		}
		t.spec = abs
		return t, nil
	case "gpt2":
		t, err := OpenGPT2(path)
		if err != nil {
			return nil, err
		}
		t.spec = abs
		return t, nil
	case "hf":
		t, err := OpenHF(path)
		if err != nil {
			return nil, err
		}
		t.spec = abs
		return t, nil
	}
	// "none"
	if o.VocabSize <= 0 {
		return nil, fmt.Errorf("tokenizer %q (raw token ids) needs a vocabulary size", spec)
	}
	return Raw(o.VocabSize), nil
}

const specHelp = "want char:FILE (a char tokenizer.json), bpe:FILE (a trained BPE), gpt2:FILE|DIR (r50k_base.tiktoken, or a folder with encoder.json and vocab.bpe) or hf:FILE|DIR (a Hugging Face tokenizer.json, or its folder)"

// Spec is a tokenizer spec, parsed: the one parser of the specs that
// Open takes, that fleet's flags take, and that manifests and a run's
// tokenizer.json record.
type Spec struct {
	Kind string // "char", "bpe", "gpt2", "hf" or "none"
	// Path is the file (for gpt2 and hf, the file or folder); "" for a bare
	// "char" (the characters of the text at hand) and for "none".
	Path string
}

// ParseSpec parses a spec: "char", "char:FILE", "bpe:FILE", "gpt2:FILE",
// "gpt2:DIR", "hf:FILE", "hf:DIR" or "none".
func ParseSpec(spec string) (Spec, error) {
	kind, path, hasPath := strings.Cut(spec, ":")
	switch kind {
	case "char", "bpe", "gpt2", "hf":
		if path != "" {
			return Spec{Kind: kind, Path: path}, nil
		}
		if kind == "char" && !hasPath {
			return Spec{Kind: kind}, nil
		}
		return Spec{}, fmt.Errorf("tokenizer %q needs a file: %s", spec, specHelp)
	case "none":
		if !hasPath {
			return Spec{Kind: kind}, nil
		}
	}
	return Spec{}, fmt.Errorf("unknown tokenizer %q: %s", spec, specHelp)
}

// String returns the spec as ParseSpec reads it.
func (s Spec) String() string {
	if s.Path == "" {
		return s.Kind
	}
	return s.Kind + ":" + s.Path
}

// In returns s with a relative path taken as relative to dir ("": the
// working directory).
func (s Spec) In(dir string) Spec {
	if s.Path != "" && dir != "" && !filepath.IsAbs(s.Path) {
		s.Path = filepath.Join(dir, s.Path)
	}
	return s
}

// Abs returns s with its path made absolute, so that it can be recorded
// and opened from another folder.
func (s Spec) Abs() Spec {
	if s.Path != "" && !filepath.IsAbs(s.Path) {
		if abs, err := filepath.Abs(s.Path); err == nil {
			s.Path = abs
		}
	}
	return s
}

// AbsSpec returns spec with its path made absolute; a spec that does not
// parse is returned as it is.
func AbsSpec(spec string) string {
	s, err := ParseSpec(spec)
	if err != nil {
		return spec
	}
	return s.Abs().String()
}

// EncodeDocuments encodes each document and joins them with <|endoftext|>
// between (not before the first or after the last), as Prepare does. A
// tokenizer with no end-of-text token (char) concatenates them as they
// are.
func EncodeDocuments(t data.Tokenizer, docs ...[]byte) ([]int32, error) {
	eot, hasEOT := t.EOT()
	var ids []int32
	for i, d := range docs {
		if i > 0 && hasEOT {
			ids = append(ids, eot)
		}
		one, err := t.Encode(string(d))
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		ids = append(ids, one...)
	}
	return ids, nil
}

// EncodeReader encodes what r yields, chunk by chunk, cut where SplitPoint
// allows, and calls fn with the ids of each chunk in order: the ids are
// those of Encode on the whole input. (A stretch with no split point, such
// as a long run of whitespace, is held until one comes or the input
// ends.) Text the tokenizer cannot encode (for char, a character outside
// the vocabulary) is an error.
func EncodeReader(t data.Tokenizer, r io.Reader, fn func(ids []int32) error) error {
	return splitReader(r, splitFunc(t), func(text []byte, off int64) error {
		ids, err := t.Encode(string(text))
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
func splitReader(r io.Reader, split func(chunk []byte, min int) int, fn func(text []byte, off int64) error) error {
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
			if k := split(buf, max(scanned-utf8.UTFMax, 0)); k > 0 {
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
