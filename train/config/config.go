package config

import (
	"fmt"
	"math"
	"time"

	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
)

// Config is one training run. Field names follow nanoGPT's config keys;
// the JSON form is what config.json and summary.json hold.
type Config struct {
	// Data is what to train on: a folder written by fleet prepare (with a
	// manifest), token files (a .bin file, llm.c shard or raw nanoGPT
	// uint16 ids, or a folder of *train*.bin and *val*.bin files), or
	// text (a file, or a folder of files), which is tokenized by
	// character. "" means the embedded default corpus.
	Data string `json:"data"`
	// VocabSize is the model's vocabulary. 0 means the data's (the
	// manifest's, the tokenizer's, or the characters of the text); token
	// files without a manifest need it or Tokenizer. Larger than the
	// data's, it pads the embedding (nanoGPT's 50304 for GPT-2).
	VocabSize int `json:"vocab_size,omitempty"`
	// Tokenizer is the spec of the tokenizer of token files without a
	// manifest (bpe:FILE, gpt2:FILE, ...), recorded so that the run can be
	// sampled.
	Tokenizer string `json:"tokenizer,omitempty"`
	// DataWorkers draw training batches ahead of the trainer (0: min(4,
	// CPUs)); Prefetch is how many micro-batches they draw ahead (0:
	// twice the workers).
	DataWorkers int `json:"data_workers,omitempty"`
	Prefetch    int `json:"prefetch,omitempty"`
	// Rank and WorldSize place this process in a data-parallel group (0
	// and 1 alone): it trains on its own part of every global batch.
	Rank      int `json:"rank,omitempty"`
	WorldSize int `json:"world_size,omitempty"`
	// MasterAddr and MasterPort locate rank 0's rendezvous store, Secret
	// is the job's shared secret (never written out), CommTimeout bounds
	// every collective (0: dist.DefaultTimeout), and BucketMB is the size
	// of the gradient buckets all-reduced during backward.
	MasterAddr  string        `json:"-"`
	MasterPort  int           `json:"-"`
	Secret      string        `json:"-"`
	CommTimeout time.Duration `json:"comm_timeout,omitempty"`
	// DistBackend carries the gradients: tcp (a ring through the host,
	// any device), nccl (device memory, CUDA), or auto (nccl on CUDA
	// without a pipeline, else tcp).
	DistBackend string `json:"dist_backend,omitempty"`
	BucketMB    int    `json:"bucket_mb,omitempty"`
	// Zero 1 shards AdamW's state over the data-parallel group (ZeRO-1):
	// gradients are reduce-scattered, each rank updates its contiguous
	// shard of the flat parameters, keeping only that shard's moments,
	// and the updated parameters are all-gathered. 0 is plain DDP.
	Zero int `json:"zero,omitempty"`

	// Out is the run's folder, where its files go directly. Empty, the run
	// gets a new numbered folder of its own under Runs (default
	// DefaultRunsDir), or, resuming, continues the newest one there. A
	// folder that holds a run is refused unless the run resumes.
	Out    string `json:"out"`
	Runs   string `json:"runs,omitempty"`
	Device string `json:"device"` // auto, or a device backend.ParseDevice takes (backend.Choices)
	// Precision of the matrix products: fp32, bf16 (BF16 operands, F32
	// accumulation; master weights, norms, loss and optimizer in F32), or
	// fp16 (the same with F16 operands and dynamic loss scaling).
	Precision string `json:"precision"`
	// CPUBF16 is the CPU's BF16 product under bf16 on the CPU: amx (AMX
	// tiles, TDPBF16PS), dot (AVX512-BF16's VDPBF16PS), widen (operands
	// widened to F32, the F32 product), or auto ("" too): on a resume the
	// checkpoint's, else the fastest on this core of those that passed
	// their self-check, timed by rank 0 for the job. The run resolves it,
	// so config.json and its checkpoints record the product it ran: they
	// sum in different orders, and a resume, or a rank, that ran another
	// would not continue the run bit for bit.
	CPUBF16 string `json:"cpu_bf16,omitempty"`

	NLayer    int     `json:"n_layer"`
	NHead     int     `json:"n_head"`
	NEmbd     int     `json:"n_embd"`
	BlockSize int     `json:"block_size"`
	Dropout   float64 `json:"dropout"`
	Bias      bool    `json:"bias"`
	// The model family and its pieces (model.Config): gpt2 (the default,
	// which has none of the others) or llama.
	Arch       string  `json:"arch,omitempty"`
	NKVHead    int     `json:"n_kv_head,omitempty"`
	HeadDim    int     `json:"head_dim,omitempty"`
	MLPHidden  int     `json:"mlp_hidden,omitempty"`
	MLP        string  `json:"mlp,omitempty"`
	RopeTheta  float64 `json:"rope_theta,omitempty"`
	NormEps    float64 `json:"norm_eps,omitempty"`
	QKNorm     bool    `json:"qk_norm,omitempty"`
	QKVBias    bool    `json:"qkv_bias,omitempty"`
	UntiedHead bool    `json:"untied_head,omitempty"` // --tie-embeddings=false
	// RopeScaling is Llama 3.1's (no flag: a model started from a Hugging
	// Face folder takes the folder's).
	RopeScaling *model.RopeScaling `json:"rope_scaling,omitempty"`

	BatchSize int `json:"batch_size"` // micro-batch per process
	// Recompute keeps only each block's input in the forward pass and
	// recomputes the block in the backward pass (gradient checkpointing):
	// much less activation memory for about 1.3× the step time.
	Recompute bool `json:"recompute,omitempty"`
	// CUDAGraphs captures the steady-state step on a CUDA device into a
	// graph and launches the graph each step after (one call instead of
	// hundreds). Experimental until a GPU has confirmed it; not with data
	// parallelism or a pipeline yet.
	CUDAGraphs bool `json:"cuda_graphs,omitempty"`
	// BatchAuto (--batch-size auto) replaces BatchSize with the largest
	// micro-batch that fits the device (see ChooseBatch); MemoryLimit is
	// the bytes it may plan for on the CPU (0: half the RAM).
	BatchAuto   bool  `json:"batch_auto,omitempty"`
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// GradAccum is the micro-steps per optimizer step (0: 1, or what
	// TokensPerStep makes it). See PlanBatch.
	GradAccum int `json:"grad_accum"`
	// TokensPerStep, when positive, sets the global tokens per optimizer
	// step instead: the accumulation is TokensPerStep / (BatchSize ×
	// BlockSize × world size), which must divide exactly. It cannot be
	// combined with a GradAccum of its own.
	TokensPerStep int `json:"tokens_per_step,omitempty"`

	LR           float64 `json:"learning_rate"`
	MinLR        float64 `json:"min_lr"`
	WarmupIters  int     `json:"warmup_iters"`
	LRDecayIters int     `json:"lr_decay_iters"` // 0 means max_iters
	MaxIters     int     `json:"max_iters"`
	Beta1        float64 `json:"beta1"`
	Beta2        float64 `json:"beta2"`
	WeightDecay  float64 `json:"weight_decay"`
	GradClip     float64 `json:"grad_clip"`
	// Optimizer is adamw ("" too) or muon: Muon for the blocks' weight
	// matrices, AdamW (LR, Beta1, Beta2, WeightDecay) for the rest. The
	// Muon settings' zero values are their defaults (MuonSettings).
	Optimizer       string  `json:"optimizer,omitempty"`
	MuonLR          float64 `json:"muon_lr,omitempty"`
	MuonMomentum    float64 `json:"muon_momentum,omitempty"`
	MuonWeightDecay float64 `json:"muon_weight_decay,omitempty"`
	// Recipe names a preset of settings that fleet train applies to the
	// settings not given on its command line (ApplyRecipe).
	Recipe string `json:"recipe,omitempty"`

	EvalInterval int    `json:"eval_interval"`
	EvalIters    int    `json:"eval_iters"`
	LogInterval  int    `json:"log_interval"`
	Seed         uint64 `json:"seed"`

	// CorpusBytes caps the embedded default corpus.
	CorpusBytes int `json:"corpus_bytes"`

	// CkptInterval saves a checkpoint in OUT/checkpoints every so many
	// steps and at the end (0: only when stopped); Keep is how many are
	// kept (0: all).
	CkptInterval int `json:"ckpt_interval,omitempty"`
	Keep         int `json:"keep,omitempty"`
	// TensorBoard, when set, is a folder for TensorBoard event files with
	// the metrics.jsonl fields as scalars and generated samples as text.
	// MetricsAddr, when set, serves them at http://ADDR/metrics for
	// Prometheus; a bare ":PORT" listens on 127.0.0.1 only. Rank 0 only.
	TensorBoard string `json:"tensorboard,omitempty"`
	MetricsAddr string `json:"metrics_addr,omitempty"`
	// InitFrom starts from the weights of a GPT-2 safetensors file (fleet's
	// or Hugging Face's), whose shape replaces the model settings (NLayer,
	// NEmbd, BlockSize, Bias) that are not in Given; one in Given that
	// disagrees with the file is refused, and so is an Arch in Given that
	// is not gpt2. NHead 0 infers the heads from the width.
	InitFrom string `json:"init_from,omitempty"`
	// Given names the settings (Config's fields) the caller set
	// explicitly, where a rule tells them from those left at Default's
	// values (InitFrom's). fleet train lists the flags on its command
	// line; nil: none.
	Given []string `json:"-"`
	// Resume continues from the newest checkpoint in Out that verifies
	// (from step 0 where there is none yet). It is refused where
	// checkpoints exist but none verifies, where the checkpoint does not
	// fit the run (see AllowChanges), and where Out holds a finished run
	// that left no checkpoint. Without it, an Out that holds a run is
	// refused.
	Resume bool `json:"-"`
	// AllowChanges lets a resumed run change optimizer, schedule, batch
	// and precision settings from the checkpoint's; config.json records
	// the change. Without it such a change is refused. A different model,
	// tokenizer or data is refused either way.
	AllowChanges bool `json:"-"`
	// JobID names the launcher's job (a digest of its secret; "" outside
	// a launcher), recorded in config.json. Restart marks a launcher's
	// restart of the job: it resumes, and without Out only a run folder
	// of the same job, never another run's.
	JobID   string `json:"job_id,omitempty"`
	Restart bool   `json:"-"`
	// Elastic says the group may have shrunk since its checkpoint (fleet
	// run --min-nproc): resuming, the run keeps the checkpoint's global
	// batch by raising GradAccum (see keepGlobalBatch).
	Elastic bool `json:"-"`
	// Stop, when closed, makes the run finish its step, save a checkpoint
	// and return ErrInterrupted.
	Stop <-chan struct{} `json:"-"`
	// AfterStep, when set, is called after each optimizer step with the
	// number of steps done: a hook for failure tests (fleet's command
	// installs FLEET_FAULT_EXIT's process exit here).
	AfterStep func(done int) `json:"-"`
	// LocalDevice is this process's device slot among its node's
	// data-parallel processes (a launcher's local rank, unless a shrunk
	// group renumbered them): Resolve moves a CUDA device or pipeline the
	// user did not number there (Placement.ForLocalRank).
	LocalDevice int `json:"-"`

	// Pipeline, when set, lists the devices of pipeline stages
	// (cuda:0,cuda:1 or logical cpu:0,cpu:1): contiguous ranges of blocks,
	// split by PipelineSplit (blocks per stage, "3,5") or by parameter
	// count. MicroBatches cuts each BatchSize into that many pipeline
	// micro-batches (0: 1); PipelineSchedule is gpipe (default) or 1f1b.
	// See pipeline.go.
	Pipeline         string `json:"pipeline,omitempty"`
	MicroBatches     int    `json:"micro_batches,omitempty"`
	PipelineSplit    string `json:"pipeline_split,omitempty"`
	PipelineSchedule string `json:"pipeline_schedule,omitempty"`

	// Replicas, when set, lists the devices of one process's data
	// parallelism, the lecture's DataParallel: the model on the first, a
	// replica on each other; every step the parameters are broadcast, each
	// micro-batch's rows scattered, the gradients summed onto the first
	// and the optimizer stepped there (see replicas.go).
	Replicas string `json:"replicas,omitempty"`
}

