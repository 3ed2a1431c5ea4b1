package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetml/fleet/monitor/diagnose"
)

func newRand(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 2))
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// makeRun writes a run folder like the trainer's: a log line every step
// (with fields the trainer may add later: util, mem_bytes, mfu,
// grad_norm), an evaluation every 20 steps, summary, config, telemetry
// and a lab sweep.
func makeRun(t *testing.T, r *rand.Rand, steps int) string {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	loss := 4 + r.Float64()
	for s := 0; s <= steps; s++ {
		loss *= 0.99 - 0.005*r.Float64()
		if s > 0 {
			fmt.Fprintf(&b, `{"step":%d,"train_loss":%g,"lr":%g,"ms_per_step":%g,"tokens_per_sec":%g,"data_wait_ms":%g,"util":%g,"mem_bytes":%d,"mfu":%g,"grad_norm":%g}`+"\n",
				s, loss, 1e-3*float64(s)/float64(steps), 50+5*r.Float64(), 15000+2000*r.Float64(), 0.02*r.Float64(),
				80+15*r.Float64(), 1<<30+r.IntN(1<<20), 0.3+0.1*r.Float64(), 1+r.Float64())
		}
		if s%20 == 0 {
			fmt.Fprintf(&b, `{"step":%d,"train_loss":%g,"val_loss":%g,"val_perplexity":%g}`+"\n", s, loss*0.98, loss*1.02, math.Exp(loss*1.02))
		}
	}
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	writeJSON(t, filepath.Join(dir, SummaryFile), map[string]any{"best_val_loss": loss, "tokens_per_sec": 15000 + r.Float64(),
		"steps": steps, "device": "cpu", "data": "some <b>text</b> & more", "config": map[string]any{"n_layer": 4}})
	writeJSON(t, filepath.Join(dir, ConfigFile), map[string]any{"train": map[string]any{"n_layer": 4, "batch_size": 12, "precision": "fp32"},
		"model": map[string]any{"vocab_size": 97, "n_embd": 128}})
	tel := diagnose.Telemetry{Device: "cpu", DeviceKind: "cpu", Precision: "fp32", WorldSize: 1, MicroBatch: 12, BlockSize: 64,
		GradAccum: 1, Steps: steps, StepMs: 50, TokensPerSec: 15000, Cores: 2,
		PhaseMs:     diagnose.Phases{DataWait: 20 + r.Float64(), Forward: 10, Backward: 15, Optimizer: 3},
		UtilMeanPct: 55, UtilPeakPct: 90, MemPeakBytes: 1 << 30, MemTotalBytes: 8 << 30}
	if err := diagnose.WriteFile(filepath.Join(dir, diagnose.TelemetryFile), tel); err != nil {
		t.Fatal(err)
	}
	lab := Lab{Device: "cpu", DeviceName: "Test CPU", Sweep: Sweep{Chosen: 16}}
	for bs := 1; bs <= 64; bs *= 2 {
		lab.Sweep.Points = append(lab.Sweep.Points, SweepPoint{Batch: bs, TokensPerSec: 4000 * math.Log2(float64(2*bs)) * (0.9 + 0.2*r.Float64()),
			Util: 1 - 0.6/float64(bs), MFU: 0.05 * math.Log2(float64(2*bs)), PeakBytes: int64(bs) << 20})
	}
	writeJSON(t, filepath.Join(dir, LabFile), lab)
	return dir
}

var (
	svgRe      = regexp.MustCompile(`(?s)<svg class="plot" data-title="([^"]*)".*?</svg>`)
	polylineRe = regexp.MustCompile(`<polyline class="series" data-name="([^"]*)"[^>]*points="([^"]*)"`)
	dotRe      = regexp.MustCompile(`<circle class="series"`)
)

// plotPoints maps each plot's title to the point counts of its lines (a
// series of one point, drawn as a dot, counts as a line of 1).
func plotPoints(html string) map[string][]int {
	out := map[string][]int{}
	for _, m := range svgRe.FindAllStringSubmatch(html, -1) {
		out[m[1]] = []int{}
		for _, p := range polylineRe.FindAllStringSubmatch(m[0], -1) {
			out[m[1]] = append(out[m[1]], len(strings.Fields(p[2])))
		}
		for range dotRe.FindAllString(m[0], -1) {
			out[m[1]] = append(out[m[1]], 1)
		}
	}
	return out
}

