package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/internal/testenv"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// testText is a small corpus with enough structure for a model to learn.

func tinyConfig(t *testing.T) Config {
	dir := t.TempDir()
	path := filepath.Join(dir, "input.txt")
	if err := os.WriteFile(path, []byte(testenv.Text()), 0o644); err != nil {
		t.Fatal(err)
	}
	c := Default()
	c.Data = path
	c.Out = filepath.Join(dir, "out")
	c.Device = "cpu"
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize = 2, 2, 32, 16
	c.BatchSize = 8
	c.MaxIters = 120
	c.LR = 3e-3
	c.WarmupIters = 5
	c.EvalInterval = 60
	c.EvalIters = 4
	c.LogInterval = 40
	return c
}

func TestRunWritesFilesAndLearns(t *testing.T) {
	c := tinyConfig(t)
	var log bytes.Buffer
	res, err := Run(c, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	for _, f := range []string{ConfigFile, TokenizerFile, MetricsFile, SummaryFile, ModelFile, BestFile} {
		if _, err := os.Stat(filepath.Join(c.Out, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	// Nothing but the final files: no temporaries left behind.
	entries, _ := os.ReadDir(c.Out)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left temporary file %s", e.Name())
		}
	}
	var s map[string]any
	b, _ := os.ReadFile(filepath.Join(c.Out, SummaryFile))
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"best_val_loss", "final_val_loss", "tokens_per_sec", "steps", "device", "config"} {
		if _, ok := s[k]; !ok {
			t.Errorf("summary.json lacks %q", k)
		}
	}
	if res.Summary.Steps != c.MaxIters || res.Summary.TokensPerSec <= 0 {
		t.Errorf("summary: %d steps, %v tokens/s", res.Summary.Steps, res.Summary.TokensPerSec)
	}
	// The loss must fall well below that of a uniform guess.
	uniform := math.Log(float64(res.Tokenizer.Size()))
	if res.Summary.BestValLoss > 0.75*uniform {
		t.Errorf("best val loss %.3f, uniform guess %.3f: the model did not learn", res.Summary.BestValLoss, uniform)
	}
	// metrics.jsonl: log lines carry train_loss, lr, ms_per_step, tokens_per_sec; eval lines val_loss.
	f, _ := os.Open(filepath.Join(c.Out, MetricsFile))
	defer f.Close()
	sc := bufio.NewScanner(f)
	var logs, evals int
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("bad metrics line %q: %v", sc.Text(), err)
		}
		if _, ok := m["val_loss"]; ok {
			evals++
		}
		if _, ok := m["tokens_per_sec"]; ok {
			logs++
			for _, k := range []string{"step", "train_loss", "lr", "ms_per_step"} {
				if _, ok := m[k]; !ok {
					t.Errorf("log line lacks %s: %s", k, sc.Text())
				}
			}
		}
	}
	if logs != 3 || evals != 3 {
		t.Errorf("metrics has %d log and %d eval lines, want 3 and 3", logs, evals)
	}
}

// TestRunIsDeterministic: the same run twice gives bit-identical weights.
func TestRunIsDeterministic(t *testing.T) {
	c := tinyConfig(t)
	c.MaxIters = 15
	c.Dropout = 0.1
	var weights [2][]byte
	for i := range weights {
		c.Out = filepath.Join(t.TempDir(), "out")
		if _, err := Run(c, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(c.Out, ModelFile))
		if err != nil {
			t.Fatal(err)
		}
		weights[i] = b
	}
	if !bytes.Equal(weights[0], weights[1]) {
		t.Fatal("two runs with the same seed wrote different weights")
	}
}

// TestGradAccumulation: 4 micro-batches of 8 give the same update as one
// batch of 32, because the windows of a step do not depend on the split,
// and neither do the dropout masks, keyed by each element's place in the
// step's global batch.
func TestGradAccumulation(t *testing.T) {
	for _, drop := range []float64{0, 0.2} {
		t.Run(fmt.Sprintf("dropout=%v", drop), func(t *testing.T) { checkGradAccumulation(t, drop) })
	}
}

