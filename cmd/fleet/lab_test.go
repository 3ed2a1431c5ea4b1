package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fleetml/fleet/lab"
	"github.com/fleetml/fleet/monitor/report"
)

// TestBenchLabQuick runs every experiment of `fleet bench lab --quick` on
// the CPU but dataparallel (which runs the fleet binary: see
// TestBenchLabDataParallel) and checks that lab.json holds sane
// measurements.
func TestBenchLabQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs training steps")
	}
	dir := t.TempDir()
	var out, errb bytes.Buffer
	only := strings.Join(lab.Experiments[:7], ",")
	if code := run([]string{"bench", "lab", "--quick", "--device", "cpu", "--only", only, "--out", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errb.String())
	}
	text := out.String()
	for _, want := range []string{"1. vector add", "2. matmul", "7. gpu speed-up", "GB/s", "TFLOP/s", "tokens/s",
		"not applicable: no host↔device copies on the CPU", "not applicable: no GPU", "lab.json"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "lab.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r lab.Result
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("lab.json: %v", err)
	}
	if r.Device != "cpu" || !r.Quick || r.Model.Params <= 0 {
		t.Errorf("device %q quick %v params %d", r.Device, r.Quick, r.Model.Params)
	}
	pos := func(what string, v float64) {
		t.Helper()
		if !(v > 0) || math.IsInf(v, 0) {
			t.Errorf("%s = %v, want a positive number", what, v)
		}
	}
	if len(r.VecAdd.Points) < 3 {
		t.Errorf("vector add: %d sizes, want at least 3", len(r.VecAdd.Points))
	}
	for i, p := range r.VecAdd.Points {
		pos("vector add GB/s", p.GBs)
		if i > 0 && p.Bytes <= r.VecAdd.Points[i-1].Bytes {
			t.Errorf("vector add sizes not increasing: %+v", r.VecAdd.Points)
		}
	}
	dtypes := map[string]int{}
	for _, p := range r.MatMul.Points {
		pos("matmul TFLOP/s", p.TFLOPs)
		pos("matmul peak", p.PeakTFLOPs)
		dtypes[p.DType.String()]++
	}
	if dtypes["fp32"] < 2 || dtypes["bf16"] < 2 {
		t.Errorf("matmul points by dtype: %v", dtypes)
	}
	if r.Copy.Applicable || !strings.HasPrefix(r.Copy.Note, "not applicable") || len(r.Copy.Points) != 0 {
		t.Errorf("host-to-device copies on the CPU: %+v", r.Copy)
	}
	if r.Speedup.Applicable || !strings.HasPrefix(r.Speedup.Note, "not applicable") || r.Speedup.GPU != nil {
		t.Errorf("GPU speed-up on the CPU: %+v", r.Speedup)
	}
	if len(r.Sweep.Points) < 3 {
		t.Fatalf("batch sweep: %d points, want at least 3", len(r.Sweep.Points))
	}
	for i, p := range r.Sweep.Points {
		pos("sweep tokens/s", p.TokensPerSec)
		pos("sweep step ms", p.StepMs)
		pos("sweep peak memory", float64(p.PeakBytes))
		if p.Util <= 0 || p.Util > 1 {
			t.Errorf("batch %d: utilisation %v, want (0, 1]", p.Batch, p.Util)
		}
		if i > 0 && p.Batch <= r.Sweep.Points[i-1].Batch {
			t.Errorf("sweep batches not increasing: %+v", r.Sweep.Points)
		}
	}
	if len(r.Precision) != 2 || r.Precision[0].Name != "fp32" || r.Precision[1].Name != "bf16" {
		t.Fatalf("precision: %+v", r.Precision)
	}
	for _, p := range r.Precision {
		pos(p.Name+" tokens/s", p.TokensPerSec)
		pos(p.Name+" peak memory", float64(p.PeakBytes))
	}
	rl, err := report.ReadLab(filepath.Join(dir, report.LabFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(rl.Sweep.Points) != len(r.Sweep.Points) || rl.Sweep.Points[0].TokensPerSec != r.Sweep.Points[0].TokensPerSec {
		t.Errorf("fleet report reads the sweep as %+v, lab wrote %+v", rl.Sweep.Points, r.Sweep.Points)
	}
	a := r.Accum
	pos("gradient magnitude", a.MaxAbsGrad)
	if a.RelDiff >= 1e-5 || a.MaxAbsDiff/a.MaxAbsGrad >= 1e-5 {
		t.Errorf("accumulated gradient differs by %g (relative %g)", a.MaxAbsDiff, a.RelDiff)
	}
	pos("one batch step ms", a.OneBatch.StepMs)
	pos("accumulated step ms", a.Accumulated.StepMs)
	if a.OneBatch.Batch != a.Batch*a.Steps {
		t.Errorf("one batch of %d, want %d×%d", a.OneBatch.Batch, a.Batch, a.Steps)
	}
}

func TestBenchLabFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"bench", "lab", "--accum-steps", "0", "--out", t.TempDir()}, &out, &errb); code != 1 {
		t.Errorf("--accum-steps 0: exit %d, want 1", code)
	}
	if code := run([]string{"bench", "lab", "--grad-accum", "2", "--out", t.TempDir()}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--accum-steps") {
		t.Errorf("--grad-accum 2: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"bench", "lab", "-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "fleet bench lab") {
		t.Errorf("-h: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"bench", "lab", "--only", "matmul,dataparalel", "--out", t.TempDir()}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `no experiment "dataparalel"`) {
		t.Errorf("--only with a misspelt name: exit %d, %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"bench", "lab", "--dp-devices", "1", "--out", t.TempDir()}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "--dp-devices") {
		t.Errorf("--dp-devices 1: exit %d, %s", code, errb.String())
	}
}

// TestBenchLabDataParallel runs `fleet bench lab --only dataparallel` on
// two logical CPU devices with the fleet binary, which trains the model
// on one device, with --replicas and under fleet run, and checks that the
// output names each mode's step time, efficiency and bytes through the
// first device; that DataParallel's bytes are those the trainer counted;
// that each data-parallel mode has a timeline on both devices; and that
// the report page plots it.
func TestBenchLabDataParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("builds fleet and trains the model three ways")
	}
	bin := buildFleet(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "bench", "lab", "--quick", "--only", "dataparallel", "--device", "cpu", "--n-layer", "1", "--n-head", "2",
		"--n-embd", "32", "--block-size", "16", "--batch-size", "4", "--out", dir)
	cmd.Env = jobEnv()
	b, err := cmd.CombinedOutput()
	text := string(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, want := range []string{"8. DataParallel against DDP", "step ms", "efficiency", "bytes through first", "=> "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	r, err := report.ReadLab(filepath.Join(dir, report.LabFile))
	if err != nil {
		t.Fatal(err)
	}
	d := r.DataParallel
	if d == nil || len(d.Modes) != 3 || !d.Measured || strings.Join(d.Devices, ",") != "cpu,cpu:1" || d.Params <= 0 {
		t.Fatalf("lab.json's dataparallel: %+v", d)
	}
	for i, m := range d.Modes {
		if m.Name != []string{"one device", "DataParallel", "DDP"}[i] || !(m.StepMs > 0) || !(m.TokensPerSec > 0) || !(m.Efficiency > 0) {
			t.Errorf("mode %d: %+v", i, m)
		}
		if !regexp.MustCompile(`(?m)^   ` + m.Name + ` +[0-9.]+ +[0-9]+ +[0-9]+% +[0-9.]+ [KMG]?i?B`).MatchString(text) {
			t.Errorf("no row of figures for %s:\n%s", m.Name, text)
		}
		devs := map[int]bool{}
		for _, s := range m.Timeline {
			if s.EndMs > s.StartMs {
				devs[s.Device] = true
			}
		}
		if (i == 0 && !devs[0]) || (i > 0 && (!devs[0] || !devs[1])) {
			t.Errorf("%s: timeline on devices %v: %+v", m.Name, devs, m.Timeline)
		}
	}
	dp, ddp := d.Modes[1], d.Modes[2]
	if dp.CountedBytes != dp.FirstDeviceBytes || dp.FirstDeviceBytes <= 0 {
		t.Errorf("DataParallel: %g bytes through the first device computed, %g counted by the trainer", dp.FirstDeviceBytes, dp.CountedBytes)
	}
	if want := 2 * float64(4*d.Params); ddp.FirstDeviceBytes != want {
		t.Errorf("DDP on 2 ranks: %g bytes through the first, want 2(N-1)/N·4P sent and received, %g", ddp.FirstDeviceBytes, want)
	}
	var out, errb bytes.Buffer
	if err := reportCmd([]string{dir}, &out, &errb); err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	page, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"DataParallel against DDP", `data-title="Step time on 2 devices, measured`, `data-title="DDP: one step"`,
		`class="bar" data-name="DataParallel"`, `class="span" data-name="sum"`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("report page lacks %q", want)
		}
	}
}
