package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleetml/fleet/internal/atomicfile"
	"github.com/fleetml/fleet/monitor/diagnose"
)

// Files of a run's folder the report reads, and the one it writes.
const (
	SummaryFile = "summary.json"
	ConfigFile  = "config.json"
	MetricsFile = "metrics.jsonl"
	ReportFile  = "report.html"
)

// Record is one line of metrics.jsonl: its numeric fields (booleans as 0
// and 1); other fields are dropped.
type Record map[string]float64

// Run is what a run's folder holds, as far as the report is concerned.
// Missing files leave their field nil; Problems lists what could not be
// read, and the page shows it.
type Run struct {
	Dir       string
	Summary   map[string]any
	Config    map[string]any
	Metrics   []Record
	Telemetry *diagnose.Telemetry
	Lab       *Lab
	Problems  []string
}

// Load reads a run's folder. It fails only if dir is not a readable
// folder or holds none of the files the report reads; a damaged file is
// a Problem, and the rest of the page is still made.
func Load(dir string) (*Run, error) {
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("run folder %s does not exist", dir)
		}
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a run folder", dir)
	}
	r := &Run{Dir: dir}
	found := 0
	problem := func(path string, err error) {
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		found++
		r.Problems = append(r.Problems, fmt.Sprintf("%s: %v", filepath.Base(path), err))
	}
	readObj := func(name string) map[string]any {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if err != nil {
			problem(path, err)
			return nil
		}
		found++
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: damaged: %v", name, err))
			return nil
		}
		return m
	}
	r.Summary = readObj(SummaryFile)
	r.Config = readObj(ConfigFile)
	if r.Config == nil {
		if c, ok := r.Summary["config"].(map[string]any); ok {
			r.Config = map[string]any{"train": c}
		}
	}
	path := filepath.Join(dir, MetricsFile)
	if f, err := os.Open(path); err != nil {
		problem(path, err)
	} else {
		found++
		var bad int
		r.Metrics, bad, err = ReadMetrics(f)
		f.Close()
		if err != nil {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %v", MetricsFile, err))
		}
		if bad > 0 {
			r.Problems = append(r.Problems, fmt.Sprintf("%s: %d lines that are not JSON objects skipped", MetricsFile, bad))
		}
	}
	path = filepath.Join(dir, diagnose.TelemetryFile)
	if t, err := diagnose.ReadFile(path); err != nil {
		problem(path, err)
	} else {
		found++
		r.Telemetry = &t
	}
	path = filepath.Join(dir, LabFile)
	if l, err := ReadLab(path); err != nil {
		problem(path, err)
	} else {
		found++
		r.Lab = &l
	}
	if found == 0 {
		return nil, fmt.Errorf("%s holds no run files (%s, %s, %s, %s or %s)", dir, SummaryFile, ConfigFile, MetricsFile, diagnose.TelemetryFile, LabFile)
	}
	return r, nil
}

// ReadMetrics reads metrics.jsonl: one JSON object per line. It returns
// the records and how many non-blank lines were not JSON objects (a line
// cut short by a kill, say).
func ReadMetrics(rd io.Reader) ([]Record, int, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []Record
	bad := 0
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			bad++
			continue
		}
		rec := Record{}
		for k, v := range m {
			switch v := v.(type) {
			case float64:
				rec[k] = v
			case bool:
				rec[k] = map[bool]float64{false: 0, true: 1}[v]
			}
		}
		out = append(out, rec)
	}
	return out, bad, sc.Err()
}

// Write renders the run in dir as a page at out, atomically.
func Write(dir, out string) error {
	r, err := Load(dir)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		return err
	}
	return atomicfile.WriteFile(out, b.Bytes())
}

// A field of metrics.jsonl goes to the plot of the first group whose
// test it passes; the rest get a plot each.
type group struct {
	title, ylabel string
	match         func(key string) bool
}

var groups = []group{
	{"Loss", "loss", func(k string) bool { return strings.HasSuffix(k, "_loss") || k == "loss" }},
	{"Throughput", "tokens/s", func(k string) bool { return strings.Contains(k, "tokens_per_s") || strings.Contains(k, "tok_per_s") }},
	{"Step time by phase", "ms per step", func(k string) bool { return strings.HasSuffix(k, "_ms") || strings.HasPrefix(k, "ms_per") }},
	{"Utilisation", "percent", func(k string) bool { return strings.Contains(k, "util") }},
	{"MFU", "model FLOP/s over peak", func(k string) bool { return strings.Contains(k, "mfu") }},
	{"Memory", "bytes", func(k string) bool { return strings.Contains(k, "mem") }},
}