func checkGradAccumulation(t *testing.T, dropout float64) {
	tok := data.NewChar(testenv.Text())
	ids, _ := tok.Encode(testenv.Text())
	stepOnce := func(batch, accum int) ([]float32, [][]float32) {
		c := Default()
		c.NLayer, c.NHead, c.NEmbd, c.BlockSize = 2, 2, 32, 16
		c.BatchSize, c.GradAccum, c.Dropout = batch, accum, dropout
		m, err := model.New(c.ModelConfig(tok.Size()), tensor.CPU, 7)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := data.NewSampler(ids, c.BlockSize, 3, data.StreamTrain)
		r := newRun(c, tensor.CPU, nil)
		r.model, r.train = m, s
		r.opt = optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
		// Capture the gradients before the update by running the
		// micro-steps through the trainer and inspecting after clipping.
		var grads [][]float32
		c.GradClip = 0
		r.cfg = c
		loss := r.mustStepWithHook(0, 1e-3, func() {
			for _, p := range m.Parameters() {
				grads = append(grads, p.Grad().Float32s())
			}
		})
		return []float32{float32(loss)}, grads
	}
	l1, g1 := stepOnce(32, 1)
	l4, g4 := stepOnce(8, 4)
	if math.Abs(float64(l1[0]-l4[0])) > 1e-5*math.Abs(float64(l1[0])) {
		t.Errorf("loss %v with one batch, %v accumulated", l1[0], l4[0])
	}
	for i := range g1 {
		for j := range g1[i] {
			if d := math.Abs(float64(g1[i][j] - g4[i][j])); d > 1e-5*(1+math.Abs(float64(g1[i][j]))) {
				t.Fatalf("param %d grad %d: %v vs %v", i, j, g1[i][j], g4[i][j])
			}
		}
	}
}

// TestDefaultCorpus trains two steps on the embedded default corpus (Go's
// own source), the path `fleet train` takes with no flags.
func TestDefaultCorpus(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH, so GOROOT cannot be found")
	}
	c := tinyConfig(t)
	c.Data = ""
	c.CorpusBytes = 200 << 10
	c.MaxIters = 2
	var log bytes.Buffer
	res, err := Run(c, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "Go standard library source") || res.Tokenizer.Size() < 50 {
		t.Errorf("unexpected corpus: vocabulary %d\n%s", res.Tokenizer.Size(), log.String())
	}
}

// TestTokensPerStep: --tokens-per-step derives the accumulation, refuses
// what does not divide or is combined with --grad-accum, and N = 4×B×T
// trains the same weights as --grad-accum 4.
func TestTokensPerStep(t *testing.T) {
	c := Default()
	c.BatchSize, c.BlockSize, c.WorldSize = 4, 16, 2
	for _, tc := range []struct {
		tokens, accum int
		want          string
	}{
		{tokens: 4 * 16 * 2 * 3, accum: 0},
		{tokens: 4 * 16 * 2 * 3, accum: 3}, // the accumulation it makes: a resolved plan
		{tokens: 100, accum: 0, want: "not a multiple of batch size 4 × block size 16 × world size 2 = 128"},
		{tokens: 512, accum: 2, want: "cannot be combined with GradAccum 2"},
		{tokens: 384, accum: 1, want: "cannot be combined with GradAccum 1"},
		{tokens: -128, accum: 0, want: "must be positive"},
	} {
		c.TokensPerStep, c.GradAccum = tc.tokens, tc.accum
		err := c.Validate()
		if tc.want == "" {
			if p, _ := c.PlanBatch(); err != nil || p.Accum != 3 || p.TokensPerStep() != tc.tokens {
				t.Errorf("--tokens-per-step %d: plan %+v, err %v; want 3 accumulation steps", tc.tokens, p, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--tokens-per-step %d --grad-accum %d: err = %v, want one naming %q", tc.tokens, tc.accum, err, tc.want)
		}
	}

	var weights [2][]byte
	for i := range weights {
		c := tinyConfig(t)
		c.MaxIters = 6
		if i == 0 {
			c.GradAccum = 4
		} else {
			c.TokensPerStep = 4 * c.BatchSize * c.BlockSize
		}
		var log bytes.Buffer
		if _, err := Run(c, &log); err != nil {
			t.Fatalf("%v\n%s", err, log.String())
		}
		want := fmt.Sprintf("micro-batch %d × %d tokens, 4 accumulation steps, world 1: %d tokens per step",
			c.BatchSize, c.BlockSize, 4*c.BatchSize*c.BlockSize)
		if !strings.Contains(log.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, log.String())
		}
		weights[i] = mustRead(t, filepath.Join(c.Out, ModelFile))
	}
	if !bytes.Equal(weights[0], weights[1]) {
		t.Fatal("--tokens-per-step 4×B×T and --grad-accum 4 wrote different weights")
	}
}

// mustStep is step for tests, whose batches cannot fail: an error panics.
func (r *run) mustStep(step int, lr float64) float64 { return r.mustStepWithHook(step, lr, nil) }

// mustStepWithHook is stepWithHook for tests: an error panics.
// It returns the step's loss, read back from the step statistics.
func (r *run) mustStepWithHook(step int, lr float64, hook func()) float64 {
	if err := r.stepWithHook(step, lr, hook); err != nil {
		panic(err)
	}
	loss, _, _, _ := r.readStats(step + 1)
	return loss
}
