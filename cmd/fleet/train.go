package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/fleetml/fleet/launch"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

func trainCmd(args []string, stdout, stderr io.Writer) error {
	c := train.Default()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	config.Flags.Register(fs, &c)
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { // the settings given: --init-from replaces the others' defaults
		if fl, ok := config.Flags.Lookup(f.Name); ok {
			c.Given = append(c.Given, fl.Field)
		}
	})
	if err := c.ApplyRecipe(); err != nil {
		return err
	}
	if c.InitFrom != "" && !slices.Contains(c.Given, "NHead") {
		c.NHead = 0 // inferred from the file
	}
	if err := joinJob(&c, stderr); err != nil {
		return err
	}
	stop, release := stopOnSignal(stderr)
	defer release()
	c.Stop = stop
	c.AfterStep = faultExit(c.Rank, stderr)
	res, err := train.Run(c, stdout)
	if err != nil {
		return err
	}
	s := res.Summary
	if c.Rank != 0 {
		return nil // rank 0 reports for the group
	}
	rate := fmt.Sprintf("%.0f tokens/s", s.TokensPerSec)
	if w := max(c.WorldSize, 1); w > 1 { // the summary's rate is per rank, as the log's
		rate = fmt.Sprintf("%.0f tokens/s per rank, %.0f in all", s.TokensPerSec, s.TokensPerSec*float64(w))
	}
	if s.Simulated {
		fmt.Fprintf(stdout, "\ndone: %d steps in %.1f s, %s (the host's, on a simulated GPU; losses n/a)\n",
			s.Steps, s.ElapsedSec, rate)
		fmt.Fprintf(stdout, "wrote %s (logs, telemetry and summary; no weights)\n", res.Dir)
		return nil
	}
	fmt.Fprintf(stdout, "\ndone: %d steps in %.1f s, %s (median), best val loss %.4f, val perplexity %.3f\n",
		s.Steps, s.ElapsedSec, rate, s.BestValLoss, s.ValPerplexity)
	fmt.Fprintf(stdout, "wrote %s\n", res.Dir)
	prompt, err := res.Tokenizer.Encode("\n")
	if err != nil || len(prompt) == 0 {
		prompt = []int32{0}
	}
	out, err := res.Model.Generate(prompt, 300, model.Sampling{Temperature: 0.8, TopK: 200, RNG: tensor.NewRNG(c.Seed)})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nsample:\n%s\n", res.Tokenizer.Decode(out))
	return nil
}

// joinJob places the run in a data-parallel job from the environment its
// launcher set (fleet run, torchrun, srun, a Kubeflow PyTorchJob): rank,
// world, rendezvous and secret; a restarted group resumes from the latest
// checkpoint; each process of a node takes its own GPU.
func joinJob(c *train.Config, stderr io.Writer) error {
	env, err := launch.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	for _, w := range env.Warnings {
		fmt.Fprintf(stderr, "warning: %s\n", w)
	}
	// A launcher's restart continues the job, in any world size: from the
	// latest checkpoint, or from step 0 where there is none yet.
	if env.Secret != "" { // the job's id in config.json: a restart finds the job's own run
		sum := sha256.Sum256([]byte("fleet job id\n" + env.Secret))
		c.JobID = hex.EncodeToString(sum[:8])
	}
	if env.RestartCount > 0 {
		c.Restart = true
		if !c.Resume {
			fmt.Fprintf(stderr, "restart %d of the job: resuming from the latest checkpoint\n", env.RestartCount)
			c.Resume = true
		}
	}
	c.Elastic = os.Getenv(launch.EnvElastic) == "1"
	slot := env.LocalRank // the devices of a node's process k, unless a shrink renumbered the processes
	if v := os.Getenv(launch.EnvLocalDevice); v != "" {
		if slot, err = strconv.Atoi(v); err != nil || slot < 0 {
			return fmt.Errorf("%s=%q: want a device slot (0, 1, ...)", launch.EnvLocalDevice, v)
		}
	}
	c.LocalDevice = slot // each process of a node on devices of its own
	if env.WorldSize <= 1 {
		return nil
	}
	if env.Secret == "" {
		return fmt.Errorf("this %d-process job has no secret, so its rendezvous could not refuse strangers: start it with fleet run, with torchrun --standalone (or --rdzv_id ID), or export FLEET_JOB_SECRET with the same random value (e.g. openssl rand -hex 32) to every process", env.WorldSize)
	}
	c.Rank, c.WorldSize = env.Rank, env.WorldSize
	c.MasterAddr, c.MasterPort, c.Secret = env.MasterAddr, env.MasterPort, env.Secret
	return nil
}

// generate samples n tokens after prompt.
func generate(m *model.GPT, tok interface {
	Encode(string) ([]int32, error)
	Decode([]int32) string
}, prompt string, n int, temperature float64, topK int, seed uint64) (string, error) {
	ids, err := tok.Encode(prompt)
	if err != nil {
		return "", fmt.Errorf("--prompt: %w", err)
	}
	// A tokenizer whose sequences start with a token of their own (a
	// Hugging Face folder's BOS) starts the prompt with it, as the model
	// was trained; the text printed leaves it out.
	bos := 0
	if b, ok := tok.(interface{ BOS() (int32, bool) }); ok {
		if id, ok := b.BOS(); ok {
			ids, bos = append([]int32{id}, ids...), 1
		}
	}
	out, err := m.Generate(ids, n, model.Sampling{Temperature: temperature, TopK: topK, RNG: tensor.NewRNG(seed)})
	if err != nil {
		return "", err
	}
	return tok.Decode(out[bos:]), nil
}

// faultExit is a fault-injection hook for tests of failure handling: with
// FLEET_FAULT_EXIT=RANK:STEP in the environment, that rank's process exits
// with status 3 right after step STEP of the job's first attempt
// (TORCHELASTIC_RESTART_COUNT unset or 0), as a crashed process would;
// RANK:STEP:N does so in each of the first N attempts (a rank that fails
// again after a restart). It returns nil (no hook) otherwise.
func faultExit(rank int, stderr io.Writer) func(done int) {
	var r, step int
	attempts := 1
	spec := os.Getenv("FLEET_FAULT_EXIT")
	if _, err := fmt.Sscanf(spec, "%d:%d:%d", &r, &step, &attempts); err != nil {
		attempts = 1
		if _, err := fmt.Sscanf(spec, "%d:%d", &r, &step); err != nil {
			return nil
		}
	}
	if r != rank {
		return nil
	}
	if n, _ := strconv.Atoi(os.Getenv("TORCHELASTIC_RESTART_COUNT")); n >= attempts {
		return nil
	}
	return func(done int) {
		if done == step {
			fmt.Fprintf(stderr, "FLEET_FAULT_EXIT: rank %d exits after step %d\n", rank, step)
			os.Exit(3)
		}
	}
}
