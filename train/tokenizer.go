package train

import (
	"path/filepath"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/tokenizer"
)

// Tokenizer is data.Tokenizer, fleet's one tokenizer interface, under the
// name the trainer's API (Result) uses: it encodes prompts for a trained
// model and decodes what it generates.
type Tokenizer = data.Tokenizer

// tokenizer returns the run's tokenizer, opened.
func (d *dataset) tokenizer() (Tokenizer, error) {
	if d.tok == nil {
		t, err := tokenizer.Open(d.spec, tokenizer.Options{VocabSize: d.vocab})
		if err != nil {
			return nil, err
		}
		d.tok = t
	}
	return d.tok, nil
}

// saveTokenizer writes tokenizer.json for the run (tokenizer.SaveRecord):
// the character tokenizer, or a record of the tokenizer's spec (or of
// none).
func (d *dataset) saveTokenizer(dir string) error {
	t, err := d.tokenizer()
	if err != nil {
		return err
	}
	return tokenizer.SaveRecord(filepath.Join(dir, TokenizerFile), t, d.vocab)
}

// tokenizerDesc names the tokenizer for the log.
func (d *dataset) tokenizerDesc() string {
	var spec string
	switch t := d.tok.(type) {
	case *data.Char:
		return "char"
	case tokenizer.Raw:
		spec = "none"
	case nil:
		spec = d.spec
	default:
		spec = tokenizer.AbsSpec(t.Spec())
	}
	if spec == "none" {
		return "none: raw token ids"
	}
	return spec
}