// evalKey marks the lines of metrics.jsonl written by an evaluation.
const evalKey = "val_loss"

// plots builds the metrics plots: the groups in order (Loss and
// Throughput always, with a no-data note if need be), then one plot for
// each other field.
func (r *Run) plots() []template.HTML {
	keys := map[string]bool{}
	for _, rec := range r.Metrics {
		for k := range rec {
			keys[k] = true
		}
	}
	delete(keys, "step")
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	// Within a plot, the train loss comes first and the val loss second
	// (the first two colours), and the step's phases in their order after
	// the step time.
	order := []string{"train_loss", "val_loss", "ms_per_step", "data_wait_ms", "h2d_ms", "forward_ms", "backward_ms",
		"comm_ms", "optimizer_ms", "ckpt_log_ms"}
	rank := func(k string) int {
		for i, o := range order {
			if k == o {
				return i
			}
		}
		return len(order)
	}
	sort.SliceStable(sorted, func(i, j int) bool { return rank(sorted[i]) < rank(sorted[j]) })

	used := map[string]bool{}
	var out []template.HTML
	for gi, g := range groups {
		// Evaluation estimates of a field also logged (the train loss
		// at eval steps) come after the group's own series.
		var ss, evals []Series
		for _, k := range sorted {
			if used[k] || !g.match(k) {
				continue
			}
			used[k] = true
			s := r.series(k)
			ss = append(ss, s[0])
			evals = append(evals, s[1:]...)
		}
		ss = append(ss, evals...)
		if len(ss) == 0 && gi >= 2 {
			continue
		}
		out = append(out, LinePlot(g.title, "step", g.ylabel, ss...))
	}
	for _, k := range sorted {
		if !used[k] {
			out = append(out, LinePlot(k, "step", k, r.series(k)...))
			used[k] = true
		}
	}
	return out
}

// series is field k against step: one series, or, for a field that
// evaluation lines and ordinary lines both carry (the train loss), two:
// the logged one and the evaluation's estimate.
func (r *Run) series(k string) []Series {
	var plain, eval Series
	plain.Name, eval.Name = k, k+" (eval)"
	plain.Color = phaseColor[k]
	for i, rec := range r.Metrics {
		v, ok := rec[k]
		if !ok {
			continue
		}
		x, ok := rec["step"]
		if !ok {
			x = float64(i)
		}
		s := &plain
		if _, isEval := rec[evalKey]; isEval && k != evalKey {
			s = &eval
		}
		s.X = append(s.X, x)
		s.Y = append(s.Y, v)
	}
	switch {
	case len(eval.X) == 0:
		return []Series{plain}
	case len(plain.X) == 0:
		eval.Name = k
		return []Series{eval}
	}
	return []Series{plain, eval}
}

// labPlots draws the batch-size sweep: tokens/s, utilisation (and MFU)
// and peak memory against the batch.
func (r *Run) labPlots() []template.HTML {
	if r.Lab == nil || len(r.Lab.Sweep.Points) == 0 {
		return nil
	}
	var x, tps, util, mfu, mem []float64
	for _, p := range r.Lab.Sweep.Points {
		x = append(x, float64(p.Batch))
		tps = append(tps, orNaN(p.TokensPerSec))
		util = append(util, orNaN(100*p.Util))
		mfu = append(mfu, orNaN(100*p.MFU))
		mem = append(mem, orNaN(float64(p.PeakBytes)))
	}
	out := []template.HTML{LinePlot("Batch-size sweep: throughput", "micro-batch", "tokens/s", Series{Name: "tokens/s", X: x, Y: tps})}
	us := []Series{{Name: "utilisation %", X: x, Y: util, Color: Palette[1]}}
	if anyFinite(mfu) {
		us = append(us, Series{Name: "MFU %", X: x, Y: mfu, Color: Palette[2]})
	}
	out = append(out, LinePlot("Batch-size sweep: utilisation", "micro-batch", "percent", us...))
	if anyFinite(mem) {
		out = append(out, LinePlot("Batch-size sweep: peak memory", "micro-batch", "bytes", Series{Name: "peak memory", X: x, Y: mem, Color: Palette[3]}))
	}
	return out
}

