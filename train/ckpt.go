package train

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/train/config"
)

// Checkpoints live in OUT/checkpoints/step-NNNNNNN/ (CheckpointDir; see
// package checkpoint for the layout); each holds the model's weights, this
// file and a manifest.
const StateFile = "state.safetensors"

// ErrInterrupted is returned by Run when Config.Stop closed: the run
// finished its current step and saved a checkpoint.
var ErrInterrupted = errors.New("training interrupted")

// snapshot is the host copy of everything a checkpoint holds. Its buffers
// are allocated once and reused: a snapshot is only taken when no write is
// reading them.
type snapshot struct {
	names   []string
	shapes  [][]int
	w, m, v [][]float32
	step    int
	meta    map[string]string
}

type ckptResult struct {
	step  int
	snap  time.Duration
	write time.Duration
	err   error
}

// checkpointer writes checkpoints in the background, one at a time: a
// snapshot waits for the previous write to finish (never skips one), so
// every interval is saved and the host buffers are never read and written
// at once.
type checkpointer struct {
	// shard is, under --zero 1, this rank's shard of the moments as the
	// step's snapshot holds it (see saveShard).
	shard    *shardSnap
	root     string
	keep     int
	cfgJSON  []byte
	tokJSON  []byte
	snap     snapshot
	busy     bool
	snapTime time.Duration
	done     chan ckptResult
	last     string     // the directory of the last completed write
	lastStep int        // and its step (-1: none yet)
	lastRes  ckptResult // and its times
}

func newCheckpointer(r *run, rc config.RunConfig) (*checkpointer, error) {
	c := &checkpointer{root: filepath.Join(r.cfg.Out, CheckpointDir), keep: r.cfg.Keep, done: make(chan ckptResult, 1), lastStep: -1}
	var err error
	if c.cfgJSON, err = json.MarshalIndent(rc, "", "  "); err != nil {
		return nil, err
	}
	c.cfgJSON = append(c.cfgJSON, '\n')
	if r.cfg.Rank != 0 { // rank 0 checkpoints for the group
		return c, nil
	}
	if c.tokJSON, err = os.ReadFile(filepath.Join(r.cfg.Out, TokenizerFile)); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return c, nil
}

// take copies the weights and optimizer state into the host buffers.
func (c *checkpointer) take(r *run, step int, best float64) {
	s := &c.snap
	params := r.model.Parameters()
	if s.names == nil {
		for _, p := range params {
			n := p.T.Numel()
			s.names = append(s.names, p.Name)
			s.shapes = append(s.shapes, slices.Clone([]int(p.T.Shape())))
			s.w = append(s.w, make([]float32, n))
			if c.shard == nil { // a sharded group's moments are in the shards' files
				s.m = append(s.m, make([]float32, n))
				s.v = append(s.v, make([]float32, n))
			}
		}
	}
	for i, p := range params {
		p.T.ReadFloat32s(s.w[i])
		if c.shard != nil { // the moments are in the shards' files
			continue
		}
		m, v := r.opt.State(i)
		m.ReadFloat32s(s.m[i])
		v.ReadFloat32s(s.v[i])
	}
	s.step = step
	cfg := r.cfg
	s.meta = map[string]string{
		"format":     "fleet-train-state",
		"step":       strconv.Itoa(step),
		"adam_steps": strconv.Itoa(r.opt.StepCount()),
		// The schedule is a function of the step: the next step's LR.
		"next_lr":       strconv.FormatFloat(r.sched.At(r.scheduleStep(step)), 'g', -1, 64),
		"best_val_loss": strconv.FormatFloat(best, 'g', -1, 64),
		// Every random stream is a function of (seed, step): dropout
		// masks of (seed, step, site, window, position, channel), and
		// the loader draws the windows of a step from (seed, step).
		"seed":        strconv.FormatUint(cfg.Seed, 10),
		"dropout_rng": backend.DropoutGenerator,
		// Every rank's loader is at the step: rank r draws its part of
		// the step's global batch.
		"loader_position": strconv.Itoa(step),
		"rank":            strconv.Itoa(cfg.Rank),
		"world_size":      strconv.Itoa(max(cfg.WorldSize, 1)),
	}
	r.scaler.Metadata(s.meta)
	if c.shard != nil {
		c.shard.metadata(s.meta)
	}
}

// writeFault, when set (by tests), wraps the writer of each checkpoint
// file, to inject faults such as a full disk.
var writeFault func(step int, name string, w io.Writer) io.Writer

