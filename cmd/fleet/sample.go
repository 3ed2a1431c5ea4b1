package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/fleetml/fleet/runs"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

func sampleCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sample", flag.ContinueOnError)
	out := fs.String("out", "", "run folder written by fleet train (default: the newest run in "+config.DefaultRunsDir+")")
	weights := fs.String("weights", train.ModelFile, "weights file in the run folder ("+train.BestFile+" for the best val loss), or a GPT-2 safetensors file of its own (fleet's or Hugging Face's)")
	nHead := fs.Int("n-head", 0, "with --weights FILE: attention heads, where the width is not GPT-2's")
	tokSpec := fs.String("tokenizer", "", "with --weights FILE|DIR: the tokenizer (char:FILE, bpe:FILE, gpt2:FILE|DIR, hf:FILE|DIR; default for a Hugging Face folder: its tokenizer.json)")
	blockSize := fs.Int("block-size", 0, "with --weights DIR (a Hugging Face folder): the longest context kept, in tokens (0: the model's max_position_embeddings; the key/value cache holds this many positions)")
	prompt := fs.String("prompt", "\n", "text to continue")
	tokens := fs.Int("tokens", 500, "tokens to generate")
	temperature := fs.Float64("temperature", 0.8, "sampling temperature (> 0)")
	topK := fs.Int("top-k", 200, "sample from the k most likely tokens (0: all)")
	seed := fs.Uint64("seed", 1337, "random seed")
	device := fs.String("device", "auto", config.DeviceUsage())
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	var err error
	if *out, err = runDir(*out, *weights, stderr); err != nil {
		return err
	}
	if *tokens < 0 {
		return fmt.Errorf("--tokens must not be negative")
	}
	if *topK < 0 {
		return fmt.Errorf("--top-k must not be negative")
	}
	if standalone(*out, *weights) && *tokSpec == "" && !runs.HasHFTokenizer(*weights) {
		return fmt.Errorf("--weights %s: give --tokenizer to turn text into ids", *weights)
	}
	tr, err := loadModel(*out, *weights, *device, *nHead, *blockSize, *tokSpec, "")
	if err != nil {
		return err
	}
	text, err := generate(tr.Model, tr.Tokenizer, *prompt, *tokens, *temperature, *topK, *seed)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, text)
	return nil
}
