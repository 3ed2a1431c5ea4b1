package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/train"
)

func ngramCmd(args []string, stdout, stderr io.Writer) error {
	c := train.Default()
	fs := flag.NewFlagSet("ngram", flag.ContinueOnError)
	order := fs.Int("order", 3, "n-gram order (context of order-1 tokens)")
	fs.StringVar(&c.Data, "data", "", "data as fleet train --data takes it: a folder from fleet prepare, token files, or text (by character, split 90/10); default: Go's standard-library source")
	fs.IntVar(&c.VocabSize, "vocab-size", 0, "vocabulary of token files without a manifest")
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "tokenizer of token files without a manifest (for its vocabulary size)")
	fs.IntVar(&c.CorpusBytes, "corpus-bytes", c.CorpusBytes, "size cap of the default corpus")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fleet ngram --order N --data DIR\n\n"+
			"Trains an interpolated Kneser-Ney n-gram model on the train split and prints its val perplexity per token:\n"+
			"the baseline a Transformer trained on the same data (fleet train, fleet eval) should beat.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *order < 1 {
		return fmt.Errorf("--order must be at least 1")
	}
	trainToks, val, vocab, desc, closeData, err := train.OpenData(c)
	if err != nil {
		return err
	}
	defer closeData()
	fmt.Fprintf(stderr, "data: %s\n", desc)
	t0 := time.Now()
	m, err := data.TrainNGram(trainToks, *order, vocab)
	if err != nil {
		return err
	}
	trained := time.Since(t0).Seconds()
	ce, err := m.CrossEntropy(val)
	if err != nil {
		return fmt.Errorf("val split: %w", err)
	}
	fmt.Fprintf(stderr, "trained on %d tokens (%d distinct %d-grams, vocabulary %d) in %.1f s; evaluated %d val tokens in %.1f s\n",
		trainToks.Len(), m.NumNGrams(*order), *order, vocab, trained, val.Len(), time.Since(t0).Seconds()-trained)
	fmt.Fprintf(stdout, "order=%d val_loss=%.8g perplexity=%.8g\n", *order, ce, math.Exp(ce))
	return nil
}
