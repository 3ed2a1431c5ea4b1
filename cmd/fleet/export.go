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
	hf := fs.String("hf", "", "folder to write model.safetensors and config.json into, as transformers' from_pretrained loads them: GPT2LMHeadModel for --arch gpt2; for --arch llama LlamaForCausalLM, Qwen2ForCausalLM (q/k/v biases) or Qwen3ForCausalLM (QK-norm), in BF16 where the run trained in bf16")
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
	tr, err := loadModel(*out, *weights, "cpu", *nHead, 0, "", "")
	if err != nil {
		return err
	}
	prec, _ := config.ParsePrecision(tr.Config.Train.Precision)
	bf16 := prec == config.BF16 // the weights as the run's products read them
	wf, cfg, err := tr.Model.HFFolder(bf16)
	if err != nil {
		return fmt.Errorf("--hf %s: %w", *hf, err)
	}
	if err := os.MkdirAll(*hf, 0o755); err != nil {
		return fmt.Errorf("--hf %s: %w", *hf, err)
	}
	if err := checkpoint.Save(filepath.Join(*hf, "model.safetensors"), wf); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(*hf, "config.json"), cfg); err != nil {
		return err
	}
	mc := tr.Model.Config
	fmt.Fprintf(stdout, "wrote %s (%s: %d layers, %d heads, %d embd, vocabulary %d, block %d)\n", *hf,
		mc.Family(), mc.NLayer, mc.NHead, mc.NEmbd, mc.VocabSize, mc.BlockSize)
	return nil
}
