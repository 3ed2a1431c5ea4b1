package main

import (
	"flag"
	"fmt"
	"io"
	"math"

	"github.com/fleetml/fleet/runs"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

func evalCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	out := fs.String("out", "", "run folder written by fleet train (default: the newest run in "+config.DefaultRunsDir+")")
	dataPath := fs.String("data", "", "data whose validation split is evaluated: prepared data or token files (their val split), or text (its last 10%) (default: the run's own training data)")
	weights := fs.String("weights", train.ModelFile, "weights file in the run folder, a GPT-2 safetensors file of its own (fleet's or Hugging Face's), or a Hugging Face Llama, Mistral, Qwen2 or Qwen3 folder (these two need --data)")
	nHead := fs.Int("n-head", 0, "with --weights FILE: attention heads, where the width is not GPT-2's")
	tokSpec := fs.String("tokenizer", "", "with --weights FILE|DIR: how text becomes ids: char (the characters of --data), char:FILE, bpe:FILE, gpt2:FILE|DIR, hf:FILE|DIR (default: a Hugging Face folder's tokenizer.json, else char)")
	blockSize := fs.Int("block-size", 0, "with --weights DIR (a Hugging Face folder): the context, in tokens, of each evaluated window (0: the model's max_position_embeddings)")
	evalWindows := fs.Int("eval-windows", 0, "evaluate the first N windows (0: all)")
	batch := fs.Int("batch-size", 32, "windows per forward pass")
	device := fs.String("device", "auto", config.DeviceUsage())
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	var err error
	if *out, err = runDir(*out, *weights, stderr); err != nil {
		return err
	}
	if *batch <= 0 {
		return fmt.Errorf("--batch-size must be positive")
	}
	if *dataPath == "" && standalone(*out, *weights) {
		return fmt.Errorf("--weights %s: give --data to evaluate on", *weights)
	}
	tr, err := loadModel(*out, *weights, *device, *nHead, *blockSize, *tokSpec, *dataPath)
	if err != nil {
		return err
	}
	val, closeData, err := runs.EvalTokens(tr, *dataPath)
	if err != nil {
		return err
	}
	defer closeData()
	if *evalWindows < 0 {
		return fmt.Errorf("--eval-windows must not be negative")
	}
	val = runs.FirstWindows(val, *evalWindows, tr.Model.Config.BlockSize)
	loss, windows, err := runs.SequentialLoss(tr.Model, val, *batch)
	if err != nil {
		return fmt.Errorf("validation split: %w", err)
	}
	fmt.Fprintf(stderr, "evaluated %d windows of %d tokens\n", windows, tr.Model.Config.BlockSize)
	fmt.Fprintf(stdout, "val_loss=%.8g perplexity=%.8g\n", loss, math.Exp(loss))
	return nil
}