// Default is the configuration of `fleet train` with no flags: a small
// character-level GPT on the default corpus that trains in a few minutes
// on two CPU cores. The optimizer and evaluation settings are nanoGPT's.
func Default() Config {
	return Config{
		Device:    "auto",
		Precision: "fp32",

		NLayer:    4,
		NHead:     4,
		NEmbd:     128,
		BlockSize: 64,

		BatchSize: 12,

		LR:          1e-3,
		MinLR:       1e-4,
		WarmupIters: 100,
		MaxIters:    2000,
		Beta1:       0.9,
		Beta2:       0.95,
		WeightDecay: 0.1,
		GradClip:    1.0,

		EvalInterval: 250,
		EvalIters:    200,
		LogInterval:  10,
		Seed:         1337,
		CorpusBytes:  4 << 20,
		Keep:         3,
		BucketMB:     dist.DefaultBucketBytes >> 20,
		CommTimeout:  dist.DefaultTimeout,
		DistBackend:  "auto",
		CPUBF16:      "auto",
	}
}

// Validate checks everything that does not need the data.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate is Validate, returning the pipeline's devices that it parsed
// (nil without a pipeline), which Resolve places: --pipeline is parsed
// once.
func (c Config) validate() ([]tensor.Device, error) {
	for _, f := range []struct {
		field string
		v     float64
	}{{"LR", c.LR}, {"MinLR", c.MinLR}, {"Beta1", c.Beta1}, {"Beta2", c.Beta2},
		{"WeightDecay", c.WeightDecay}, {"GradClip", c.GradClip}, {"Dropout", c.Dropout},
		{"MuonLR", c.MuonLR}, {"MuonMomentum", c.MuonMomentum}, {"MuonWeightDecay", c.MuonWeightDecay}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return nil, setting.Errorf("{"+f.field+"} %v: want a finite number", f.v)
		}
	}
	mc := c.ModelConfig(1)
	if err := mc.Validate(); err != nil {
		return nil, err
	}
	switch {
	case c.MaxIters < 0:
		return nil, setting.Errorf("{MaxIters} must not be negative, got %d", c.MaxIters)
	case c.LR <= 0:
		return nil, setting.Errorf("{LR} must be positive, got %v", c.LR)
	case c.MinLR < 0 || c.MinLR > c.LR:
		return nil, setting.Errorf("{MinLR} must be in [0, {LR}], got %v", c.MinLR)
	case c.WarmupIters < 0 || c.LRDecayIters < 0:
		return nil, setting.Errorf("{WarmupIters} and {LRDecayIters} must not be negative")
	case c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1:
		return nil, setting.Errorf("{Beta1} and {Beta2} must be in [0, 1)")
	case c.WeightDecay < 0 || c.GradClip < 0:
		return nil, setting.Errorf("{WeightDecay} and {GradClip} must not be negative")
	case c.Optimizer != "" && c.Optimizer != OptimizerAdamW && c.Optimizer != OptimizerMuon:
		return nil, setting.Errorf("{Optimizer} must be adamw or muon, got %q", c.Optimizer)
	case c.MuonLR < 0 || c.MuonMomentum < 0 || c.MuonMomentum >= 1 || c.MuonWeightDecay < 0:
		return nil, setting.Errorf("{MuonLR} and {MuonWeightDecay} must not be negative, and {MuonMomentum} must be in [0, 1)")
	case c.Optimizer == OptimizerMuon && c.Precision == "fp16":
		return nil, setting.Errorf("{Optimizer} muon with {Precision} fp16 is not supported: the loss scaler skips steps whose gradients overflow, and Muon's update cannot skip on the device; use bf16")
	case c.EvalInterval <= 0 || c.EvalIters <= 0 || c.LogInterval <= 0:
		return nil, setting.Errorf("{EvalInterval}, {EvalIters} and {LogInterval} must be positive")
	case c.VocabSize < 0:
		return nil, setting.Errorf("{VocabSize} must not be negative, got %d", c.VocabSize)
	case c.CkptInterval < 0 || c.Keep < 0:
		return nil, setting.Errorf("{CkptInterval} and {Keep} must not be negative")
	case c.DataWorkers < 0 || c.Prefetch < 0:
		return nil, setting.Errorf("{DataWorkers} and {Prefetch} must not be negative")
	case c.WorldSize < 0 || c.Rank < 0 || c.Rank >= max(c.WorldSize, 1):
		return nil, fmt.Errorf("rank %d is not in a world of %d processes", c.Rank, max(c.WorldSize, 1))
	case c.CPUBF16 != "" && c.CPUBF16 != "auto" && c.CPUBF16 != fcpu.BF16ProductDot && c.CPUBF16 != fcpu.BF16ProductWiden && c.CPUBF16 != fcpu.BF16ProductAMX:
		return nil, setting.Errorf("{CPUBF16} must be auto, amx, dot or widen, got %q", c.CPUBF16)
	case c.WorldSize > 1 && c.BucketMB <= 0:
		return nil, setting.Errorf("{BucketMB} must be positive")
	case c.DistBackend != "" && c.DistBackend != "auto" && c.DistBackend != "tcp" && c.DistBackend != "nccl":
		return nil, setting.Errorf("{DistBackend} must be auto, tcp or nccl, got %q", c.DistBackend)
	case c.CommTimeout < 0:
		return nil, setting.Errorf("{CommTimeout} must not be negative")
	case c.Zero != 0 && c.Zero != 1:
		return nil, setting.Errorf("{Zero} must be 0 (plain data parallelism) or 1 (sharded optimizer state), got %d", c.Zero)
	case c.Zero == 1 && c.Pipeline != "":
		return nil, setting.Errorf("{Zero} 1 with {Pipeline} is not supported: a pipeline's stages update their own parameters, which are not one flat buffer to shard")
	case c.BatchAuto && c.WorldSize > 1:
		return nil, setting.Errorf("{BatchSize} auto is not supported with data parallelism yet (every rank must train the same micro-batch, and they would choose apart); give {BatchSize} N")
	case c.MemoryLimit < 0:
		return nil, setting.Errorf("{MemoryLimit} must not be negative")
	case c.CUDAGraphs && (c.WorldSize > 1 || c.Pipeline != ""):
		return nil, setting.Errorf("{CUDAGraphs} is not supported yet with data parallelism or {Pipeline}")
	}
	prec, err := ParsePrecision(c.Precision)
	if err != nil {
		return nil, err
	}
	if mc.IsLSTM() && (prec != FP32 || c.Recompute || c.Pipeline != "") {
		return nil, setting.Errorf("{Arch} %s trains with {Precision} fp32 only, and without {Recompute} or {Pipeline} (its kernels are F32 and it has no blocks to recompute or place in stages)", model.ArchLSTM)
	}
	if c.BatchAuto {
		if _, err := c.MaxMicro(); err != nil {
			return nil, err
		}
		c.BatchSize = 1 // the token budget must hold whole sequences
	}
	if _, err := c.PlanBatch(); err != nil {
		return nil, err
	}
	if _, err := c.validateReplicas(); err != nil {
		return nil, err
	}
	return c.validatePipeline()
}

