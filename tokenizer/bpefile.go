package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/fleetml/fleet/internal/atomicfile"
)

// bpeJSON is the bpe file format (see the package documentation).
type bpeJSON struct {
	Type         string    `json:"type"`
	Version      int       `json:"version"`
	PreTokenizer string    `json:"pre_tokenizer"`
	VocabSize    int       `json:"vocab_size"`
	EOT          int       `json:"eot"`
	Merges       [][]int64 `json:"merges"`
}

// newTrainedBPE builds the BPE whose merges are pairs of ids, merge i
// making id 256+i, with <|endoftext|> after the last.
func newTrainedBPE(pairs [][2]int32) (*BPE, error) {
	n := 256 + len(pairs) + 1
	if n > MaxVocab {
		return nil, fmt.Errorf("%d merges make a vocabulary of %d, larger than %d (token ids are stored as uint16)", len(pairs), n, MaxVocab)
	}
	tokens := make([][]byte, n)
	var byteID [256]int32
	for b := range 256 {
		tokens[b] = []byte{byte(b)}
		byteID[b] = int32(b)
	}
	merges := make([]Merge, len(pairs))
	for i, p := range pairs {
		id := int32(256 + i)
		for _, x := range p {
			if x < 0 || x >= id {
				return nil, fmt.Errorf("merge %d (%d %d): id %d is not a byte or an earlier merge (0 to %d)", i, p[0], p[1], x, id-1)
			}
		}
		tokens[id] = append(append([]byte(nil), tokens[p[0]]...), tokens[p[1]]...)
		merges[i] = Merge{A: p[0], B: p[1], ID: id}
	}
	eot := int32(n - 1)
	tokens[eot] = []byte(EndOfText)
	return newBPE("bpe", tokens, byteID, merges, eot)
}

// LoadBPE reads a BPE that Save wrote.
func LoadBPE(path string) (*BPE, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bpe tokenizer: %w", err)
	}
	t, err := parseBPE(b)
	if err != nil {
		return nil, fmt.Errorf("bpe tokenizer %s: %w", path, err)
	}
	t.spec = "bpe:" + path
	return t, nil
}

func parseBPE(b []byte) (*BPE, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, fmt.Errorf("empty file")
	}
	var j bpeJSON
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&j); err != nil {
		return nil, fmt.Errorf("not a bpe tokenizer file: %w", err)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("not a bpe tokenizer file: data after the JSON object")
	}
	switch {
	case j.Type != "bpe":
		return nil, fmt.Errorf("type is %q, want \"bpe\"", j.Type)
	case j.Version != 1:
		return nil, fmt.Errorf("version %d, want 1", j.Version)
	case j.PreTokenizer != "gpt2":
		return nil, fmt.Errorf("pre_tokenizer %q, want \"gpt2\"", j.PreTokenizer)
	case j.VocabSize != 256+len(j.Merges)+1:
		return nil, fmt.Errorf("vocab_size is %d, but 256 bytes, %d merges and <|endoftext|> make %d", j.VocabSize, len(j.Merges), 256+len(j.Merges)+1)
	case j.EOT != j.VocabSize-1:
		return nil, fmt.Errorf("eot is %d, want %d (the last id)", j.EOT, j.VocabSize-1)
	case j.VocabSize > MaxVocab:
		return nil, fmt.Errorf("vocab_size %d is larger than %d (token ids are stored as uint16)", j.VocabSize, MaxVocab)
	}
	pairs := make([][2]int32, len(j.Merges))
	for i, m := range j.Merges {
		if len(m) != 2 {
			return nil, fmt.Errorf("merge %d is %v, want a pair of ids", i, m)
		}
		for k, x := range m {
			if x < 0 || x >= int64(256+i) {
				return nil, fmt.Errorf("merge %d (%d %d): id %d is not a byte or an earlier merge (0 to %d)", i, m[0], m[1], x, 256+i-1)
			}
			pairs[i][k] = int32(x)
		}
	}
	return newTrainedBPE(pairs)
}

// Save writes t to path (atomically) in the bpe file format, after which
// Spec is "bpe:"+path. Only a trained BPE (or one read from a bpe: file)
// can be saved: GPT-2's tokenizer is not renumbered into this format.
func (t *BPE) Save(path string) error {
	if t.kind != "bpe" {
		return fmt.Errorf("save tokenizer %s: only a trained BPE can be saved, not %s", path, t.kind)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "{\n  \"type\": \"bpe\",\n  \"version\": 1,\n  \"pre_tokenizer\": \"gpt2\",\n  \"vocab_size\": %d,\n  \"eot\": %d,\n  \"merges\": [", len(t.tokens), t.eot)
	for i, m := range t.merges {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n    [")
		buf.WriteString(strconv.Itoa(int(m.A)))
		buf.WriteString(", ")
		buf.WriteString(strconv.Itoa(int(m.B)))
		buf.WriteByte(']')
	}
	buf.WriteString("\n  ]\n}\n")
	if err := atomicfile.WriteFile(path, buf.Bytes()); err != nil {
		return fmt.Errorf("save tokenizer: %w", err)
	}
	t.spec = "bpe:" + path
	return nil
}
