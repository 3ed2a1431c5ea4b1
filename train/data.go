package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/fleetml/fleet/data"
)

// Tokenizer encodes prompts for a trained model and decodes what it
// generates.
type Tokenizer interface {
	// Encode returns the ids of text; it fails on text the tokenizer
	// cannot encode.
	Encode(text string) ([]int32, error)
	// Decode returns the text of ids; ids it has no text for decode to
	// U+FFFD.
	Decode(ids []int32) string
	// Size returns the vocabulary size.
	Size() int
}

// tokenizerRecord is tokenizer.json for a run whose tokenizer is not the
// character tokenizer of its text (which is saved as data.SaveChar writes
// it): the spec of a tokenizer that can be opened again ("bpe:FILE",
// "gpt2:DIR", with an absolute path), or none for raw token ids.
type tokenizerRecord struct {
	Type      string `json:"type"` // "spec" or "none"
	Spec      string `json:"spec,omitempty"`
	VocabSize int    `json:"vocab_size"`
}

// dataset is a run's data, opened.
type dataset struct {
	train, val data.Tokens
	vocab      int // every id is below it
	desc       string
	char       *data.Char // the character tokenizer, when there is one
	spec       string     // else the spec of the tokenizer, "" for none
	checkIDs   bool       // the ids come from files: the loader checks them
	id         Identity   // the data by content
	closers    []func() error
}

func (d *dataset) close() {
	for _, c := range d.closers {
		c()
	}
	d.closers = nil
}

// openData opens what cfg.Data names. It decides by what is there: a
// folder with a manifest is prepared data; a .bin file, or a folder of
// *train*.bin and *val*.bin files, is token files; anything else is text,
// tokenized by character and split 90/10.
func openData(cfg Config) (d *dataset, err error) {
	switch {
	case cfg.Data != "" && data.IsPrepared(cfg.Data):
		d, err = openPrepared(cfg)
	case cfg.Data != "" && data.IsTokenData(cfg.Data):
		d, err = openTokenFiles(cfg)
	default:
		if cfg.Tokenizer != "" {
			return nil, fmt.Errorf("--tokenizer %s: text is tokenized by character; to train on text with another tokenizer, "+
				"run fleet prepare --tokenizer %s --out DIR %s first and train on DIR", cfg.Tokenizer, cfg.Tokenizer, cfg.Data)
		}
		d, err = openText(cfg)
	}
	if err != nil {
		return nil, err
	}
	if cfg.VocabSize > 0 {
		if cfg.VocabSize < d.vocab {
			d.close()
			return nil, fmt.Errorf("--vocab-size %d is smaller than the data's vocabulary of %d", cfg.VocabSize, d.vocab)
		}
		d.vocab = cfg.VocabSize
	}
	return d, nil
}

func openText(cfg Config) (*dataset, error) {
	var text, desc string
	var err error
	if cfg.Data == "" {
		text, desc, err = data.DefaultCorpus(cfg.CorpusBytes)
	} else {
		text, err = data.LoadText(cfg.Data)
		desc = fmt.Sprintf("%s (%d bytes)", cfg.Data, len(text))
	}
	if err != nil {
		return nil, err
	}
	tok := data.NewChar(text)
	ids, err := tok.Encode(text)
	if err != nil {
		return nil, err
	}
	train, val := data.Split(ids)
	return &dataset{train: data.Int32s(train), val: data.Int32s(val), vocab: tok.Size(), desc: desc, char: tok,
		id: textIdentity(text, desc)}, nil
}

func openPrepared(cfg Config) (*dataset, error) {
	if cfg.Tokenizer != "" {
		return nil, fmt.Errorf("--tokenizer %s: the prepared data in %s names its own tokenizer", cfg.Tokenizer, cfg.Data)
	}
	p, err := data.OpenPrepared(cfg.Data)
	if err != nil {
		return nil, err
	}
	m := &p.Manifest
	d := &dataset{train: p.Train, val: p.Val, vocab: m.VocabSize, checkIDs: true,
		closers: []func() error{p.Close}}
	d.desc = fmt.Sprintf("%s (prepared: %d train and %d val tokens in %d shards, tokenizer %s)",
		cfg.Data, m.Train.Tokens, m.Val.Tokens, len(m.Train.Shards)+len(m.Val.Shards), m.Tokenizer)
	d.id = preparedIdentity(m, d.desc)
	spec := p.TokenizerSpec()
	if kind, path, _ := strings.Cut(spec, ":"); kind == "char" {
		if d.char, err = data.LoadChar(path); err != nil {
			d.close()
			return nil, fmt.Errorf("prepared data %s: %w", cfg.Data, err)
		}
		if d.char.Size() != m.VocabSize {
			d.close()
			return nil, fmt.Errorf("prepared data %s: the char tokenizer %s has %d characters but the manifest says %d",
				cfg.Data, path, d.char.Size(), m.VocabSize)
		}
	} else {
		d.spec = data.AbsSpec(spec)
	}
	return d, nil
}

