package diagnose

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/fleetml/fleet/internal/atomicfile"
)

// TelemetryFile is the name of the telemetry file in a run's folder.
const TelemetryFile = "telemetry.json"

// TelemetryVersion is the version of Telemetry's JSON form this package
// writes.
const TelemetryVersion = 1

// Phases split an optimizer step's wall time by what it was doing, in
// milliseconds per optimizer step (all micro-steps together). Times are
// on the step's critical path, as the host saw them: Comm is the
// communication the step waited for after backward (the part of it not
// overlapped), not all of it.
type Phases struct {
	DataWait  float64 `json:"data_wait"` // waiting for the loader's batches
	H2D       float64 `json:"h2d"`       // copying batches (and anything else) to the device
	Forward   float64 `json:"forward"`
	Backward  float64 `json:"backward"`
	Optimizer float64 `json:"optimizer"` // clipping, the scaler and AdamW
	Comm      float64 `json:"comm"`      // gradient all-reduce not hidden behind backward
	CkptLog   float64 `json:"ckpt_log"`  // checkpoint snapshots, log lines and their host reads
}

// PhasesFromMap reads phases keyed by their JSON names (data_wait, h2d,
// forward, backward, optimizer, comm, ckpt_log), as a trainer's summary
// may hold them; other keys are ignored.
func PhasesFromMap(m map[string]float64) Phases {
	return Phases{DataWait: m["data_wait"], H2D: m["h2d"], Forward: m["forward"], Backward: m["backward"],
		Optimizer: m["optimizer"], Comm: m["comm"], CkptLog: m["ckpt_log"]}
}

// Compute is the time in forward, backward and the optimizer.
func (p Phases) Compute() float64 { return p.Forward + p.Backward + p.Optimizer }

// Sum is the time of all the phases.
func (p Phases) Sum() float64 {
	return p.DataWait + p.H2D + p.Compute() + p.Comm + p.CkptLog
}

// Telemetry is what the trainer measured of a run: telemetry.json. Zero
// means not measured for every field where zero is not a plausible
// measurement (utilisation, memory, bandwidth, MFU).
type Telemetry struct {
	Version int `json:"version"`

	Device      string `json:"device"`       // cpu, cuda:0, ...
	DeviceKind  string `json:"device_kind"`  // cpu or cuda
	DeviceName  string `json:"device_name"`  // the GPU's or CPU's model name
	Precision   string `json:"precision"`    // fp32, bf16 or fp16
	TensorCores bool   `json:"tensor_cores"` // the device has tensor cores (never a CPU)
	// Cores is, on a CPU, how many cores the process may use (the
	// denominator of its utilisation).
	Cores int `json:"cores,omitempty"`

	WorldSize   int  `json:"world_size"`
	MicroBatch  int  `json:"micro_batch"` // sequences per micro-step per process
	BlockSize   int  `json:"block_size"`
	GradAccum   int  `json:"grad_accum"`
	AutoBatch   bool `json:"auto_batch"` // the micro-batch was chosen by --batch-size auto
	DataWorkers int  `json:"data_workers,omitempty"`
	Prefetch    int  `json:"prefetch,omitempty"`

	Steps        int     `json:"steps"`          // optimizer steps measured
	StepMs       float64 `json:"step_ms"`        // mean ms per optimizer step over the measured steps (the phases are means too)
	TokensPerSec float64 `json:"tokens_per_sec"` // per process
	MFU          float64 `json:"mfu"`            // model FLOP/s over PeakFLOPs, 0..1
	PeakFLOPs    float64 `json:"peak_flops"`     // the peak MFU is measured against, FLOP/s

	PhaseMs Phases `json:"phase_ms"`

	H2DBytesPerStep int64 `json:"h2d_bytes_per_step"`
	D2HBytesPerStep int64 `json:"d2h_bytes_per_step"`
	// LinkBytesPerSec is the host-device link's bandwidth, measured or
	// nominal; 0 means unknown (DefaultLinkBytesPerSec is assumed).
	LinkBytesPerSec float64 `json:"link_bytes_per_sec,omitempty"`
	// HostSyncsPerStep counts host reads of device values inside a step
	// (each one waits for the device to finish the work queued before it).
	HostSyncsPerStep float64 `json:"host_syncs_per_step"`
	// TrainerSyncsPerStep is how many of them the trainer's loop makes by
	// design (the loss of each micro-step, the gradient norm): only reads
	// beyond those are a finding.
	TrainerSyncsPerStep float64 `json:"trainer_syncs_per_step,omitempty"`

	// Utilisation in percent: on a GPU the driver's busy time; on a CPU
	// the process's CPU time over the cores it may use.
	UtilMeanPct float64 `json:"util_mean_pct"`
	UtilPeakPct float64 `json:"util_peak_pct"`
	// HostBusyPct is, on a CPU, how busy all of the machine's cores were
	// (every process's use) on average: well above UtilMeanPct, other
	// processes took the cores the run did not use.
	HostBusyPct float64 `json:"host_busy_pct,omitempty"`

	MemUsedBytes  int64 `json:"mem_used_bytes"`  // at the end of the run
	MemPeakBytes  int64 `json:"mem_peak_bytes"`  // the most held at once
	MemTotalBytes int64 `json:"mem_total_bytes"` // the device's (a CPU: what the process may use)
	// OptimizerStateBytes is the memory of AdamW's moments on this
	// process: all of them, or its shard's with a sharded optimizer
	// (ZeRO-1), about 1/WorldSize of that.
	OptimizerStateBytes int64 `json:"optimizer_state_bytes,omitempty"`
	ZeroStage           int   `json:"zero_stage,omitempty"`

	CommMsPerStep    float64 `json:"comm_ms_per_step"`   // all of the step's communication
	CommOverlappedMs float64 `json:"comm_overlapped_ms"` // the part of it that ran during backward

	// OverheadPct is what measuring cost, in percent of the step time,
	// as the trainer measured it.
	OverheadPct float64 `json:"overhead_pct"`
}