// orNaN leaves out (as NaN) a value that was not measured: zero or
// negative.
func orNaN(v float64) float64 {
	if v <= 0 {
		return math.NaN()
	}
	return v
}

func anyFinite(v []float64) bool {
	for _, f := range v {
		if finite(f) {
			return true
		}
	}
	return false
}

// kv is one row of a table.
type kv struct{ Key, Value string }

// summaryFirst orders summary.json's best-known fields first.
var summaryFirst = []string{"device", "steps", "tokens_per_sec", "ms_per_step", "best_val_loss", "final_val_loss",
	"final_train_loss", "val_perplexity", "data_wait_ms", "data_wait_share", "num_params", "elapsed_sec", "data"}

// table lists m's scalar fields (nested objects left out), the keys of
// first in that order, then the rest sorted.
func table(m map[string]any, first []string) []kv {
	var rows []kv
	seen := map[string]bool{}
	add := func(k string) {
		v, ok := m[k]
		if !ok || seen[k] {
			return
		}
		seen[k] = true
		switch v := v.(type) {
		case map[string]any, []any:
			return
		case float64:
			rows = append(rows, kv{k, fmtNum(v)})
		case nil:
			rows = append(rows, kv{k, "—"})
		default:
			rows = append(rows, kv{k, fmt.Sprint(v)})
		}
	}
	for _, k := range first {
		add(k)
	}
	rest := make([]string, 0, len(m))
	for k := range m {
		rest = append(rest, k)
	}
	sort.Strings(rest)
	for _, k := range rest {
		add(k)
	}
	return rows
}

func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 5, 64)
}

// configTables is one table for each object in config.json ("train",
// "model"), or one for its top-level scalars.
func configTables(c map[string]any) []struct {
	Name string
	Rows []kv
} {
	var out []struct {
		Name string
		Rows []kv
	}
	if rows := table(c, nil); len(rows) > 0 {
		out = append(out, struct {
			Name string
			Rows []kv
		}{"", rows})
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if m, ok := c[k].(map[string]any); ok {
			out = append(out, struct {
				Name string
				Rows []kv
			}{k, table(m, nil)})
		}
	}
	return out
}

// WriteHTML renders the page.
func (r *Run) WriteHTML(w io.Writer) error {
	d := pageData{Title: "fleet run " + filepath.Base(filepath.Clean(r.Dir)), Dir: r.Dir,
		Generated: time.Now().UTC().Format(time.RFC3339), Problems: r.Problems, Plots: r.plots(), LabPlots: r.labPlots()}
	if r.Lab != nil {
		d.DPPlots = dataParallelPlots(r.Lab.DataParallel)
		d.RecapPlots = recapPlots(r.Lab.Recap)
	}
	if r.Summary != nil {
		// Two columns of rows, side by side.
		rows := table(r.Summary, summaryFirst)
		half := (len(rows) + 1) / 2
		d.Summary = [][]kv{rows[:half], rows[half:]}
	}
	if r.Config != nil {
		d.Config = configTables(r.Config)
	}
	if r.Lab != nil {
		d.Lab = r.Lab
	}
	if r.Telemetry != nil {
		diag := diagnose.Diagnose(*r.Telemetry)
		var b bytes.Buffer
		if err := diagnose.Format(&b, diag); err != nil {
			return err
		}
		d.Diagnosis = b.String()
		d.Verdict = diag.Main.Title
		d.Healthy = diag.Healthy()
		d.Phases = PhaseBar(r.Telemetry.PhaseMs, r.Telemetry.StepMs)
	}
	return page.Execute(w, d)
}

type pageData struct {
	Title, Dir, Generated string
	Problems              []string
	Summary               [][]kv
	Config                []struct {
		Name string
		Rows []kv
	}
	Plots, LabPlots, DPPlots, RecapPlots []template.HTML
	Lab                                  *Lab
	Diagnosis                            string
	Verdict                              string
	Healthy                              bool
	Phases                               template.HTML
}