func (c *checkpointer) files() (*checkpoint.Manifest, []checkpoint.Entry) {
	s := &c.snap
	weights := &checkpoint.File{Metadata: map[string]string{"step": strconv.Itoa(s.step)}, Tensors: map[string]checkpoint.Tensor{}}
	state := &checkpoint.File{Metadata: s.meta, Tensors: map[string]checkpoint.Tensor{}}
	for i, name := range s.names {
		weights.Tensors[name] = checkpoint.Tensor{DType: checkpoint.F32, Shape: s.shapes[i], Data: backend.AsBytes(s.w[i])}
		if c.shard != nil {
			continue // in the shards' files
		}
		state.Tensors["exp_avg."+name] = checkpoint.Tensor{DType: checkpoint.F32, Shape: s.shapes[i], Data: backend.AsBytes(s.m[i])}
		state.Tensors["exp_avg_sq."+name] = checkpoint.Tensor{DType: checkpoint.F32, Shape: s.shapes[i], Data: backend.AsBytes(s.v[i])}
	}
	bytesEntry := func(name string, b []byte) checkpoint.Entry {
		return checkpoint.Entry{Name: name, Write: func(w io.Writer) error { _, err := w.Write(b); return err }}
	}
	m := &checkpoint.Manifest{Step: s.step, Config: c.cfgJSON}
	if json.Valid(c.tokJSON) {
		m.Tokenizer = c.tokJSON
	}
	files := []checkpoint.Entry{
		{Name: ModelFile, Write: func(w io.Writer) error { return checkpoint.Encode(w, weights) }},
		{Name: StateFile, Write: func(w io.Writer) error { return checkpoint.Encode(w, state) }},
		bytesEntry(ConfigFile, c.cfgJSON),
		bytesEntry(TokenizerFile, c.tokJSON),
	}
	if sh := c.shard; sh != nil {
		files = append(files, checkpoint.Entry{Name: ShardFile(0), Write: sh.encode})
	}
	if fault := writeFault; fault != nil {
		for i, e := range files {
			write, step := e.Write, s.step
			files[i].Write = func(w io.Writer) error { return write(fault(step, e.Name, w)) }
		}
	}
	return m, files
}

func (c *checkpointer) write() ckptResult {
	t0 := time.Now()
	m, files := c.files()
	var err error
	if c.shard != nil { // the other ranks' shards, once durable
		var others []checkpoint.Entry
		if others, err = c.shard.others(c.root, c.snap.step); err != nil {
			return ckptResult{step: c.snap.step, snap: c.snapTime, write: time.Since(t0), err: err}
		}
		files = append(files, others...)
	}
	dir, err := checkpoint.WriteDir(c.root, m, files, c.keep)
	if err == nil && c.shard != nil {
		c.shard.cleanStaged(c.root, c.snap.step)
	}
	if err == nil {
		c.last, c.lastStep = dir, c.snap.step
	}
	return ckptResult{step: c.snap.step, snap: c.snapTime, write: time.Since(t0), err: err}
}

// wait waits for the write in flight, if any, and reports it.
func (c *checkpointer) wait(log io.Writer) error {
	if !c.busy {
		return nil
	}
	c.busy = false
	return c.report(log, <-c.done, true)
}

// poll reports a finished background write without waiting.
func (c *checkpointer) poll(log io.Writer) error {
	if !c.busy {
		return nil
	}
	select {
	case res := <-c.done:
		c.busy = false
		return c.report(log, res, true)
	default:
		return nil
	}
}

