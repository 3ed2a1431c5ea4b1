package diagnose

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// healthy is a well-fed bf16 run on an H100-like GPU, with the numbers
// jittered by r so that no test leans on one exact value.
func healthy(r *rand.Rand) Telemetry {
	j := func(v float64) float64 { return v * (0.95 + 0.1*r.Float64()) }
	step := j(120)
	t := Telemetry{
		Device: "cuda:0", DeviceKind: "cuda", DeviceName: "NVIDIA H100 80GB HBM3", Precision: "bf16", TensorCores: true,
		WorldSize: 1, MicroBatch: 16, BlockSize: 1024, GradAccum: 4, DataWorkers: 4, Prefetch: 8,
		Steps: 200 + r.IntN(100), StepMs: step, MFU: j(0.42), PeakFLOPs: 989e12,
		H2DBytesPerStep: 2 * 4 * 16 * 1024 * 4, D2HBytesPerStep: 8,
		HostSyncsPerStep: 1,
		UtilMeanPct:      j(93), UtilPeakPct: 100,
		MemUsedBytes: int64(j(50e9)), MemPeakBytes: int64(j(60e9)), MemTotalBytes: 80e9,
		OverheadPct: j(0.3),
	}
	t.TokensPerSec = float64(t.MicroBatch*t.BlockSize*t.GradAccum) / (step / 1e3)
	t.PhaseMs = Phases{DataWait: 0.01 * step, H2D: 0.005 * step, Forward: 0.3 * step, Backward: 0.58 * step,
		Optimizer: 0.07 * step, CkptLog: 0.01 * step}
	return t
}

func newRand(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 1))
}

