package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetml/fleet/internal/atomicfile"
	"github.com/fleetml/fleet/train/config"

	"github.com/fleetml/fleet/lab"
	"github.com/fleetml/fleet/train"
)

// labCmd is `fleet bench lab`: the lecture's performance experiments,
// measured here, printed as tables and written to DIR/lab.json.
func labCmd(args []string, stdout, stderr io.Writer) error {
	c := train.Default()
	fs := flag.NewFlagSet("bench lab", flag.ContinueOnError)
	config.Flags.Register(fs, &c, config.ModelFlags...)
	config.Flags.RegisterUsage(fs, &c, "bucket-mb", "the dataparallel experiment's DDP: MiB of gradients per all-reduce bucket")
	out := fs.String("out", "lab", "folder for lab.json (fleet report DIR plots it)")
	quick := fs.Bool("quick", false, "smaller and fewer sizes: about 30 s on two CPU cores")
	vocab := fs.Int("vocab-size", 65, "vocabulary of the random tokens the training experiments use")
	maxMiB := fs.Int64("max-mib", 0, "largest vector-add working set in MiB (0: 1024, 64 with --quick; at most an eighth of the device's memory)")
	maxBatch := fs.Int("max-batch", 0, "largest batch of the batch-size sweep (0: 64 on the CPU, 1024 on a GPU, 4 with --quick)")
	maxStep := fs.Float64("max-step-ms", 2000, "end the batch-size sweep once a step takes longer than this")
	accumBatch := fs.Int("accum-batch", 4, "micro-batch B of the gradient accumulation experiment")
	accumSteps := fs.Int("accum-steps", 4, "accumulation steps k: B×k as one batch against k micro-batches of B")
	only := fs.String("only", "", "run only these experiments, comma-separated: "+strings.Join(lab.Experiments, ", "))
	dpDevices := fs.Int("dp-devices", 0, "devices of the dataparallel experiment (0: 2; 4 of a simulated GPU)")
	recapSec := fs.Float64("recap-seconds", 0, "wall-clock budget of each model of the recap experiment (0: 60, 4 with --quick)")
	fs.StringVar(&c.Data, "data", "", "training data of the dataparallel and recap experiments, as fleet train takes it (default: fleet train's default corpus)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: fleet bench lab [flags]\n\n"+
			"Measures a GPU-performance lecture's examples on this machine: vector-add bandwidth from cache to DRAM,\n"+
			"matmul TFLOP/s against the peak, pageable vs pinned uploads, a batch-size sweep, fp32 vs bf16 steps,\n"+
			"gradient accumulation, the GPU's speed-up over the CPU, and one device against DataParallel (--replicas) and DDP\n"+
			"(fleet run) on the same devices, and an n-gram, an LSTM and the Transformer trained for the same time on the same\n"+
			"data (recap). The model flags shape the training experiments.\n\n")
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *vocab <= 0 || *maxMiB < 0 || *maxBatch < 0 || *maxStep < 0 || *accumBatch <= 0 || *accumSteps <= 0 {
		return fmt.Errorf("--vocab-size, --accum-batch and --accum-steps must be positive, --max-mib, --max-batch and --max-step-ms not negative")
	}
	if c.Precision != "fp32" {
		return fmt.Errorf("--precision: the lab runs fp32 and bf16 itself")
	}
	if c.GradAccum > 1 {
		return fmt.Errorf("--grad-accum: the lab's accumulation experiment takes --accum-batch and --accum-steps")
	}
	var onlyList []string
	if *only != "" {
		onlyList = strings.Split(*only, ",")
		if err := lab.CheckOnly(onlyList); err != nil {
			return fmt.Errorf("--only: %w", err)
		}
	}
	if *recapSec < 0 {
		return fmt.Errorf("--recap-seconds must not be negative")
	}
	if *dpDevices < 0 || *dpDevices == 1 {
		return fmt.Errorf("--dp-devices %d: give 2 or more (0: the default)", *dpDevices)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding the fleet binary for the training modes: %v", err)
	}
	res, err := lab.Run(lab.Options{
		Device: c.Device, Quick: *quick, Model: c, Vocab: *vocab,
		MaxBytes: *maxMiB << 20, MaxBatch: *maxBatch, MaxStepMs: *maxStep,
		AccumBatch: *accumBatch, AccumSteps: *accumSteps, Log: stdout,
		Only: onlyList, Fleet: self, DPDevices: *dpDevices, Data: c.Data, RecapSeconds: *recapSec,
	})
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(*out, "lab.json")
	if err := atomicfile.WriteFile(path, append(b, '\n')); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s (%.0f s); fleet report %s plots it\n", path, res.ElapsedSec, *out)
	return nil
}
