package main

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"github.com/fleetml/fleet/dist"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/fleetml/fleet/launch"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
)

// modelFlags registers the flags shared by train and bench.
func modelFlags(fs *flag.FlagSet, c *train.Config) {
	fs.StringVar(&c.Device, "device", c.Device, deviceHelp())
	fs.StringVar(&c.Precision, "precision", c.Precision, "matrix products in fp32, bf16 (bf16 activations and operands; f32 accumulation, statistics, loss and master weights), or fp16 (the same with f16 operands and dynamic loss scaling; emulated, slowly, on the CPU); bench also takes all: fp32 and bf16 side by side, and fp16 on a GPU")
	fs.IntVar(&c.NLayer, "n-layer", c.NLayer, "number of Transformer blocks")
	fs.IntVar(&c.NHead, "n-head", c.NHead, "attention heads per block")
	fs.IntVar(&c.NEmbd, "n-embd", c.NEmbd, "embedding width")
	fs.IntVar(&c.BlockSize, "block-size", c.BlockSize, "context length in tokens")
	fs.Float64Var(&c.Dropout, "dropout", c.Dropout, "dropout probability")
	fs.BoolVar(&c.Bias, "bias", c.Bias, "use biases in Linear and LayerNorm layers")
	fs.Var(batchFlag{c}, "batch-size", "micro-batch size per process, or auto: the largest that fits the device (real trial steps on a GPU; an estimate and --memory-limit on the CPU)")
	fs.Var(bytesFlag{&c.MemoryLimit}, "memory-limit", "memory --batch-size auto may plan for on the CPU, e.g. 8GiB or 500MB (default: half the RAM)")
	fs.BoolVar(&c.Recompute, "recompute", c.Recompute, "recompute each block in the backward pass (gradient checkpointing): much less activation memory, about 1.3× the step time")
	fs.BoolVar(&c.CUDAGraphs, "cuda-graphs", c.CUDAGraphs, "on a CUDA device, capture the steady-state step into a CUDA graph and launch it each step (experimental: not yet run on a GPU; not with data parallelism or a pipeline)")
	fs.IntVar(&c.GradAccum, "grad-accum", c.GradAccum, "micro-steps per optimizer step (default 1; --tokens-per-step sets it instead)")
	fs.Float64Var(&c.LR, "lr", c.LR, "peak learning rate")
	fs.Uint64Var(&c.Seed, "seed", c.Seed, "random seed")
}

// batchFlag is --batch-size: a positive integer or auto.
type batchFlag struct{ c *train.Config }

func (f batchFlag) String() string {
	if f.c == nil {
		return ""
	}
	if f.c.BatchAuto {
		return "auto"
	}
	return strconv.Itoa(f.c.BatchSize)
}

func (f batchFlag) Set(s string) error {
	if s == "auto" {
		f.c.BatchAuto = true
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return fmt.Errorf("want a positive integer or auto")
	}
	f.c.BatchSize, f.c.BatchAuto = n, false
	return nil
}

// bytesFlag is a size in bytes with an optional unit: B, KB, MB, GB, TB
// (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024); K, M, G, T
// alone are binary.
type bytesFlag struct{ n *int64 }

func (f bytesFlag) String() string {
	if f.n == nil || *f.n == 0 {
		return "0"
	}
	return strconv.FormatInt(*f.n, 10)
}

func (f bytesFlag) Set(s string) error {
	n, err := parseBytes(s)
	if err != nil {
		return err
	}
	*f.n = n
	return nil
}

func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := len(t)
	for i > 0 && (t[i-1] < '0' || t[i-1] > '9') {
		i--
	}
	mult := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
		"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[strings.ToUpper(strings.TrimSpace(t[i:]))]
	v, err := strconv.ParseFloat(t[:i], 64)
	if err != nil || mult == 0 || v < 0 {
		return 0, fmt.Errorf("want a size such as 8GiB, 500MB or 1073741824, got %q", s)
	}
	return int64(v * mult), nil
}

