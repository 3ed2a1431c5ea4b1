// Command fleet trains, evaluates, samples and benchmarks GPT language
// models. Run `fleet help` for the commands.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/launch"
	"github.com/fleetml/fleet/train"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `fleet trains GPT language models.

Usage: fleet COMMAND [flags]

Commands:
  tokenizer  train a BPE tokenizer, or encode and decode text with one
  prepare    tokenize text files into token shards for train --data
  run        launch a data-parallel job: one process per device, torchrun's environment, restarts
  train      train a model (with no flags: a small char-level GPT on Go's own source)
  sample     generate text from a trained model
  eval       evaluate a trained model's validation loss and perplexity
  ngram      a Kneser-Ney n-gram baseline: its val perplexity on prepared data
  export     write a model as a Hugging Face GPT-2 folder (weights and config.json)
  bench      time training steps of a model configuration; bench lab measures the machine (bandwidth, FLOP/s, batch sweep)
  doctor     report the NVIDIA driver, libraries and GPUs, and whether training on the GPU will work
  smi        show GPU (or, without one, CPU) utilisation, memory and processes; --watch 2s to refresh
  diagnose   name what held a run back (from RUN_DIR/telemetry.json) and the flag that fixes it
  report     write a run's folder as one self-contained HTML page with its plots and diagnosis

Run fleet COMMAND -h for a command's flags.
`

// errUsage marks errors already reported with usage; they exit with 2.
var errUsage = errors.New("usage")

// run is the whole command, separated from main for tests. It returns the
// exit status: 0 success, 1 failure, 2 bad usage, launch.ExitStopped (75)
// when training was asked to stop and stopped with its checkpoint.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "tokenizer":
		err = tokenizerCmd(args[1:], stdout, stderr)
	case "prepare":
		err = prepareCmd(args[1:], stdout, stderr)
	case "run":
		err = runCmd(args[1:], stdout, stderr)
	case "train":
		err = trainCmd(args[1:], stdout, stderr)
	case "sample":
		err = sampleCmd(args[1:], stdout, stderr)
	case "eval":
		err = evalCmd(args[1:], stdout, stderr)
	case "ngram":
		err = ngramCmd(args[1:], stdout, stderr)
	case "export":
		err = exportCmd(args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(args[1:], stdout, stderr)
	case "doctor":
		err = doctorCmd(args[1:], stdout, stderr)
	case "smi":
		err = smiCmd(args[1:], stdout, stderr)
	case "diagnose":
		err = diagnoseCmd(args[1:], stdout, stderr)
	case "report":
		err = reportCmd(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "fleet: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "fleet %s: %s\n", args[0], setting.Message(err, flagName))
	if errors.Is(err, train.ErrInterrupted) {
		return launch.ExitStopped // stopped with a checkpoint: resume to continue
	}
	var ec interface{ ExitCode() int } // fleet run: the failing process's status
	if errors.As(err, &ec) && ec.ExitCode() > 0 {
		return ec.ExitCode()
	}
	return 1
}

// parse parses flags, reporting errors and stray arguments as usage errors.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "fleet %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return finiteFlags(fs)
}

// finiteFlags refuses a float flag set to NaN or ±Inf, which Go's flag
// package parses like any number. No command's float setting means
// anything at NaN or infinity, and checked here, before any command
// starts, none can write a file with one (JSON cannot even hold it).
func finiteFlags(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		g, ok := f.Value.(flag.Getter)
		if !ok || err != nil {
			return
		}
		if v, ok := g.Get().(float64); ok && (math.IsNaN(v) || math.IsInf(v, 0)) {
			err = fmt.Errorf("--%s %v: want a finite number", f.Name, v)
		}
	})
	return err
}
