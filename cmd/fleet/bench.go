package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/fleetml/fleet/train"
)

func benchCmd(args []string, stdout, stderr io.Writer) error {
	c := train.Default()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	modelFlags(fs, &c)
	vocab := fs.Int("vocab-size", 65, "vocabulary size (random tokens)")
	steps := fs.Int("steps", 30, "timed training steps")
	warmup := fs.Int("warmup", 5, "untimed steps first")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *vocab <= 0 {
		return fmt.Errorf("--vocab-size must be positive")
	}
	r, err := train.Benchmark(c, *vocab, *warmup, *steps)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "device %s | %d layers, %d heads, %d embd, block %d, batch %d×%d | %.2fM params\n",
		r.Device, c.NLayer, c.NHead, c.NEmbd, c.BlockSize, c.BatchSize, c.GradAccum, float64(r.NumParams)/1e6)
	fmt.Fprintf(stdout, "%.2f ms/step | %.0f tokens/s | %.1f GFLOP/s (%.2f MFLOP/token, medians of %d steps)\n",
		r.MsPerStep, r.TokensPerSec, r.GFLOPs, r.FLOPsPerToken/1e6, *steps)
	return nil
}
