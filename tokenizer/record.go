package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/atomicfile"
)

// record is a run's tokenizer.json when the run's tokenizer is not a
// character tokenizer (which is saved as data.SaveChar writes it): the
// spec of a tokenizer that can be opened again ("bpe:FILE", "gpt2:DIR",
// with an absolute path), or none for raw token ids.
type record struct {
	Type      string `json:"type"` // "spec" or "none"
	Spec      string `json:"spec,omitempty"`
	VocabSize int    `json:"vocab_size"`
}

// SaveRecord writes a run's tokenizer.json to path, atomically, so that
// LoadRecord opens t again: a char tokenizer as data.SaveChar writes it
// ({"type": "char", "chars": ...}: the vocabulary itself, so that the run
// folder needs nothing else); Raw as {"type": "none", "vocab_size": N};
// any other tokenizer as {"type": "spec", "spec": SPEC, "vocab_size": N},
// its spec with an absolute path. N is vocab, the run's vocabulary (the
// model's), which may be larger than the tokenizer's.
func SaveRecord(path string, t data.Tokenizer, vocab int) error {
	var rec record
	switch t := t.(type) {
	case *data.Char:
		return data.SaveChar(path, t)
	case Raw:
		rec = record{Type: "none", VocabSize: vocab}
	default:
		if t.Spec() == "" {
			return fmt.Errorf("save tokenizer %s: the tokenizer has no spec to record (save it first)", path)
		}
		rec = record{Type: "spec", Spec: AbsSpec(t.Spec()), VocabSize: vocab}
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'))
}

// LoadRecord reads a run's tokenizer.json that SaveRecord wrote and opens
// the tokenizer it records (through Open).
func LoadRecord(path string) (data.Tokenizer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, errors.Unwrap(err))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("load tokenizer %s: empty file", path)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	switch rec.Type {
	case "char":
		return Open("char:"+path, Options{})
	case "spec":
		t, err := Open(rec.Spec, Options{})
		if err != nil {
			return nil, fmt.Errorf("%s: the run's tokenizer: %w", path, err)
		}
		return t, nil
	case "none":
		t, err := Open("none", Options{VocabSize: rec.VocabSize})
		if err != nil {
			return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
		}
		return t, nil
	}
	return nil, fmt.Errorf("load tokenizer %s: unknown type %q", path, rec.Type)
}
