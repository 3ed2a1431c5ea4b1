package train

import (
	"fmt"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/tokenizer"
	"github.com/fleetml/fleet/train/config"
)

// dataset is a run's data, opened.
type dataset struct {
	train, val data.Tokens
	vocab      int // every id is below it
	desc       string
	// tok is the tokenizer, once open: the character tokenizer of text, a
	// prepared folder's char tokenizer, --tokenizer's.
	tok Tokenizer
	// spec is else the spec of the tokenizer to open when it is needed
	// (a prepared folder's, with an absolute path), or "none" for raw
	// token ids.
	spec     string
	checkIDs bool            // the ids come from files: the loader checks them
	id       config.Identity // the data by content
	closers  []func() error
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
		d, err = openText(cfg)
	}
	if err != nil {
		return nil, err
	}
	if cfg.VocabSize > 0 {
		if cfg.VocabSize < d.vocab {
			d.close()
			return nil, setting.Errorf("{VocabSize} %d is smaller than the data's vocabulary of %d", cfg.VocabSize, d.vocab)
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
	var tok Tokenizer = data.NewChar(text)
	if cfg.Tokenizer != "" {
		// Another tokenizer encodes the text in memory (fleet prepare
		// writes shards of it for data that does not fit).
		if tok, err = tokenizer.Open(cfg.Tokenizer, tokenizer.Options{VocabSize: cfg.VocabSize}); err != nil {
			return nil, setting.Errorf("{Tokenizer}: %w", err)
		}
	}
	ids, err := tok.Encode(text)
	if err != nil {
		return nil, setting.Errorf("{Tokenizer} %s: %w", cfg.Tokenizer, err)
	}
	train, val := data.Split(ids)
	d := &dataset{train: data.Int32s(train), val: data.Int32s(val), vocab: tok.Size(), desc: desc, tok: tok}
	d.id = config.TextIdentity(text, desc)
	if cfg.Tokenizer != "" {
		d.desc = fmt.Sprintf("%s, tokenized by %s", desc, cfg.Tokenizer)
		// The identity is of the ids: another tokenizer makes other data.
		d.id = config.TokensIdentity(d.train, d.val, d.desc)
	}
	return d, nil
}

func openPrepared(cfg Config) (*dataset, error) {
	if cfg.Tokenizer != "" {
		return nil, setting.Errorf("{Tokenizer} %s: the prepared data in %s names its own tokenizer", cfg.Tokenizer, cfg.Data)
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
	d.id = config.PreparedIdentity(m, d.desc)
	// The manifest's spec is relative to the folder. A char tokenizer is
	// opened now (it is in the folder, and must match the manifest); any
	// other when it is needed.
	s, err := tokenizer.ParseSpec(m.Tokenizer)
	switch {
	case err == nil && s.Kind == "char":
		if d.tok, err = tokenizer.Open(m.Tokenizer, tokenizer.Options{Dir: p.Dir}); err != nil {
			d.close()
			return nil, fmt.Errorf("prepared data %s: %w", cfg.Data, err)
		}
		if d.tok.Size() != m.VocabSize {
			d.close()
			return nil, fmt.Errorf("prepared data %s: the char tokenizer %s has %d characters but the manifest says %d",
				cfg.Data, s.In(p.Dir).Path, d.tok.Size(), m.VocabSize)
		}
	case err == nil:
		d.spec = s.In(p.Dir).Abs().String()
	case m.Tokenizer == "":
		d.spec = "none"
	default:
		d.spec = m.Tokenizer // Open reports what is wrong with it
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
	d.spec = "none"
	if cfg.Tokenizer != "" {
		if d.tok, err = tokenizer.Open(cfg.Tokenizer, tokenizer.Options{VocabSize: cfg.VocabSize}); err != nil {
			return nil, setting.Errorf("{Tokenizer}: %w", err)
		}
		if vocab == 0 {
			vocab, what = d.tok.Size(), "the vocabulary of "+cfg.Tokenizer
		}
	}
	largest, where := int32(-1), ""
	for _, f := range files {
		if m := data.MaxID(f.Tokens); m > largest {
			largest, where = m, f.Path
		}
	}
	if vocab == 0 {
		return nil, setting.Errorf("%s holds token ids with no vocabulary size: pass {VocabSize} N (more than %d, its largest id) "+
			"or {Tokenizer} SPEC (the tokenizer that made them)", cfg.Data, largest)
	}
	if int(largest) >= vocab {
		return nil, fmt.Errorf("%s holds token id %d, not below %s (%d)", where, largest, what, vocab)
	}
	d.vocab = vocab
	d.desc = fmt.Sprintf("%s (token files: %d train and %d val tokens in %d files)", cfg.Data, train.Len(), val.Len(), len(files))
	d.id = config.TokensIdentity(train, val, d.desc)
	return d, nil
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
