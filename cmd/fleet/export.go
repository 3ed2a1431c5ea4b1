package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/atomicfile"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

func exportCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	out := fs.String("out", "", "run folder written by fleet train (default: the newest run in "+config.DefaultRunsDir+")")
	weights := fs.String("weights", train.ModelFile, "weights file in the run folder, or a GPT-2 safetensors file of its own")
	nHead := fs.Int("n-head", 0, "with --weights FILE: attention heads, where the width is not GPT-2's")
	hf := fs.String("hf", "", "folder to write model.safetensors and config.json into, as transformers' GPT2LMHeadModel.from_pretrained loads them")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	var err error
	if *out, err = runDir(*out, *weights, stderr); err != nil {
		return err
	}
	if *hf == "" {
		return fmt.Errorf("give --hf DIR")
	}
	tr, err := loadModel(*out, *weights, "cpu", *nHead, "", "")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*hf, 0o755); err != nil {
		return fmt.Errorf("--hf %s: %w", *hf, err)
	}
	if err := checkpoint.Save(filepath.Join(*hf, "model.safetensors"), tr.Model.HFWeightsFile()); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(*hf, "config.json"), tr.Model.Config.HFConfigJSON()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s (GPT-2: %d layers, %d heads, %d embd, vocabulary %d, block %d)\n", *hf,
		tr.Model.Config.NLayer, tr.Model.Config.NHead, tr.Model.Config.NEmbd, tr.Model.Config.VocabSize, tr.Model.Config.BlockSize)
	return nil
}
