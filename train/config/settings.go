package config

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
)

// RunConfig is what config.json holds: the run's settings and the model
// they built.
type RunConfig struct {
	Train Config       `json:"train"`
	Model model.Config `json:"model"`
	// DataID and TokenizerID name the run's data and tokenizer by
	// content, for --resume and the ranks of a job to compare.
	DataID      Identity `json:"data_identity"`
	TokenizerID Identity `json:"tokenizer_identity"`
	// History lists the resumes that changed settings (--allow-changes),
	// oldest first.
	History []Resumption `json:"history,omitempty"`
}

// Identity names data or a tokenizer by content: a SHA-256 sum and a
// description for messages. Paths are not part of it, so the same data
// under another path is the same data.
type Identity struct {
	SHA256 string `json:"sha256"`
	Desc   string `json:"desc"`
}

// String is the identity for messages: its description and the sum's
// first 16 hex digits.
func (id Identity) String() string {
	h := id.SHA256
	if len(h) > 16 {
		h = h[:16] + "…"
	}
	return fmt.Sprintf("%s, sha256 %s", id.Desc, h)
}

// Change is one setting changed when a run resumed with --allow-changes.
type Change struct {
	Flag string `json:"flag"`
	From string `json:"from"`
	To   string `json:"to"`
}

// Resumption is an entry of config.json's history: the step a run
// resumed at with changed settings, and what changed.
type Resumption struct {
	Step    int      `json:"step"`
	Changes []Change `json:"changes"`
}

// Recorded is one resolved setting that a resumed run or the ranks of a
// job compare. Files and the ranks' exchange name it by its flag (Flag, a
// format kept as it is); messages name it by its Config field, which the
// flag table (Flags) maps the flag to.
type Recorded struct {
	Flag  string `json:"flag"`
	Value string `json:"value"`
	// Show is the value for messages where it is not Value itself, and
	// Note says what the setting is where its name alone does not (a
	// setting.Errorf fragment).
	Show string `json:"show,omitempty"`
	Note string `json:"note,omitempty"`
	kind settingKind
}

// name is the setting for a setting.Errorf format: its field in braces,
// with its note.
func (s Recorded) name() string {
	n := s.Flag
	if f := fieldOf(s.Flag); f != "" && !negated(s.Flag) {
		n = "{" + f + "}"
	}
	if s.Note != "" {
		return n + " (" + s.Note + ")"
	}
	return n
}

func (s Recorded) shown() string {
	if s.Show != "" {
		return s.Show
	}
	return s.Value
}

// settingKind says how a setting's change is treated on resume.
type settingKind int