func render(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "r.html")
	if err := Write(dir, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReportPlotsEveryField(t *testing.T) {
	r := newRand(t)
	steps := 40 + r.IntN(60)
	html := render(t, makeRun(t, r, steps))
	pts := plotPoints(html)
	evals := steps/20 + 1
	want := map[string][]int{
		"Loss":                          {steps, evals, evals}, // train, val, train at evals
		"Throughput":                    {steps},
		"Utilisation":                   {steps},
		"MFU":                           {steps},
		"Memory":                        {steps},
		"grad_norm":                     {steps},
		"lr":                            {steps},
		"Step time by phase":            {steps, steps},
		"val_perplexity":                {evals},
		"Batch-size sweep: throughput":  {7},
		"Batch-size sweep: utilisation": {7, 7},
		"Batch-size sweep: peak memory": {7},
		"Step phases":                   {},
	}
	for title, w := range want {
		got, ok := pts[title]
		if !ok {
			t.Errorf("no plot %q (plots: %v)", title, pts)
			continue
		}
		if fmt.Sprint(got) != fmt.Sprint(w) {
			t.Errorf("plot %q: lines of %v points, want %v", title, got, w)
		}
	}
	if len(pts) != len(want) {
		t.Errorf("%d plots, want %d: %v", len(pts), len(want), pts)
	}
	// Train loss blue, val loss red.
	if !strings.Contains(html, `data-name="train_loss" fill="none" stroke="`+Palette[0]) ||
		!strings.Contains(html, `data-name="val_loss" fill="none" stroke="`+Palette[1]) {
		t.Error("loss plot colours are not the palette's first two")
	}
	for _, want := range []string{"main bottleneck: data loading", "--data-workers", "some &lt;b&gt;text&lt;/b&gt; &amp; more", "n_embd", "--batch-size auto takes 16"} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{"<script", "http://", "https://", "<link", "@import", "url("} {
		if strings.Contains(strings.ReplaceAll(html, `xmlns="http://www.w3.org/2000/svg"`, ""), bad) {
			t.Errorf("page is not self-contained: it has %q", bad)
		}
	}
}

func TestReportEscapesFieldNames(t *testing.T) {
	dir := t.TempDir()
	m := `{"step":1,"<script>alert(1)</script>":2}` + "\n" + `{"step":2,"<script>alert(1)</script>":3}` + "\n"
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	html := render(t, dir)
	if strings.Contains(html, "<script>") || !strings.Contains(html, "&lt;script&gt;") {
		t.Error("a field name went into the page unescaped")
	}
}

func TestReportEmptyAndShortData(t *testing.T) {
	dir := t.TempDir()
	// Only the first evaluation, a line cut short by a kill, and a blank.
	m := `{"step":0,"train_loss":4.5,"val_loss":4.6}` + "\n" + `{"step":10,"train_lo` + "\n\n"
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(m), 0o644); err != nil {
		t.Fatal(err)
	}
	html := render(t, dir)
	if !strings.Contains(html, "1 lines that are not JSON objects skipped") {
		t.Error("the damaged line is not reported")
	}
	// Throughput has no data; the loss has single points, drawn as dots.
	if !strings.Contains(html, `<div class="title">Throughput</div><p>no data</p>`) {
		t.Error("no 'no data' note for the throughput")
	}
	if strings.Count(html, `<circle class="series"`) != 2 {
		t.Error("single-point series are not drawn as dots")
	}
	for _, want := range []string{"No telemetry.json", "No summary.json", "No config.json"} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// An empty metrics file: every plot is a note.
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	html = render(t, dir)
	if strings.Contains(html, "<polyline") || strings.Count(html, "<p>no data</p>") != 2 {
		t.Error("empty metrics: want two 'no data' notes and no lines")
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing folder: %v", err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "no run files") {
		t.Errorf("empty folder: %v", err)
	}
	// Damaged files are reported on the page, naming them.
	for _, f := range []string{SummaryFile, diagnose.TelemetryFile, LabFile} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(`{"steps": 3,`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems) != 3 {
		t.Fatalf("problems %q, want one per damaged file", r.Problems)
	}
	for i, f := range []string{SummaryFile, diagnose.TelemetryFile, LabFile} {
		if !strings.Contains(r.Problems[i], f) {
			t.Errorf("problem %q does not name %s", r.Problems[i], f)
		}
	}
}