func (c *checkpointer) report(log io.Writer, res ckptResult, background bool) error {
	c.lastRes = res
	if res.err != nil {
		return fmt.Errorf("%w (the checkpoints saved before are intact)", res.err)
	}
	how := ""
	if background {
		how = " (background)"
	}
	fmt.Fprintf(log, "checkpoint step %d: snapshot %.1f ms, write %.0f ms%s\n",
		res.step, ms(res.snap), ms(res.write), how)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// save checkpoints the state after step steps: it waits for the previous
// write, snapshots, and writes in the background (sync false) or before
// returning.
func (c *checkpointer) save(r *run, step int, best float64, sync bool) error {
	if r.cfg.Rank == 0 {
		if err := c.wait(r.log); err != nil { // its writer reads the snapshot
			return err
		}
	}
	if lo, hi, world, store, ok := r.group().Shard(); ok {
		// Every rank writes its own shard of the moments; rank 0 commits
		// the step once they all are durable (see saveShard).
		if err := c.saveShard(r, step, lo, hi, world, store); err != nil {
			return err
		}
	}
	if r.cfg.Rank != 0 { // rank 0 checkpoints for the whole group
		return nil
	}
	if c.lastStep == step {
		return nil // saved already (a stop right after an interval checkpoint)
	}
	t0 := time.Now()
	c.take(r, step, best)
	c.snapTime = time.Since(t0)
	if sync {
		return c.report(r.log, c.write(), false)
	}
	c.busy = true
	go func() { c.done <- c.write() }()
	return nil
}

// restore loads the checkpoint in dir into the model and optimizer and
// returns its step and best validation loss.
// checkResume checks that the checkpoint in dir fits the run rc
// describes (see config.ResumeCheck), and carries the checkpoint's history of
// changed settings into rc, with this resume's changes when
// --allow-changes allowed them, which it also logs.
func checkResume(rc *config.RunConfig, was config.RunConfig, dir string, step int, log io.Writer) error {
	changes, warn, err := config.ResumeCheck(was, *rc, rc.Train.AllowChanges)
	fmt.Fprint(log, warn)
	if err != nil {
		return setting.Errorf("{Resume}: checkpoint %s does not fit this run: %w", dir, err)
	}
	rc.History = was.History
	if len(changes) > 0 {
		rc.History = append(slices.Clone(rc.History), config.Resumption{Step: step, Changes: changes})
		for _, c := range changes {
			fmt.Fprintf(log, "resume: --allow-changes: %s changes from %s to %s at step %d\n", c.Flag, c.From, c.To, step)
		}
	}
	return nil
}

func (r *run) restore(dir string, man *checkpoint.Manifest) (step int, best float64, err error) {
	wpath := filepath.Join(dir, ModelFile)
	if err := r.model.LoadWeights(wpath); err != nil {
		return 0, 0, fmt.Errorf("resume: %w", err)
	}
	spath := filepath.Join(dir, StateFile)
	st, err := checkpoint.Load(spath)
	if err != nil {
		return 0, 0, fmt.Errorf("resume: %w", err)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("resume: %s: %s", spath, fmt.Sprintf(format, a...))
	}
	if step, err = strconv.Atoi(st.Metadata["step"]); err != nil || step != man.Step {
		return 0, 0, bad("step %q does not match the manifest's %d", st.Metadata["step"], man.Step)
	}
	adamSteps, err := strconv.Atoi(st.Metadata["adam_steps"])
	if err != nil {
		return 0, 0, bad("adam_steps %q", st.Metadata["adam_steps"])
	}
	r.opt.SetStepCount(adamSteps)
	if best, err = strconv.ParseFloat(st.Metadata["best_val_loss"], 64); err != nil {
		best = math.Inf(1)
	}
	if err := r.scaler.Restore(st.Metadata); err != nil {
		return 0, 0, bad("%v", err)
	}
	if g := st.Metadata["dropout_rng"]; r.cfg.Dropout > 0 && g != backend.DropoutGenerator {
		fmt.Fprintf(r.log, "resume: the checkpoint's dropout masks came from %q, this run draws them from %q: the result is not bitwise that of an uninterrupted run\n",
			g, backend.DropoutGenerator)
	}
	if w := st.Metadata["world_size"]; w != strconv.Itoa(max(r.cfg.WorldSize, 1)) {
		fmt.Fprintf(r.log, "resume: the checkpoint was written by a world of %s processes, this run has %d: the batches are the same, but the result is not bitwise that of an uninterrupted run\n",
			w, max(r.cfg.WorldSize, 1))
	}
	if st.Metadata[metaZeroWorld] != "" {
		if err := restoreShards(r, dir, st.Metadata); err != nil {
			return 0, 0, bad("%v", err)
		}
		return step, best, nil
	}
	for i, p := range r.model.Parameters() {
		for _, mv := range []struct {
			prefix string
			i      int
		}{{"exp_avg.", 0}, {"exp_avg_sq.", 1}} {
			name := mv.prefix + p.Name
			t, ok := st.Tensors[name]
			if !ok {
				return 0, 0, bad("missing tensor %s", name)
			}
			if t.DType != checkpoint.F32 || !slices.Equal(t.Shape, []int(p.T.Shape())) {
				return 0, 0, bad("tensor %s is %s %v, want F32 %v", name, t.DType, t.Shape, p.T.Shape())
			}
			v, err := t.Float32s()
			if err != nil {
				return 0, 0, bad("tensor %s: %v", name, err)
			}
			m, vt := r.opt.State(i)
			if mv.i == 0 {
				m.SetFloat32s(v)
			} else {
				vt.SetFloat32s(v)
			}
		}
	}
	return step, best, nil
}

// keepMetrics loads metrics.jsonl of the run being resumed at step,
// keeping the lines up to it (the evaluation at step itself runs again).
func (r *run) keepMetrics(step int) {
	b, err := os.ReadFile(filepath.Join(r.cfg.Out, MetricsFile))
	if err != nil {
		return
	}
	for _, line := range splitLines(b) {
		var m Metric
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		if m.Step < step || (m.Step == step && m.ValLoss == nil) {
			r.out.metrics.Write(line)
			r.out.metrics.WriteByte('\n')
		}
	}
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		i := slices.Index(b, '\n')
		if i < 0 {
			out = append(out, b)
			break
		}
		if i > 0 {
			out = append(out, b[:i])
		}
		b = b[i+1:]
	}
	return out
}