// ReadFile reads a telemetry file. Its errors name the file.
func ReadFile(path string) (Telemetry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Telemetry{}, err
	}
	t, err := Decode(bytes.NewReader(b))
	if err != nil {
		return Telemetry{}, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Decode reads telemetry's JSON form and checks it. Fields it does not
// know are ignored, so newer files still read.
func Decode(r io.Reader) (Telemetry, error) {
	var t Telemetry
	d := json.NewDecoder(r)
	if err := d.Decode(&t); err != nil {
		if errors.Is(err, io.EOF) {
			return t, errors.New("empty telemetry")
		}
		return t, fmt.Errorf("damaged telemetry: %w", err)
	}
	if d.More() {
		return t, errors.New("damaged telemetry: data after the JSON object")
	}
	return t, t.Validate()
}

// Validate reports values no measurement can have.
func (t Telemetry) Validate() error {
	if t.StepMs <= 0 || t.Steps <= 0 {
		return fmt.Errorf("telemetry has no measured steps (steps %d, median step %g ms)", t.Steps, t.StepMs)
	}
	nums := []struct {
		name string
		v    float64
	}{
		{"tokens_per_sec", t.TokensPerSec}, {"mfu", t.MFU}, {"peak_flops", t.PeakFLOPs},
		{"phase_ms.data_wait", t.PhaseMs.DataWait}, {"phase_ms.h2d", t.PhaseMs.H2D},
		{"phase_ms.forward", t.PhaseMs.Forward}, {"phase_ms.backward", t.PhaseMs.Backward},
		{"phase_ms.optimizer", t.PhaseMs.Optimizer}, {"phase_ms.comm", t.PhaseMs.Comm},
		{"phase_ms.ckpt_log", t.PhaseMs.CkptLog},
		{"h2d_bytes_per_step", float64(t.H2DBytesPerStep)}, {"d2h_bytes_per_step", float64(t.D2HBytesPerStep)},
		{"link_bytes_per_sec", t.LinkBytesPerSec}, {"host_syncs_per_step", t.HostSyncsPerStep},
		{"util_mean_pct", t.UtilMeanPct}, {"util_peak_pct", t.UtilPeakPct},
		{"mem_used_bytes", float64(t.MemUsedBytes)}, {"mem_peak_bytes", float64(t.MemPeakBytes)},
		{"mem_total_bytes", float64(t.MemTotalBytes)},
		{"comm_ms_per_step", t.CommMsPerStep}, {"comm_overlapped_ms", t.CommOverlappedMs},
		{"overhead_pct", t.OverheadPct},
		{"world_size", float64(t.WorldSize)}, {"micro_batch", float64(t.MicroBatch)},
		{"block_size", float64(t.BlockSize)}, {"grad_accum", float64(t.GradAccum)},
	}
	for _, n := range nums {
		if n.v < 0 || math.IsNaN(n.v) || math.IsInf(n.v, 0) {
			return fmt.Errorf("telemetry %s is %g", n.name, n.v)
		}
	}
	if t.MFU > 1 {
		return fmt.Errorf("telemetry mfu is %g, above 1", t.MFU)
	}
	return nil
}

// WriteFile writes t as indented JSON, atomically.
func WriteFile(path string, t Telemetry) error {
	if t.Version == 0 {
		t.Version = TelemetryVersion
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(path, append(b, '\n'))
}
