package data_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/tokenizer"
)

// TestPrepareRealTokenizers: with the tokenizer package's BPE (and GPT-2's
// when FLEET_GPT2_VOCAB names its vocabulary), cut at tokenizer.SplitPoint
// into chunks as small as a few bytes, the shards hold exactly the ids of
// encoding each document whole with end-of-text between them.
func TestPrepareRealTokenizers(t *testing.T) {
	dir := t.TempDir()
	docs := []string{
		strings.Repeat("First Citizen:\nBefore we proceed any further, hear me speak.\n\n", 40),
		"  leading spaces,\ttabs\r\nCRLF, ünïcödé, 日本語, emoji 🙂🙂 and 'contractions' we'll   trailing   \n\n\n",
		strings.Repeat("x", 3000) + strings.Repeat(" ", 700) + "end",
		"a",
	}
	var paths []string
	var texts [][]byte
	for i, d := range docs {
		p := filepath.Join(dir, string(rune('a'+i))+".txt")
		if err := os.WriteFile(p, []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		texts = append(texts, []byte(d))
	}
	bpe, err := tokenizer.TrainBPEText(400, texts...)
	if err != nil {
		t.Fatal(err)
	}
	toks := []data.Tokenizer{bpe}
	if v := os.Getenv("FLEET_GPT2_VOCAB"); v != "" {
		gpt2, err := tokenizer.Open("gpt2:"+strings.Split(v, ":")[0], tokenizer.Options{})
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, gpt2)
	}
	for _, tok := range toks {
		want, err := tokenizer.EncodeDocuments(tok, texts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, chunk := range []int{7, 100, 1 << 20} {
			out := t.TempDir()
			_, err := data.Prepare(data.PrepareConfig{Tokenizer: tok, Boundary: tokenizer.SplitPoint, Inputs: paths, Out: out,
				ValFraction: 0.1, ChunkBytes: chunk, Workers: 3, ShardTokens: 500})
			if err != nil {
				t.Fatal(err)
			}
			p, err := data.OpenPrepared(out)
			if err != nil {
				t.Fatal(err)
			}
			got := make([]int32, p.Train.Len()+p.Val.Len())
			p.Train.Read(got[:p.Train.Len()], 0)
			p.Val.Read(got[p.Train.Len():], 0)
			p.Close()
			if !slices.Equal(got, want) {
				t.Errorf("%s, chunk %d: %d ids differ from the documents encoded whole (%d)", tok.Spec(), chunk, len(got), len(want))
			}
		}
	}
}
