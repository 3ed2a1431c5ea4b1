package config

import (
	"fmt"
	"strconv"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/units"
)

// DeviceUsage is the help of every command's --device: the devices are
// the registry's (backend.Choices), so every kind a driver linked in
// registers is listed.
func DeviceUsage() string {
	return "device: auto (cuda:0 when it works, else cpu), " + backend.Choices()
}

// Flags is the one declaration of fleet train's flags: fleet's commands
// register them from it (train all of them, bench and lab the model's and
// the step's), each bound to its Config field with the field's value in
// Default as its default, and the command names a field an error names by
// its flag here. config.json keeps nanoGPT's keys (Config's JSON tags).
var Flags = setting.Table[Config]{
	declare("data", "Data", "training data: a folder from fleet prepare; token files (a .bin file, or a folder of *train*.bin and *val*.bin); "+
		"or text, a file or a folder of files read in sorted order, tokenized by character (default: Go's standard-library source)", func(c *Config) any { return &c.Data }),
	declare("out", "Out", "the run's folder; one that holds a run is refused without --resume (default: a new folder "+DefaultRunsDir+"/run-NNN for each run)", func(c *Config) any { return &c.Out }),
	declare("vocab-size", "VocabSize", "model vocabulary (0: the data's); needed for token files without --tokenizer, and may pad (50304 for GPT-2)", func(c *Config) any { return &c.VocabSize }),
	declare("tokenizer", "Tokenizer", "tokenizer of token files without a manifest (char:FILE, bpe:FILE, gpt2:FILE|DIR, hf:FILE|DIR), recorded for sampling", func(c *Config) any { return &c.Tokenizer }),
	declare("data-workers", "DataWorkers", "goroutines drawing batches ahead of the trainer (0: min(4, CPUs))", func(c *Config) any { return &c.DataWorkers }),
	declare("prefetch", "Prefetch", "micro-batches drawn ahead (0: twice the data workers)", func(c *Config) any { return &c.Prefetch }),

	// The model and the step: train, bench and lab.
	{Name: "device", Field: "Device", UsageFunc: DeviceUsage, Bind: func(c *Config) any { return &c.Device }},
	declare("precision", "Precision", "matrix products in fp32, bf16 (bf16 activations and operands; f32 accumulation, statistics, loss and master weights), or fp16 (the same with f16 operands and dynamic loss scaling; emulated, slowly, on the CPU); bench also takes all: fp32 and bf16 side by side, and fp16 on a GPU", func(c *Config) any { return &c.Precision }),
	declare("n-layer", "NLayer", "number of Transformer blocks (lstm: LSTM layers)", func(c *Config) any { return &c.NLayer }),
	declare("n-head", "NHead", "attention heads per block", func(c *Config) any { return &c.NHead }),
	declare("n-embd", "NEmbd", "embedding width (lstm: also every layer's hidden size)", func(c *Config) any { return &c.NEmbd }),
	declare("block-size", "BlockSize", "context length in tokens", func(c *Config) any { return &c.BlockSize }),
	declare("dropout", "Dropout", "dropout probability", func(c *Config) any { return &c.Dropout }),
	declare("bias", "Bias", "use biases in Linear and LayerNorm layers (llama: in the attention's four projections, Hugging Face's attention_bias; lstm: the gates' bias, PyTorch's default)", func(c *Config) any { return &c.Bias }),
	declare("arch", "Arch", "model family: gpt2 (LayerNorm, learned positions, GELU MLP, tied head), llama (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention) or lstm (a multi-layer LSTM; see docs/models.md)", func(c *Config) any { return &c.Arch }),
	declare("n-kv-head", "NKVHead", "llama: key/value heads, dividing --n-head (0: --n-head; 1: multi-query)", func(c *Config) any { return &c.NKVHead }),
	declare("head-dim", "HeadDim", "llama: width of a head (0: --n-embd / --n-head)", func(c *Config) any { return &c.HeadDim }),
	declare("mlp", "MLP", "llama: the feed-forward, swiglu (gate and up projections, silu(gate)·up) or relu2 (an up projection, max(x, 0)²: modded-nanogpt's, Arcee's)", func(c *Config) any { return &c.MLP }),
	declare("mlp-hidden", "MLPHidden", "llama: the feed-forward's hidden width (0: 8/3 × --n-embd rounded up to a multiple of 8 for swiglu, 4 × --n-embd for relu2)", func(c *Config) any { return &c.MLPHidden }),
	declare("rope-theta", "RopeTheta", "llama: base of the rotary embeddings' frequencies (0: 10000)", func(c *Config) any { return &c.RopeTheta }),
	declare("norm-eps", "NormEps", "llama: RMSNorm's epsilon (0: 1e-5)", func(c *Config) any { return &c.NormEps }),
	declare("qk-norm", "QKNorm", "llama: RMS-normalise each head of q and k before the rotation (Qwen3's QK-norm)", func(c *Config) any { return &c.QKNorm }),
	declare("qkv-bias", "QKVBias", "llama: biases on q, k and v only (Qwen2's)", func(c *Config) any { return &c.QKVBias }),
	declare("tie-embeddings", "UntiedHead", "llama, lstm: the head's weight is the token embedding (false: a weight of its own)", func(c *Config) any { return negBool{&c.UntiedHead} }),
	declare("batch-size", "BatchSize", "micro-batch size per process, or auto: the largest that fits the device (real trial steps on a GPU; an estimate and --memory-limit on the CPU)", func(c *Config) any { return batchValue{c} }),
	declare("memory-limit", "MemoryLimit", "memory --batch-size auto may plan for on the CPU, e.g. 8GiB or 500MB (default: half the RAM)", func(c *Config) any { return bytesValue{&c.MemoryLimit} }),
	declare("recompute", "Recompute", "recompute each block in the backward pass (gradient checkpointing): much less activation memory, about 1.3× the step time", func(c *Config) any { return &c.Recompute }),
	declare("cuda-graphs", "CUDAGraphs", "on a CUDA device, capture the steady-state step into a CUDA graph and launch it each step (experimental: not yet run on a GPU; not with data parallelism or a pipeline)", func(c *Config) any { return &c.CUDAGraphs }),
	declare("grad-accum", "GradAccum", "micro-steps per optimizer step (default 1; --tokens-per-step sets it instead)", func(c *Config) any { return &c.GradAccum }),
	declare("lr", "LR", "peak learning rate", func(c *Config) any { return &c.LR }),
	declare("seed", "Seed", "random seed", func(c *Config) any { return &c.Seed }),

	declare("min-lr", "MinLR", "learning rate at the end of the cosine decay", func(c *Config) any { return &c.MinLR }),
	declare("warmup-iters", "WarmupIters", "linear warmup steps", func(c *Config) any { return &c.WarmupIters }),
	declare("lr-decay-iters", "LRDecayIters", "step where the cosine decay reaches min-lr (0: max-iters)", func(c *Config) any { return &c.LRDecayIters }),
	declare("max-iters", "MaxIters", "optimizer steps", func(c *Config) any { return &c.MaxIters }),
	declare("beta1", "Beta1", "AdamW beta1", func(c *Config) any { return &c.Beta1 }),
	declare("beta2", "Beta2", "AdamW beta2", func(c *Config) any { return &c.Beta2 }),
	declare("weight-decay", "WeightDecay", "AdamW weight decay on 2-D weights", func(c *Config) any { return &c.WeightDecay }),
	{Name: "recipe", Field: "Recipe", UsageFunc: recipeUsage, Bind: func(c *Config) any { return &c.Recipe }},
	declare("optimizer", "Optimizer", "adamw, or muon: Muon (momentum orthogonalised by Newton–Schulz) for the blocks' weight matrices, AdamW with the AdamW flags for the embeddings, head, norms and biases", func(c *Config) any { return &c.Optimizer }),
	declare("muon-lr", "MuonLR", "muon: the matrices' peak learning rate; the schedule scales it as it scales --lr (0: 0.02)", func(c *Config) any { return &c.MuonLR }),
	declare("muon-momentum", "MuonMomentum", "muon: Nesterov momentum (0: 0.95)", func(c *Config) any { return &c.MuonMomentum }),
	declare("muon-weight-decay", "MuonWeightDecay", "muon: decoupled weight decay of the matrices", func(c *Config) any { return &c.MuonWeightDecay }),
	declare("grad-clip", "GradClip", "clip the global gradient norm to this (0: off)", func(c *Config) any { return &c.GradClip }),
	declare("eval-interval", "EvalInterval", "steps between evaluations", func(c *Config) any { return &c.EvalInterval }),
	declare("eval-iters", "EvalIters", "batches per evaluation", func(c *Config) any { return &c.EvalIters }),
	declare("log-interval", "LogInterval", "steps between log lines", func(c *Config) any { return &c.LogInterval }),
	declare("corpus-bytes", "CorpusBytes", "size cap of the default corpus", func(c *Config) any { return &c.CorpusBytes }),
	declare("ckpt-interval", "CkptInterval", "save a checkpoint in OUT/checkpoints every N steps and at the end (0: only on SIGTERM/SIGINT)", func(c *Config) any { return &c.CkptInterval }),
	declare("keep", "Keep", "checkpoints to keep (0: all)", func(c *Config) any { return &c.Keep }),
	declare("init-from", "InitFrom", "start from the weights of a GPT-2 safetensors file (fleet's or Hugging Face's); its shape replaces the model flags left at their defaults (a shape flag given must be the file's), and --n-head is needed only for widths that are not GPT-2's", func(c *Config) any { return &c.InitFrom }),
	declare("tokens-per-step", "TokensPerStep", "global tokens per optimizer step; sets the accumulation to N / (batch-size × block-size × world size), which must divide exactly (0: use --grad-accum)", func(c *Config) any { return &c.TokensPerStep }),
	declare("tensorboard", "TensorBoard", "write TensorBoard event files (loss, val loss, perplexity, lr, tokens/s, MFU, utilisation, memory, grad norm, loss scale, phase times; samples as text) to this folder", func(c *Config) any { return &c.TensorBoard }),
	declare("metrics-addr", "MetricsAddr", "serve Prometheus metrics at http://ADDR/metrics; :PORT listens on 127.0.0.1 only, 0.0.0.0:PORT exposes them to the network", func(c *Config) any { return &c.MetricsAddr }),
	declare("comm-timeout", "CommTimeout", "data parallelism: how long any collective may wait for a peer before the run fails, naming it", func(c *Config) any { return &c.CommTimeout }),
	declare("dist-backend", "DistBackend", "data parallelism: how gradients are all-reduced: nccl (in device memory; CUDA), tcp (a ring through the host; any device), auto (nccl on CUDA without --pipeline, else tcp)", func(c *Config) any { return &c.DistBackend }),
	declare("bucket-mb", "BucketMB", "data parallelism: MiB of gradients per all-reduce bucket", func(c *Config) any { return &c.BucketMB }),
	declare("cpu-bf16", "CPUBF16", "bf16 on the CPU: amx (AMX tiles, TDPBF16PS), dot (AVX512-BF16's VDPBF16PS), widen (operands widened to f32), or auto: a resume's recorded product, else the fastest on this core of those that pass their self-check (rank 0 times them for the job); config.json and the checkpoints record the product run; fleet doctor lists them", func(c *Config) any { return &c.CPUBF16 }),
	declare("zero", "Zero", "data parallelism: 1 shards AdamW's state over the ranks (ZeRO-1: gradients reduce-scattered, each rank updates its shard, parameters all-gathered; 1/world of the optimizer memory); 0 keeps it whole on every rank", func(c *Config) any { return &c.Zero }),
	declare("pipeline", "Pipeline", "pipeline parallelism: stage devices, comma-separated (cuda:0,cuda:1; or logical cpu:0,cpu:1 for testing), each a contiguous range of blocks, the embeddings on the first, the head on the last", func(c *Config) any { return &c.Pipeline }),
	declare("micro-batches", "MicroBatches", "with --pipeline: pipeline micro-batches per --batch-size (which they must divide; 0: 1, the naive schedule)", func(c *Config) any { return &c.MicroBatches }),
	declare("pipeline-split", "PipelineSplit", "with --pipeline: blocks per stage, comma-separated, e.g. 3,5 (default: balanced by parameter count)", func(c *Config) any { return &c.PipelineSplit }),
	declare("pipeline-schedule", "PipelineSchedule", "with --pipeline: gpipe (default) or 1f1b", func(c *Config) any { return &c.PipelineSchedule }),
	declare("replicas", "Replicas", "one process's data parallelism over these devices, comma-separated (cuda:0,cuda:1; or logical cpu:0,cpu:1): the lecture's DataParallel, for comparing with fleet run's DDP; the first is the run's device, --batch-size the rows the replicas share", func(c *Config) any { return &c.Replicas }),
	declare("resume", "Resume", "continue the run in --out (default: the newest run in "+DefaultRunsDir+") from its newest checkpoint that verifies (from step 0 if it has none yet); refused where its checkpoints are all damaged, where it finished without one, and where the checkpoint does not fit the flags", func(c *Config) any { return &c.Resume }),
	declare("allow-changes", "AllowChanges", "with --resume: allow optimizer, schedule, batch, dropout and precision settings other than the checkpoint's; config.json records each change (a different model, tokenizer or data is refused either way)", func(c *Config) any { return &c.AllowChanges }),
}