func openTokenFiles(cfg Config) (_ *dataset, err error) {
	train, val, files, err := data.TokenFiles(cfg.Data)
	if err != nil {
		return nil, err
	}
	d := &dataset{train: train, val: val, checkIDs: true}
	for _, f := range files {
		d.closers = append(d.closers, f.Close)
	}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	vocab, what := cfg.VocabSize, "--vocab-size"
	if cfg.Tokenizer != "" {
		tok, err := OpenTokenizer(cfg.Tokenizer)
		if err != nil {
			return nil, fmt.Errorf("--tokenizer: %w", err)
		}
		if c, ok := tok.(*data.Char); ok {
			d.char = c
		} else {
			d.spec = data.AbsSpec(cfg.Tokenizer)
		}
		if vocab == 0 {
			vocab, what = tok.Size(), "the vocabulary of "+cfg.Tokenizer
		}
	}
	largest, where := int32(-1), ""
	for _, f := range files {
		if m := data.MaxID(f.Tokens); m > largest {
			largest, where = m, f.Path
		}
	}
	if vocab == 0 {
		return nil, fmt.Errorf("%s holds token ids with no vocabulary size: pass --vocab-size N (more than %d, its largest id) "+
			"or --tokenizer SPEC (the tokenizer that made them)", cfg.Data, largest)
	}
	if int(largest) >= vocab {
		return nil, fmt.Errorf("%s holds token id %d, not below %s (%d)", where, largest, what, vocab)
	}
	d.vocab = vocab
	d.desc = fmt.Sprintf("%s (token files: %d train and %d val tokens in %d files)", cfg.Data, train.Len(), val.Len(), len(files))
	d.id = tokensIdentity(train, val, d.desc)
	return d, nil
}

// saveTokenizer writes tokenizer.json for the run: the character
// tokenizer, or a record of the tokenizer's spec (or of none).
func (d *dataset) saveTokenizer(dir string) error {
	path := filepath.Join(dir, TokenizerFile)
	if d.char != nil {
		return data.SaveChar(path, d.char)
	}
	rec := tokenizerRecord{Type: "none", VocabSize: d.vocab}
	if d.spec != "" {
		rec.Type, rec.Spec = "spec", d.spec
	}
	return writeJSON(path, rec)
}

// tokenizerDesc names the tokenizer for the log.
func (d *dataset) tokenizerDesc() string {
	switch {
	case d.char != nil:
		return "char"
	case d.spec != "":
		return d.spec
	}
	return "none: raw token ids"
}

// tokenizer returns the run's tokenizer, opened.
func (d *dataset) tokenizer() (Tokenizer, error) {
	switch {
	case d.char != nil:
		return d.char, nil
	case d.spec != "":
		return OpenTokenizer(d.spec)
	}
	return noTokenizer{d.vocab}, nil
}

// LoadTokenizer reads a run's tokenizer.json.
func LoadTokenizer(dir string) (Tokenizer, error) {
	path := filepath.Join(dir, TokenizerFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, errors.Unwrap(err))
	}
	var rec tokenizerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	switch rec.Type {
	case "char":
		return data.LoadChar(path)
	case "spec":
		t, err := OpenTokenizer(rec.Spec)
		if err != nil {
			return nil, fmt.Errorf("%s: the run's tokenizer: %w", path, err)
		}
		return t, nil
	case "none":
		return noTokenizer{rec.VocabSize}, nil
	}
	return nil, fmt.Errorf("load tokenizer %s: unknown type %q", path, rec.Type)
}

// RawIDs is the tokenizer of a run trained on raw token ids with a
// vocabulary of vocab: it cannot encode, and decodes ids as numbers.
func RawIDs(vocab int) Tokenizer { return noTokenizer{vocab} }

// noTokenizer stands in for the tokenizer of a run trained on raw token
// ids: it cannot encode, and decodes ids as numbers.
type noTokenizer struct{ vocab int }

func (noTokenizer) Encode(string) ([]int32, error) {
	return nil, errors.New("the run was trained on raw token ids without a tokenizer, so it cannot encode text " +
		"(train with --tokenizer SPEC to record one)")
}

func (noTokenizer) Decode(ids []int32) string {
	var sb strings.Builder
	for i, id := range ids {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprint(&sb, id)
	}
	return sb.String()
}

func (t noTokenizer) Size() int { return t.vocab }

// OpenTokenizer opens a tokenizer spec: char:FILE here, the others
// through package tokenizer.
func OpenTokenizer(spec string) (Tokenizer, error) {
	kind, path, _ := strings.Cut(spec, ":")
	if kind == "char" && path != "" {
		return data.LoadChar(path)
	}
	return openSpec(spec)
}

// decodeEach decodes ids one at a time with dec, writing U+FFFD for those
// it fails on.
func decodeEach(ids []int32, dec func([]int32) ([]byte, error)) string {
	var b []byte
	for _, id := range ids {
		t, err := dec([]int32{id})
		if err != nil {
			b = utf8.AppendRune(b, utf8.RuneError)
			continue
		}
		b = append(b, t...)
	}
	return string(b)
}

// OpenData opens training data as fleet train does, from c.Data (with
// c.VocabSize, c.Tokenizer and c.CorpusBytes): it returns the train and
// val splits, the vocabulary size (every id is below it), a description,
// and a function that releases the data.
func OpenData(c Config) (train, val data.Tokens, vocab int, desc string, close func(), err error) {
	d, err := openData(c)
	if err != nil {
		return nil, nil, 0, "", nil, err
	}
	return d.train, d.val, d.vocab, d.desc, d.close, nil
}