const (
	// identity settings (the model's shape, the tokenizer, the data) make
	// the checkpoint another run's: a change is refused.
	identity settingKind = iota
	// tunable settings (optimizer, schedule, batch, precision) may change
	// on resume only with --allow-changes, which records the change.
	tunable
	// perRank settings are not compared on resume (another micro-batch at
	// the same global batch, more steps under a pinned decay horizon,
	// other intervals), but the ranks of a job must agree on them, or
	// their collectives and batches would not line up.
	perRank
)

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Settings lists the settings of a run that its resumes and its ranks
// compare, each by the flag that sets it (a file format; the tokenizer,
// which no flag of its own sets, is "tokenizer"). Per-process values (the
// device, a pipeline's device offset, the rank, intervals only rank 0
// acts on) are not in it.
func (rc RunConfig) Settings() []Recorded {
	c, m := rc.Train, rc.Model
	world := max(c.WorldSize, 1)
	global := BatchPlan{Micro: c.BatchSize, Accum: c.GradAccum, World: world, Block: c.BlockSize}.TokensPerStep()
	itoa := strconv.Itoa
	s := []Recorded{
		{Flag: "--n-layer", Value: itoa(m.NLayer)},
		{Flag: "--n-head", Value: itoa(m.NHead)},
		{Flag: "--n-embd", Value: itoa(m.NEmbd)},
		{Flag: "--block-size", Value: itoa(m.BlockSize)},
		{Flag: "--bias", Value: strconv.FormatBool(m.Bias)},
		{Flag: "--arch", Value: orDefault(m.Arch, model.ArchGPT2)},
		{Flag: "--n-kv-head", Value: itoa(m.NKVHead)},
		{Flag: "--head-dim", Value: itoa(m.HeadDim)},
		{Flag: "--mlp", Value: mlpValue(m)},
		{Flag: "--mlp-hidden", Value: itoa(m.MLPHidden)},
		{Flag: "--rope-theta", Value: fmtFloat(m.RopeTheta)},
		{Flag: "--norm-eps", Value: fmtFloat(m.NormEps)},
		{Flag: "--qk-norm", Value: strconv.FormatBool(m.QKNorm)},
		{Flag: "--qkv-bias", Value: strconv.FormatBool(m.QKVBias)},
		{Flag: "--tie-embeddings", Value: strconv.FormatBool(!m.UntiedHead)},
		{Flag: "rope_scaling", Value: ropeScaling(m.RopeScaling)},
		{Flag: "--vocab-size", Value: itoa(m.VocabSize)},
		{Flag: "tokenizer", Value: rc.TokenizerID.SHA256, Show: rc.TokenizerID.String()},
		{Flag: "--data", Value: rc.DataID.SHA256, Show: rc.DataID.String()},

		{Flag: "--seed", Value: strconv.FormatUint(c.Seed, 10), kind: tunable},
		{Flag: "--lr", Value: fmtFloat(c.LR), kind: tunable},
		{Flag: "--min-lr", Value: fmtFloat(c.MinLR), kind: tunable},
		{Flag: "--warmup-iters", Value: itoa(c.WarmupIters), kind: tunable},
		{Flag: "--lr-decay-iters", Value: itoa(c.DecayIters()), kind: tunable,
			Note: "the decay horizon, which {MaxIters} sets where {LRDecayIters} is 0"},
		{Flag: "--beta1", Value: fmtFloat(c.Beta1), kind: tunable},
		{Flag: "--beta2", Value: fmtFloat(c.Beta2), kind: tunable},
		{Flag: "--weight-decay", Value: fmtFloat(c.WeightDecay), kind: tunable},
		{Flag: "--grad-clip", Value: fmtFloat(c.GradClip), kind: tunable},
		{Flag: "--optimizer", Value: orDefault(c.Optimizer, OptimizerAdamW), kind: tunable},
		{Flag: "--muon-lr", Value: muonValue(c, 0), kind: tunable},
		{Flag: "--muon-momentum", Value: muonValue(c, 1), kind: tunable},
		{Flag: "--muon-weight-decay", Value: muonValue(c, 2), kind: tunable},
		{Flag: "--dropout", Value: fmtFloat(c.Dropout), kind: tunable},
		{Flag: "--precision", Value: precisionName(c.Precision), kind: tunable},
		// The CPU's bf16 product (SettleCPUBF16); auto where there is none
		// (no bf16 on the CPU, or a checkpoint of an older fleet).
		{Flag: "--cpu-bf16", Value: orDefault(c.CPUBF16, "auto"), kind: tunable},
		{Flag: "--tokens-per-step", Value: itoa(global), kind: tunable,
			Show: fmt.Sprintf("%d (%d × %d × %d × %d)", global, c.BatchSize, c.GradAccum, c.BlockSize, world),
			Note: "the global batch: {BatchSize} × {GradAccum} × {BlockSize} × processes"},

		{Flag: "--batch-size", Value: itoa(c.BatchSize), kind: perRank},
		{Flag: "--grad-accum", Value: itoa(c.GradAccum), kind: perRank},
		{Flag: "--max-iters", Value: itoa(c.MaxIters), kind: perRank},
		{Flag: "--eval-interval", Value: itoa(c.EvalInterval), kind: perRank},
		{Flag: "--eval-iters", Value: itoa(c.EvalIters), kind: perRank},
		{Flag: "--log-interval", Value: itoa(c.LogInterval), kind: perRank},
		// The intervals set the read points, where the ranks agree.
		{Flag: "--ckpt-interval", Value: itoa(c.CkptInterval), kind: perRank},
		{Flag: "--bucket-mb", Value: itoa(c.BucketMB), kind: perRank},
		{Flag: "--dist-backend", Value: orDefault(c.DistBackend, "auto"), kind: perRank},
		{Flag: "--zero", Value: itoa(c.Zero), kind: perRank},
		{Flag: "--pipeline", Value: itoa(pipelineStages(c.Pipeline)), kind: perRank,
			Show: itoa(pipelineStages(c.Pipeline)) + " stages"},
		{Flag: "--micro-batches", Value: itoa(max(c.MicroBatches, 1)), kind: perRank},
		{Flag: "--pipeline-split", Value: c.PipelineSplit, kind: perRank},
		{Flag: "--pipeline-schedule", Value: orDefault(c.PipelineSchedule, "gpipe"), kind: perRank},
	}
	return s
}

func precisionName(p string) string { return orDefault(p, "fp32") }

