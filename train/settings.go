package train

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"strconv"
	"strings"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/train/config"
)

// Identity names data or a tokenizer by content: a SHA-256 sum and a
// description for messages. Paths are not part of it, so the same data
// under another path is the same data.
type Identity struct {
	SHA256 string `json:"sha256"`
	Desc   string `json:"desc"`
}

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

// recorded is one resolved setting that a resumed run or the ranks of a
// job compare. Files and the ranks' exchange name it by its flag (Flag, a
// format kept as it is); messages name it by its Config field.
type recorded struct {
	Flag  string `json:"flag"`
	Value string `json:"value"`
	// Show is the value for messages where it is not Value itself, and
	// Note says what the setting is where its name alone does not (a
	// setting.Errorf fragment).
	Show  string `json:"show,omitempty"`
	Note  string `json:"note,omitempty"`
	kind  settingKind
	field string // the Config field; "" for one no field sets (the tokenizer)
}

// name is the setting for a setting.Errorf format: its field in braces,
// with its note.
func (s recorded) name() string {
	n := s.Flag
	if s.field != "" {
		n = "{" + s.field + "}"
	}
	if s.Note != "" {
		return n + " (" + s.Note + ")"
	}
	return n
}

func (s recorded) shown() string {
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

// settingsOf lists the settings of a run that its resumes and its ranks
// compare. Per-process values (the device, a pipeline's device offset,
// the rank, intervals only rank 0 acts on) are not in it.
func settingsOf(rc RunConfig) []recorded {
	c, m := rc.Train, rc.Model
	world := max(c.WorldSize, 1)
	global := config.BatchPlan{Micro: c.BatchSize, Accum: c.GradAccum, World: world, Block: c.BlockSize}.TokensPerStep()
	itoa := strconv.Itoa
	s := []recorded{
		{Flag: "--n-layer", field: "NLayer", Value: itoa(m.NLayer)},
		{Flag: "--n-head", field: "NHead", Value: itoa(m.NHead)},
		{Flag: "--n-embd", field: "NEmbd", Value: itoa(m.NEmbd)},
		{Flag: "--block-size", field: "BlockSize", Value: itoa(m.BlockSize)},
		{Flag: "--bias", field: "Bias", Value: strconv.FormatBool(m.Bias)},
		{Flag: "--vocab-size", field: "VocabSize", Value: itoa(m.VocabSize)},
		{Flag: "tokenizer", Value: rc.TokenizerID.SHA256, Show: rc.TokenizerID.String()},
		{Flag: "--data", field: "Data", Value: rc.DataID.SHA256, Show: rc.DataID.String()},

		{Flag: "--seed", field: "Seed", Value: strconv.FormatUint(c.Seed, 10), kind: tunable},
		{Flag: "--lr", field: "LR", Value: fmtFloat(c.LR), kind: tunable},
		{Flag: "--min-lr", field: "MinLR", Value: fmtFloat(c.MinLR), kind: tunable},
		{Flag: "--warmup-iters", field: "WarmupIters", Value: itoa(c.WarmupIters), kind: tunable},
		{Flag: "--lr-decay-iters", field: "LRDecayIters", Value: itoa(c.DecayIters()), kind: tunable,
			Note: "the decay horizon, which {MaxIters} sets where {LRDecayIters} is 0"},
		{Flag: "--beta1", field: "Beta1", Value: fmtFloat(c.Beta1), kind: tunable},
		{Flag: "--beta2", field: "Beta2", Value: fmtFloat(c.Beta2), kind: tunable},
		{Flag: "--weight-decay", field: "WeightDecay", Value: fmtFloat(c.WeightDecay), kind: tunable},
		{Flag: "--grad-clip", field: "GradClip", Value: fmtFloat(c.GradClip), kind: tunable},
		{Flag: "--dropout", field: "Dropout", Value: fmtFloat(c.Dropout), kind: tunable},
		{Flag: "--precision", field: "Precision", Value: precisionName(c.Precision), kind: tunable},
		// The CPU's bf16 product (settleCPUBF16); auto where there is none
		// (no bf16 on the CPU, or a checkpoint of an older fleet).
		{Flag: "--cpu-bf16", field: "CPUBF16", Value: orDefault(c.CPUBF16, "auto"), kind: tunable},
		{Flag: "--tokens-per-step", field: "TokensPerStep", Value: itoa(global), kind: tunable,
			Show: fmt.Sprintf("%d (%d × %d × %d × %d)", global, c.BatchSize, c.GradAccum, c.BlockSize, world),
			Note: "the global batch: {BatchSize} × {GradAccum} × {BlockSize} × processes"},

		{Flag: "--batch-size", field: "BatchSize", Value: itoa(c.BatchSize), kind: perRank},
		{Flag: "--grad-accum", field: "GradAccum", Value: itoa(c.GradAccum), kind: perRank},
		{Flag: "--max-iters", field: "MaxIters", Value: itoa(c.MaxIters), kind: perRank},
		{Flag: "--eval-interval", field: "EvalInterval", Value: itoa(c.EvalInterval), kind: perRank},
		{Flag: "--eval-iters", field: "EvalIters", Value: itoa(c.EvalIters), kind: perRank},
		{Flag: "--log-interval", field: "LogInterval", Value: itoa(c.LogInterval), kind: perRank},
		// The intervals set the read points, where the ranks agree.
		{Flag: "--ckpt-interval", field: "CkptInterval", Value: itoa(c.CkptInterval), kind: perRank},
		{Flag: "--bucket-mb", field: "BucketMB", Value: itoa(c.BucketMB), kind: perRank},
		{Flag: "--dist-backend", field: "DistBackend", Value: orDefault(c.DistBackend, "auto"), kind: perRank},
		{Flag: "--zero", field: "Zero", Value: itoa(c.Zero), kind: perRank},
		{Flag: "--pipeline", field: "Pipeline", Value: itoa(pipelineStages(c.Pipeline)), kind: perRank,
			Show: itoa(pipelineStages(c.Pipeline)) + " stages"},
		{Flag: "--micro-batches", field: "MicroBatches", Value: itoa(max(c.MicroBatches, 1)), kind: perRank},
		{Flag: "--pipeline-split", field: "PipelineSplit", Value: c.PipelineSplit, kind: perRank},
		{Flag: "--pipeline-schedule", field: "PipelineSchedule", Value: orDefault(c.PipelineSchedule, "gpipe"), kind: perRank},
	}
	return s
}

func precisionName(p string) string { return orDefault(p, "fp32") }

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

// resumeCheck compares the checkpoint's run (was) with this one (now). A
// different model, tokenizer or data is refused. Changed optimizer, batch
// or precision settings are refused unless allow is set; allowed, they
// are returned for the log and config.json's history. A checkpoint of an
// older fleet that did not record its data and tokenizer by content gets
// those two skipped, which warn reports.
func resumeCheck(was, now RunConfig, allow bool) (changes []Change, warn string, err error) {
	old, cur := settingsOf(was), settingsOf(now)
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

// settingsDiff compares rank r's settings (mine) with rank 0's, naming
// every setting that differs in a setting.Errorf fragment.
func settingsDiff(rank0, mine []recorded, r int) []string {
	var diff []string
	for i := range rank0 {
		if i >= len(mine) || rank0[i].Flag != mine[i].Flag {
			return append(diff, fmt.Sprintf("rank %d runs another fleet (its settings do not line up with rank 0's)", r))
		}
		if rank0[i].Value != mine[i].Value {
			s := rank0[i]
			s.field = fieldOf(s.Flag) // the exchange carries flags
			diff = append(diff, fmt.Sprintf("%s: rank 0 has %s, rank %d has %s", s.name(), setting.Literal(s.shown()), r, setting.Literal(mine[i].shown())))
		}
	}
	return diff
}

// fieldOf is the Config field of a recorded setting's flag ("" for none).
func fieldOf(flag string) string {
	for _, s := range settingsOf(RunConfig{}) {
		if s.Flag == flag {
			return s.field
		}
	}
	return ""
}

// hashTokens adds a token sequence to h: its length, then every id as 4
// little-endian bytes.
func hashTokens(h hash.Hash, t data.Tokens) {
	n := t.Len()
	var hdr [8]byte
	binary.LittleEndian.PutUint64(hdr[:], uint64(n))
	h.Write(hdr[:])
	const chunk = 1 << 16
	ids := make([]int32, chunk)
	buf := make([]byte, 4*chunk)
	for off := 0; off < n; off += chunk {
		k := min(chunk, n-off)
		t.Read(ids[:k], off)
		for i, id := range ids[:k] {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(id))
		}
		h.Write(buf[:4*k])
	}
}

// tokensIdentity is the identity of token data: the sum of its train and
// val ids.
func tokensIdentity(train, val data.Tokens, desc string) Identity {
	h := sha256.New()
	h.Write([]byte("fleet token data v1\n"))
	hashTokens(h, train)
	hashTokens(h, val)
	return Identity{SHA256: hex.EncodeToString(h.Sum(nil)), Desc: desc}
}

// textIdentity is the identity of text data: the sum of its bytes.
func textIdentity(text, desc string) Identity {
	h := sha256.New()
	h.Write([]byte("fleet text v1\n"))
	h.Write([]byte(text))
	return Identity{SHA256: hex.EncodeToString(h.Sum(nil)), Desc: desc}
}

// preparedIdentity is the identity of prepared data: the sum of what its
// manifest says of the tokens (vocabulary, separator, and each split's
// shards by checksum and count), not of where the inputs were.
func preparedIdentity(m *data.Manifest, desc string) Identity {
	type shard struct {
		Tokens int64  `json:"tokens"`
		SHA256 string `json:"sha256"`
	}
	var c struct {
		Vocab int     `json:"vocab"`
		EOT   *int32  `json:"eot"`
		Train []shard `json:"train"`
		Val   []shard `json:"val"`
	}
	c.Vocab, c.EOT = m.VocabSize, m.EOT
	for _, f := range m.Train.Shards {
		c.Train = append(c.Train, shard{f.Tokens, f.SHA256})
	}
	for _, f := range m.Val.Shards {
		c.Val = append(c.Val, shard{f.Tokens, f.SHA256})
	}
	b, _ := json.Marshal(c)
	h := sha256.Sum256(append([]byte("fleet prepared v1\n"), b...))
	return Identity{SHA256: hex.EncodeToString(h[:]), Desc: desc}
}

// tokenizerIdentity is the identity of a tokenizer: the sum of its whole
// vocabulary, every id's text in order (not only its size).
func tokenizerIdentity(tok Tokenizer, desc string) Identity {
	h := sha256.New()
	h.Write([]byte("fleet vocabulary v1\n"))
	var n [8]byte
	one := make([]int32, 1)
	for id := 0; id < tok.Size(); id++ {
		one[0] = int32(id)
		s := tok.Decode(one)
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return Identity{SHA256: hex.EncodeToString(h.Sum(nil)), Desc: fmt.Sprintf("%s, %d symbols", desc, tok.Size())}
}