func format(t *testing.T, d Diagnosis) string {
	t.Helper()
	var b bytes.Buffer
	if err := Format(&b, d); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// has reports whether d names kind as the main bottleneck or among the
// secondary findings.
func has(d Diagnosis, k Kind) bool {
	if d.Main.Kind == k {
		return true
	}
	for _, f := range d.Secondary {
		if f.Kind == k {
			return true
		}
	}
	return false
}

func TestHealthyIsComputeBound(t *testing.T) {
	r := newRand(t)
	for range 20 {
		tel := healthy(r)
		d := Diagnose(tel)
		if !d.Healthy() || len(d.Secondary) != 0 {
			t.Fatalf("healthy run diagnosed as %q with %d secondary findings:\n%s", d.Main.Kind, len(d.Secondary), format(t, d))
		}
	}
	d := Diagnose(healthy(r))
	out := format(t, d)
	for _, want := range []string{"bottleneck", "compute-bound", "forward+backward+optimizer", "MFU", "telemetry overhead"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDataStarvation(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	// 40% of the step waiting for data; the device is idle meanwhile.
	tel.PhaseMs.DataWait = 0.4 * tel.StepMs
	tel.PhaseMs.Forward *= 0.6
	tel.PhaseMs.Backward *= 0.6
	tel.UtilMeanPct = 58
	d := Diagnose(tel)
	out := format(t, d)
	if d.Main.Kind != Data {
		t.Fatalf("main bottleneck %q, want data:\n%s", d.Main.Kind, out)
	}
	if has(d, Batch) {
		t.Errorf("a starved device's idle time was blamed on the batch too:\n%s", out)
	}
	for _, want := range []string{"main bottleneck: data loading", "--data-workers 8", "--prefetch 16", "40%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestDataWaitThreshold(t *testing.T) {
	r := newRand(t)
	for _, c := range []struct {
		share float64
		want  bool
	}{{DataWaitShareMin - 0.01, false}, {DataWaitShareMin + 0.01, true}} {
		tel := healthy(r)
		tel.PhaseMs.DataWait = c.share * tel.StepMs
		if got := has(Diagnose(tel), Data); got != c.want {
			t.Errorf("data wait %.0f%%: finding %v, want %v", 100*c.share, got, c.want)
		}
	}
}

func TestSmallBatchOnGPU(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	tel.UtilMeanPct, tel.UtilPeakPct = 25, 40
	tel.MemPeakBytes = tel.MemTotalBytes / 10
	tel.MemUsedBytes = tel.MemPeakBytes
	tel.MFU = 0.08
	d := Diagnose(tel)
	out := format(t, d)
	if d.Main.Kind != Batch {
		t.Fatalf("main bottleneck %q, want batch:\n%s", d.Main.Kind, out)
	}
	// 10% of the memory: 4× the batch fills 40% (8× would be 80%, over
	// the 70% aimed at), and the accumulation of 4 drops to 1.
	for _, want := range []string{"small batch", "--batch-size 64 (now 16)", "--grad-accum 1", "--batch-size auto", "25%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestSmallBatchThresholds(t *testing.T) {
	r := newRand(t)
	for _, c := range []struct {
		util, mem float64
		want      bool
	}{
		{LowUtilPct - 2, MemSpareShare - 0.05, true},
		{LowUtilPct + 2, MemSpareShare - 0.05, false}, // busy enough
		{25, MemSpareShare + 0.05, false},             // no memory to spare
		{25, 0.1, true},
	} {
		tel := healthy(r)
		tel.UtilMeanPct = c.util
		tel.MemPeakBytes = int64(c.mem * float64(tel.MemTotalBytes))
		if got := has(Diagnose(tel), Batch); got != c.want {
			t.Errorf("util %.0f%%, memory %.0f%%: batch finding %v, want %v", c.util, 100*c.mem, got, c.want)
		}
	}
}

func TestSmallBatchOnCPU(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	tel.Device, tel.DeviceKind, tel.DeviceName, tel.TensorCores, tel.Precision = "cpu", "cpu", "Some CPU", false, "fp32"
	tel.Cores = 2
	tel.H2DBytesPerStep, tel.D2HBytesPerStep, tel.HostSyncsPerStep = 0, 0, 40 // syncs are free on a CPU
	tel.UtilMeanPct = 30 + 10*r.Float64()
	tel.MemPeakBytes, tel.MemTotalBytes = 1<<30, 16<<30
	d := Diagnose(tel)
	out := format(t, d)
	if d.Main.Kind != Batch || has(d, Sync) || has(d, Precision) {
		t.Fatalf("CPU: main %q, want batch with no sync or precision finding:\n%s", d.Main.Kind, out)
	}
	if !strings.Contains(out, "its 2 cores") {
		t.Errorf("output does not speak of the cores:\n%s", out)
	}
}

func TestFP32OnTensorCores(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	tel.Precision = "fp32"
	d := Diagnose(tel)
	out := format(t, d)
	if d.Main.Kind != Precision || !strings.Contains(out, "--precision bf16") || !strings.Contains(out, "H100") {
		t.Fatalf("fp32 on an H100: main %q, want precision with --precision bf16:\n%s", d.Main.Kind, out)
	}
	// Not without tensor cores, not on a CPU, not in bf16.
	for _, mod := range []func(*Telemetry){
		func(t *Telemetry) { t.TensorCores = false },
		func(t *Telemetry) { t.DeviceKind, t.Device, t.TensorCores = "cpu", "cpu", true },
		func(t *Telemetry) { t.Precision = "bf16" },
	} {
		tel := healthy(r)
		tel.Precision = "fp32"
		mod(&tel)
		if d := Diagnose(tel); has(d, Precision) {
			t.Errorf("precision finding for %+v:\n%s", tel, format(t, d))
		}
	}
}

func TestTransferHeavy(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	// Whole activations copied back and forth: 1.5 GB each way per step,
	// over 100 ms at 25 GB/s.
	tel.H2DBytesPerStep = int64(1.5e9 * (1 + 0.1*r.Float64()))
	tel.D2HBytesPerStep = int64(1.5e9)
	tel.StepMs = 250
	d := Diagnose(tel)
	out := format(t, d)
	if d.Main.Kind != Transfer || !strings.Contains(out, "keep tensors on the device") {
		t.Fatalf("main %q, want transfer:\n%s", d.Main.Kind, out)
	}
	// Just under and over the threshold, from the measured copy time.
	for _, c := range []struct {
		share float64
		want  bool
	}{{TransferShareMin - 0.01, false}, {TransferShareMin + 0.01, true}} {
		tel := healthy(r)
		tel.PhaseMs.H2D = c.share * tel.StepMs
		if got := has(Diagnose(tel), Transfer); got != c.want {
			t.Errorf("copies %.0f%% of the step: finding %v, want %v", 100*c.share, got, c.want)
		}
	}
	// The same bytes on a CPU are no finding.
	tel.DeviceKind, tel.Device = "cpu", "cpu"
	if has(Diagnose(tel), Transfer) {
		t.Error("transfer finding on a CPU")
	}
}

func TestSyncHeavy(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	tel.StepMs = 20
	tel.PhaseMs = Phases{Forward: 6, Backward: 11, Optimizer: 2}
	tel.HostSyncsPerStep = 100 + float64(r.IntN(50)) // a .Item() per layer per micro-step
	d := Diagnose(tel)
	out := format(t, d)
	if d.Main.Kind != Sync || !strings.Contains(out, "--log-interval") {
		t.Fatalf("main %q, want sync:\n%s", d.Main.Kind, out)
	}
	for _, c := range []struct {
		syncs float64
		want  bool
	}{{MaxSyncsPerStep, false}, {MaxSyncsPerStep + 1, true}} {
		tel := healthy(r)
		tel.HostSyncsPerStep = c.syncs
		if got := has(Diagnose(tel), Sync); got != c.want {
			t.Errorf("%.0f syncs per step: finding %v, want %v", c.syncs, got, c.want)
		}
	}
	// A few syncs in a long step are secondary: the run stays compute-bound.
	tel = healthy(r)
	tel.HostSyncsPerStep = 4
	if d := Diagnose(tel); !d.Healthy() || !has(d, Sync) {
		t.Errorf("4 syncs in a %.0f ms step: main %q, want compute with a secondary sync finding", tel.StepMs, d.Main.Kind)
	}
}

func TestUnoverlappedComm(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	tel.WorldSize = 8
	tel.CommMsPerStep = 0.5 * tel.StepMs
	tel.CommOverlappedMs = 0.1 * tel.CommMsPerStep
	d := Diagnose(tel)
	out := format(t, d)
	if d.Main.Kind != Comm || !strings.Contains(out, "--grad-accum 8 (now 4)") || !strings.Contains(out, "overlap") {
		t.Fatalf("main %q, want comm:\n%s", d.Main.Kind, out)
	}
	// The same communication, overlapped all but 5% of the step.
	tel.CommOverlappedMs = tel.CommMsPerStep - 0.05*tel.StepMs
	if d := Diagnose(tel); has(d, Comm) {
		t.Errorf("overlapped communication reported:\n%s", format(t, d))
	}
	tel.CommOverlappedMs = tel.CommMsPerStep - (ExposedCommShareMin+0.01)*tel.StepMs
	if d := Diagnose(tel); !has(d, Comm) {
		t.Errorf("communication exposed just over the threshold not reported:\n%s", format(t, d))
	}
	// One process never has a communication finding.
	tel.WorldSize = 1
	if has(Diagnose(tel), Comm) {
		t.Error("communication finding for one process")
	}
}

func TestMainIsCostliest(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	tel.PhaseMs.DataWait = 0.15 * tel.StepMs
	tel.WorldSize = 2
	tel.CommMsPerStep, tel.CommOverlappedMs = 0.3*tel.StepMs, 0
	d := Diagnose(tel)
	if d.Main.Kind != Comm || len(d.Secondary) != 1 || d.Secondary[0].Kind != Data {
		t.Fatalf("want comm main and data secondary:\n%s", format(t, d))
	}
	out := format(t, d)
	if !strings.Contains(out, "Also found") || !strings.Contains(out, "data loading") {
		t.Errorf("secondary finding not printed:\n%s", out)
	}
}

func TestTelemetryFileRoundTrip(t *testing.T) {
	r := newRand(t)
	tel := healthy(r)
	path := filepath.Join(t.TempDir(), TelemetryFile)
	if err := WriteFile(path, tel); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tel.Version = TelemetryVersion
	if got != tel {
		t.Fatalf("read back\n%+v\nwrote\n%+v", got, tel)
	}
	for name, body := range map[string]string{
		"truncated": `{"device": "cuda:0", "step_ms": 12`,
		"empty":     ``,
		"no steps":  `{"device": "cpu"}`,
		"negative":  `{"steps": 3, "step_ms": 10, "util_mean_pct": -4}`,
		"trailing":  `{"steps": 3, "step_ms": 10} {}`,
	} {
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), path) {
			t.Errorf("%s file: error %v, want one naming the file", name, err)
		}
	}
}

func TestPhasesFromMap(t *testing.T) {
	r := newRand(t)
	want := Phases{DataWait: r.Float64(), H2D: r.Float64(), Forward: r.Float64(), Backward: r.Float64(),
		Optimizer: r.Float64(), Comm: r.Float64(), CkptLog: r.Float64()}
	// The map a trainer's summary holds is the phases' JSON form.
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["other"] = 1
	if got := PhasesFromMap(m); got != want {
		t.Errorf("PhasesFromMap(%v) = %+v, want %+v", m, got, want)
	}
}

// TestSharedCPU: a CPU run that used 45% of its cores on a machine 100%
// busy was crowded out by other processes, not held back by its batch;
// on a quiet machine (47% busy) the same numbers are a small batch; and
// other processes that took 35 points of the cores shared it as well.
func TestSharedCPU(t *testing.T) {
	tel := Telemetry{DeviceKind: "cpu", Cores: 2, Precision: "fp32", MicroBatch: 12, BlockSize: 64, GradAccum: 1,
		Steps: 50, StepMs: 80, TokensPerSec: 9600, MFU: 0.25, PeakFLOPs: 3e11,
		PhaseMs:     Phases{DataWait: 0.1, Forward: 28, Backward: 48, Optimizer: 3.5, CkptLog: 0.4},
		UtilMeanPct: 45, UtilPeakPct: 50, MemPeakBytes: 70 << 20, MemTotalBytes: 24 << 30}
	tel.HostBusyPct = 100
	if d := Diagnose(tel); d.Main.Kind != Shared {
		t.Errorf("busy machine: main finding %q, want %q", d.Main.Kind, Shared)
	} else {
		for _, f := range d.Secondary {
			if f.Kind == Batch {
				t.Errorf("busy machine: a small-batch finding too: %+v", f)
			}
		}
	}
	tel.HostBusyPct = 47
	if d := Diagnose(tel); d.Main.Kind != Batch {
		t.Errorf("quiet machine: main finding %q, want %q", d.Main.Kind, Batch)
	}
	// Others kept a third of the cores busy on a machine 80% busy: shared
	// too, though under the 90% threshold.
	tel.HostBusyPct = 80
	if d := Diagnose(tel); d.Main.Kind != Shared {
		t.Errorf("a machine others took 35 points of: main finding %q, want %q", d.Main.Kind, Shared)
	}
}