// mlpValue is a Llama's feed-forward as recorded (swiglu where unset);
// none for the other families, which have no choice.
func mlpValue(m model.Config) string {
	if !m.IsLlama() {
		return "none"
	}
	return orDefault(m.MLP, model.MLPSwiGLU)
}

// muonValue is Muon's setting i (MuonSettings' order) as recorded: none
// where the run does not use Muon.
func muonValue(c Config, i int) string {
	if c.Optimizer != OptimizerMuon {
		return "none"
	}
	lr, mom, wd := c.MuonSettings()
	return fmtFloat([]float64{lr, mom, wd}[i])
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// pipelineStages is the number of stages of a --pipeline list (1: none).
func pipelineStages(list string) int {
	if strings.TrimSpace(list) == "" {
		return 1
	}
	return len(strings.Split(list, ","))
}

// ResumeCheck compares the checkpoint's run (was) with this one (now). A
// different model, tokenizer or data is refused. Changed optimizer, batch
// or precision settings are refused unless allow is set; allowed, they
// are returned for the log and config.json's history. A checkpoint of an
// older fleet that did not record its data and tokenizer by content gets
// those two skipped, which warn reports.
func ResumeCheck(was, now RunConfig, allow bool) (changes []Change, warn string, err error) {
	old, cur := was.Settings(), now.Settings()
	var refused, tuned []string
	for i, o := range old {
		n := cur[i]
		if o.kind == perRank || o.Value == n.Value {
			continue
		}
		if o.Flag == "--cpu-bf16" && (o.Value == "auto" || n.Value == "auto") {
			continue // one side ran no bf16 product on the CPU
		}
		if o.Value == "" && (o.Flag == "tokenizer" || o.Flag == "--data") {
			warn += fmt.Sprintf("resume: the checkpoint does not record its %s by content (an older fleet wrote it): not checked\n",
				strings.TrimPrefix(o.Flag, "--"))
			continue
		}
		line := o.name() + ": the checkpoint's is " + setting.Literal(o.shown()) + ", this run's is " + setting.Literal(n.shown())
		if o.kind == identity {
			refused = append(refused, line)
			continue
		}
		tuned = append(tuned, line)
		changes = append(changes, Change{Flag: o.Flag, From: o.Value, To: n.Value})
	}
	if len(refused) > 0 {
		return nil, warn, setting.Errorf("it is another run's: its model, tokenizer or data differ from this run's:\n  - " +
			strings.Join(refused, "\n  - ") + "\n" +
			"resume with the run's own data and model settings, or give another {Out} to start a new run")
	}
	if len(tuned) > 0 && !allow {
		return nil, warn, setting.Errorf("these settings differ from the checkpoint's, so the run would not continue as it began:\n  - " +
			strings.Join(tuned, "\n  - ") + "\n" +
			"resume with the checkpoint's settings, or add {AllowChanges} to change them from here on (config.json then records the change)")
	}
	return changes, warn, nil
}

// SettingsDiff compares rank r's settings (mine) with rank 0's, naming
// every setting that differs in a setting.Errorf fragment.
func SettingsDiff(rank0, mine []Recorded, r int) []string {
	var diff []string
	for i := range rank0 {
		if i >= len(mine) || rank0[i].Flag != mine[i].Flag {
			return append(diff, fmt.Sprintf("rank %d runs another fleet (its settings do not line up with rank 0's)", r))
		}
		if rank0[i].Value != mine[i].Value {
			s := rank0[i] // the exchange carries flags: name maps them to fields
			diff = append(diff, fmt.Sprintf("%s: rank 0 has %s, rank %d has %s", s.name(), setting.Literal(s.shown()), r, setting.Literal(mine[i].shown())))
		}
	}
	return diff
}

// fieldOf is the Config field of a recorded setting's flag, as the flag
// table declares it ("" for a name that is not a flag: the tokenizer).
func fieldOf(flag string) string {
	name, ok := strings.CutPrefix(flag, "--")
	if !ok {
		return ""
	}
	if f, ok := Flags.Lookup(name); ok {
		return f.Field
	}
	return ""
}

// negated reports whether flag is bound to its field's negation
// (negBool): its recorded value is the flag's, which read beside the
// field's name would say the opposite, so messages name the flag itself.
func negated(flag string) bool {
	f, ok := Flags.Lookup(strings.TrimPrefix(flag, "--"))
	if !ok {
		return false
	}
	_, neg := f.Bind(&Config{}).(negBool)
	return neg
}

// ropeScaling is a model's rope_scaling as recorded: its JSON, or none.
func ropeScaling(s *model.RopeScaling) string {
	if s == nil {
		return "none"
	}
	b, _ := json.Marshal(s)
	return string(b)
}