func TestReadLabVariants(t *testing.T) {
	r := newRand(t)
	tps := 1000 + 1000*r.Float64()
	for name, body := range map[string]string{
		"documented": fmt.Sprintf(`{"device":"cuda:0","batch_sweep":{"utilisation_source":"x","points":[{"batch":16,"tokens_per_s":%g,"utilisation":0.9},{"batch":8,"tokens_per_s":%g,"utilisation":0.7}],"stop":"y"}}`, 2*tps, tps),
		"array":      fmt.Sprintf(`{"device":"cuda:0","sweep":[{"batch_size":8,"tokens_per_sec":%g,"util":0.7},{"batch_size":16,"tokens_per_sec":%g,"util":0.9}]}`, tps, 2*tps),
		"other keys": fmt.Sprintf(`{"device":"cuda:0","batch_sweep":{"note":"x","steps":[{"Batch":8,"TokensPerSec":%g,"UtilPct":70},{"Batch":16,"TokensPerSec":%g,"UtilPct":90}]}}`, tps, 2*tps),
	} {
		path := filepath.Join(t.TempDir(), LabFile)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		lab, err := ReadLab(path)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		p := lab.Sweep.Points
		if lab.Device != "cuda:0" || len(p) != 2 || p[0].Batch != 8 || p[0].TokensPerSec != tps || math.Abs(p[1].Util-0.9) > 1e-12 {
			t.Errorf("%s: read %+v", name, lab)
		}
	}
}

func TestLinePlotGeometry(t *testing.T) {
	r := newRand(t)
	n := 50 + r.IntN(50)
	x, y := make([]float64, n), make([]float64, n)
	for i := range x {
		x[i] = float64(i * 10)
		y[i] = 1e-4 * r.Float64()
	}
	y[3] = math.NaN()
	svg := string(LinePlot("t", "x", "y", Series{Name: "a", X: x, Y: y}))
	pts := plotPoints(svg)["t"]
	if len(pts) != 1 || pts[0] != n-1 {
		t.Fatalf("points %v, want one line of %d (a NaN left out)", pts, n-1)
	}
	// Every point inside the frame.
	m := polylineRe.FindStringSubmatch(svg)
	for _, p := range strings.Fields(m[2]) {
		var px, py float64
		fmt.Sscanf(p, "%f,%f", &px, &py)
		if px < padL-0.1 || px > plotW-padR+0.1 || py < padTop-0.1 || py > plotH-padBotom+0.1 {
			t.Fatalf("point %s outside the frame", p)
		}
	}
	if got := string(LinePlot("empty", "x", "y", Series{Name: "a"})); !strings.Contains(got, "no data") {
		t.Error("an empty plot is not a no-data note")
	}
}

func TestTicks(t *testing.T) {
	r := newRand(t)
	for range 200 {
		lo := (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(12)-6))
		hi := lo + r.Float64()*math.Pow(10, float64(r.IntN(12)-6))
		tk := ticks(lo, hi, 5)
		if tk[0] > lo || tk[len(tk)-1] < hi || len(tk) < 2 || len(tk) > 12 {
			t.Fatalf("ticks(%g, %g) = %v", lo, hi, tk)
		}
		labels := map[string]bool{}
		for _, v := range tk {
			labels[tickLabel(v, tk)] = true
		}
		if len(labels) != len(tk) {
			t.Fatalf("ticks(%g, %g) = %v have repeated labels %v", lo, hi, tk, labels)
		}
	}
}