// ModelFlags are the flags of the model and the step, which bench and lab
// take too.
var ModelFlags = []string{"device", "precision", "n-layer", "n-head", "n-embd", "block-size", "dropout", "bias",
	"arch", "n-kv-head", "head-dim", "mlp", "mlp-hidden", "rope-theta", "norm-eps", "qk-norm", "qkv-bias", "tie-embeddings",
	"batch-size", "memory-limit", "recompute", "cuda-graphs", "grad-accum", "lr", "seed",
	"optimizer", "muon-lr", "muon-momentum", "muon-weight-decay"}

// declare is one entry of Flags.
func declare(name, field, usage string, bind func(*Config) any) setting.Flag[Config] {
	return setting.Flag[Config]{Name: name, Field: field, Usage: usage, Bind: bind}
}

// batchValue is --batch-size: a positive integer, or auto (BatchAuto).
type batchValue struct{ c *Config }

func (f batchValue) String() string {
	if f.c == nil {
		return ""
	}
	if f.c.BatchAuto {
		return "auto"
	}
	return strconv.Itoa(f.c.BatchSize)
}

func (f batchValue) Set(s string) error {
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

// negBool is a boolean flag bound to a field that holds its negation
// (--tie-embeddings, UntiedHead: the field's zero value is the flag's
// default, true).
type negBool struct{ b *bool }

func (f negBool) String() string   { return strconv.FormatBool(f.b == nil || !*f.b) }
func (f negBool) IsBoolFlag() bool { return true }

func (f negBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*f.b = !v
	return nil
}

// bytesValue is a size in bytes with an optional unit (units.ParseBytes).
type bytesValue struct{ n *int64 }

func (f bytesValue) String() string {
	if f.n == nil || *f.n == 0 {
		return "0"
	}
	return strconv.FormatInt(*f.n, 10)
}

func (f bytesValue) Set(s string) error {
	n, err := units.ParseBytes(s)
	if err != nil {
		return err
	}
	*f.n = n
	return nil
}