// ProductDType is the dtype matrix products run in under the precision
// (F32 where the precision is not valid: Validate says so).
func (c Config) ProductDType() tensor.DType {
	p, _ := ParsePrecision(c.Precision)
	return p.DType()
}

// ModelConfig is the model's shape for a vocabulary size.
func (c Config) ModelConfig(vocab int) model.Config {
	return model.Config{VocabSize: vocab, BlockSize: c.BlockSize, NLayer: c.NLayer, NHead: c.NHead,
		NEmbd: c.NEmbd, Dropout: float32(c.Dropout), Bias: c.Bias,
		Arch: c.Arch, NKVHead: c.NKVHead, HeadDim: c.HeadDim, MLPHidden: c.MLPHidden, RopeTheta: c.RopeTheta,
		NormEps: c.NormEps, QKNorm: c.QKNorm, QKVBias: c.QKVBias, UntiedHead: c.UntiedHead, RopeScaling: c.RopeScaling, MLP: c.MLP}
}

// CollectiveTimeout is the run's bound on every collective: CommTimeout,
// or dist.DefaultTimeout where it is 0.
func (c Config) CollectiveTimeout() time.Duration {
	if c.CommTimeout <= 0 {
		return dist.DefaultTimeout
	}
	return c.CommTimeout
}

// The optimizers Optimizer names.
const (
	OptimizerAdamW = "adamw"
	OptimizerMuon  = "muon"
)

// Muon's defaults, which its settings' zero values stand for.
const (
	DefaultMuonLR       = 0.02
	DefaultMuonMomentum = 0.95
)

// MuonSettings resolves the Muon settings' defaults: the learning rate,
// the momentum and the weight decay.
func (c Config) MuonSettings() (lr, momentum, weightDecay float64) {
	lr, momentum = c.MuonLR, c.MuonMomentum
	if lr == 0 {
		lr = DefaultMuonLR
	}
	if momentum == 0 {
		momentum = DefaultMuonMomentum
	}
	return lr, momentum, c.MuonWeightDecay
}

// DecayIters resolves LRDecayIters' default.
func (c Config) DecayIters() int {
	if c.LRDecayIters == 0 {
		return c.MaxIters
	}
	return c.LRDecayIters
}