func trainCmd(args []string, stdout, stderr io.Writer) error {
	c := train.Default()
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.StringVar(&c.Data, "data", "", "training data: a folder from fleet prepare; token files (a .bin file, or a folder of *train*.bin and *val*.bin); "+
		"or text, a file or a folder of files read in sorted order, tokenized by character (default: Go's standard-library source)")
	fs.StringVar(&c.Out, "out", "", "the run's folder; one that holds a run is refused without --resume (default: a new folder "+train.DefaultRunsDir+"/run-NNN for each run)")
	fs.IntVar(&c.VocabSize, "vocab-size", c.VocabSize, "model vocabulary (0: the data's); needed for token files without --tokenizer, and may pad (50304 for GPT-2)")
	fs.StringVar(&c.Tokenizer, "tokenizer", c.Tokenizer, "tokenizer of token files without a manifest (char:FILE, bpe:FILE, gpt2:FILE|DIR), recorded for sampling")
	fs.IntVar(&c.DataWorkers, "data-workers", c.DataWorkers, "goroutines drawing batches ahead of the trainer (0: min(4, CPUs))")
	fs.IntVar(&c.Prefetch, "prefetch", c.Prefetch, "micro-batches drawn ahead (0: twice the data workers)")
	modelFlags(fs, &c)
	fs.Float64Var(&c.MinLR, "min-lr", c.MinLR, "learning rate at the end of the cosine decay")
	fs.IntVar(&c.WarmupIters, "warmup-iters", c.WarmupIters, "linear warmup steps")
	fs.IntVar(&c.LRDecayIters, "lr-decay-iters", c.LRDecayIters, "step where the cosine decay reaches min-lr (0: max-iters)")
	fs.IntVar(&c.MaxIters, "max-iters", c.MaxIters, "optimizer steps")
	fs.Float64Var(&c.Beta1, "beta1", c.Beta1, "AdamW beta1")
	fs.Float64Var(&c.Beta2, "beta2", c.Beta2, "AdamW beta2")
	fs.Float64Var(&c.WeightDecay, "weight-decay", c.WeightDecay, "AdamW weight decay on 2-D weights")
	fs.Float64Var(&c.GradClip, "grad-clip", c.GradClip, "clip the global gradient norm to this (0: off)")
	fs.IntVar(&c.EvalInterval, "eval-interval", c.EvalInterval, "steps between evaluations")
	fs.IntVar(&c.EvalIters, "eval-iters", c.EvalIters, "batches per evaluation")
	fs.IntVar(&c.LogInterval, "log-interval", c.LogInterval, "steps between log lines")
	fs.IntVar(&c.CorpusBytes, "corpus-bytes", c.CorpusBytes, "size cap of the default corpus")
	fs.IntVar(&c.CkptInterval, "ckpt-interval", c.CkptInterval, "save a checkpoint in OUT/checkpoints every N steps and at the end (0: only on SIGTERM/SIGINT)")
	fs.IntVar(&c.Keep, "keep", c.Keep, "checkpoints to keep (0: all)")
	fs.StringVar(&c.InitFrom, "init-from", "", "start from the weights of a GPT-2 safetensors file (fleet's or Hugging Face's); its shape replaces the model flags, and --n-head is needed only for widths that are not GPT-2's")
	fs.IntVar(&c.TokensPerStep, "tokens-per-step", 0, "global tokens per optimizer step; sets the accumulation to N / (batch-size × block-size × world size), which must divide exactly (0: use --grad-accum)")
	fs.StringVar(&c.TensorBoard, "tensorboard", "", "write TensorBoard event files (loss, val loss, perplexity, lr, tokens/s, MFU, utilisation, memory, grad norm, loss scale, phase times; samples as text) to this folder")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics; :PORT listens on 127.0.0.1 only, 0.0.0.0:PORT exposes them to the network")
	fs.DurationVar(&c.CommTimeout, "comm-timeout", dist.DefaultTimeout, "data parallelism: how long any collective may wait for a peer before the run fails, naming it")
	fs.StringVar(&c.DistBackend, "dist-backend", "auto", "data parallelism: how gradients are all-reduced: nccl (in device memory; CUDA), tcp (a ring through the host; any device), auto (nccl on CUDA without --pipeline, else tcp)")
	fs.IntVar(&c.BucketMB, "bucket-mb", c.BucketMB, "data parallelism: MiB of gradients per all-reduce bucket")
	fs.StringVar(&c.CPUBF16, "cpu-bf16", orAuto(c.CPUBF16), "bf16 on the CPU: dot (AVX512-BF16's VDPBF16PS), widen (operands widened to f32), or auto: a resume's recorded product, else the faster on this core (rank 0 times it for the job); config.json and the checkpoints record the product run")
	fs.IntVar(&c.Zero, "zero", c.Zero, "data parallelism: 1 shards AdamW's state over the ranks (ZeRO-1: gradients reduce-scattered, each rank updates its shard, parameters all-gathered; 1/world of the optimizer memory); 0 keeps it whole on every rank")
	fs.StringVar(&c.Pipeline, "pipeline", "", "pipeline parallelism: stage devices, comma-separated (cuda:0,cuda:1; or logical cpu:0,cpu:1 for testing), each a contiguous range of blocks, the embeddings on the first, the head on the last")
	fs.IntVar(&c.MicroBatches, "micro-batches", 0, "with --pipeline: pipeline micro-batches per --batch-size (which they must divide; 0: 1, the naive schedule)")
	fs.StringVar(&c.PipelineSplit, "pipeline-split", "", "with --pipeline: blocks per stage, comma-separated, e.g. 3,5 (default: balanced by parameter count)")
	fs.StringVar(&c.PipelineSchedule, "pipeline-schedule", "", "with --pipeline: gpipe (default) or 1f1b")
	fs.BoolVar(&c.Resume, "resume", false, "continue the run in --out (default: the newest run in "+train.DefaultRunsDir+") from its newest checkpoint that verifies (from step 0 if it has none yet); refused where its checkpoints are all damaged, where it finished without one, and where the checkpoint does not fit the flags")
	fs.BoolVar(&c.AllowChanges, "allow-changes", false, "with --resume: allow optimizer, schedule, batch, dropout and precision settings other than the checkpoint's; config.json records each change (a different model, tokenizer or data is refused either way)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if c.InitFrom != "" {
		heads := false
		fs.Visit(func(f *flag.Flag) { heads = heads || f.Name == "n-head" })
		if !heads {
			c.NHead = 0 // inferred from the file
		}
	}
	place, err := c.Place() // --device and --pipeline, resolved once
	if err != nil {
		return err
	}
	c.Placement = &place
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
	if s.Simulated {
		fmt.Fprintf(stdout, "\ndone: %d steps in %.1f s, %.0f tokens/s (the host's, on a simulated GPU; losses n/a)\n",
			s.Steps, s.ElapsedSec, s.TokensPerSec)
		fmt.Fprintf(stdout, "wrote %s (logs, telemetry and summary; no weights)\n", res.Dir)
		return nil
	}
	fmt.Fprintf(stdout, "\ndone: %d steps in %.1f s, %.0f tokens/s (median), best val loss %.4f, val perplexity %.3f\n",
		s.Steps, s.ElapsedSec, s.TokensPerSec, s.BestValLoss, s.ValPerplexity)
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
	if c.Placement != nil { // each process of a node on devices of its own
		pl := c.Placement.ForLocalRank(slot, c.Device != "auto" && c.Device != "cuda")
		pl.Record(c)
		c.Placement = &pl
	}
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
	out, err := m.Generate(ids, n, model.Sampling{Temperature: temperature, TopK: topK, RNG: tensor.NewRNG(seed)})
	if err != nil {
		return "", err
	}
	return tok.Decode(out), nil
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
