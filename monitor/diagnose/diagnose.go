package diagnose

import (
	"fmt"
	"sort"
	"strings"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/units"
)

// The rules' thresholds. Shares are of the median optimizer step's wall
// time.
const (
	// DataWaitShareMin: a step that waits a tenth of its time for data
	// loses more than a well-fed pipeline's noise (fleet's loader keeps
	// the wait under 1% of the step on the reference run).
	DataWaitShareMin = 0.10
	// LowUtilPct and MemSpareShare: a device busy less than 60% of the
	// time while using less than half of its memory can hold a larger
	// batch, which fills it better. Both must hold: a full memory rules a
	// larger batch out whatever the utilisation.
	LowUtilPct    = 60.0
	MemSpareShare = 0.5
	// UnexplainedIdleMin: the small-batch rule fires only when at least
	// this share of the step is idle time that the data wait, copies,
	// syncs and communication do not explain (a starved device is idle
	// too, and a larger batch would starve it more).
	UnexplainedIdleMin = 0.10
	// SharedHostBusyPct: on a CPU, a machine whose cores were this busy
	// on average while the run used fewer of them was shared with other
	// processes; their share of the cores explains the run's idle time.
	SharedHostBusyPct = 90.0
	// SharedOthersPct: on a CPU, other processes that kept this many
	// points of the machine's cores busy (its busy share less the run's)
	// shared it too, however busy the machine was in all.
	SharedOthersPct = 25.0
	// TransferShareMin: host-device copies taking a tenth of the step.
	TransferShareMin = 0.10
	// DefaultLinkBytesPerSec is the host-device bandwidth assumed when
	// telemetry has none: PCIe 4.0 x16 as pinned copies reach it
	// (about 25 GB/s of its 32).
	DefaultLinkBytesPerSec = 25e9
	// MaxSyncsPerStep: a step needs at most two host reads (the logged
	// loss, and fp16's overflow check); more on a GPU is a finding.
	MaxSyncsPerStep = 2.0
	// SyncCostMs is the estimated device idle time per host read: the
	// read waits for the queue to drain, then the device waits for the
	// host to launch the next kernels (tens of microseconds).
	SyncCostMs = 0.05
	// ExposedCommShareMin: communication not hidden behind backward that
	// takes a tenth of the step.
	ExposedCommShareMin = 0.10
	// CkptLogShareMin: checkpoint snapshots and logging taking a tenth of
	// the step.
	CkptLogShareMin = 0.10
	// MainShareMin: a finding is named the main bottleneck only if it
	// costs at least this share of the step; otherwise the run is
	// compute-bound and the finding is secondary.
	MainShareMin = 0.05
	// BF16Gain is the share of compute time bf16 products save on tensor
	// cores, conservatively: tensor cores run bf16 at 2× TF32's rate and
	// 8× or more fp32's.
	BF16Gain = 0.5
)

// Kind names a bottleneck.
type Kind string

// The bottlenecks Diagnose can name.
const (
	Compute   Kind = "compute" // the healthy verdict
	Data      Kind = "data"
	Batch     Kind = "batch"
	Transfer  Kind = "transfer"
	Precision Kind = "precision"
	Sync      Kind = "sync"
	Comm      Kind = "comm"
	CkptLog   Kind = "ckpt_log"
	Shared    Kind = "shared" // other processes took the CPU's cores
)

// Finding is one diagnosed problem (or, for Compute, the healthy verdict).
type Finding struct {
	Kind  Kind   `json:"kind"`
	Title string `json:"title"` // for people: "data loading"
	// Evidence is the measurements behind the finding, one sentence each.
	Evidence []string `json:"evidence"`
	// Fix is what to change, with concrete flags.
	Fix string `json:"fix"`
	// Cost is the estimated share of the step the problem costs (0..1);
	// for Compute, the share of the step spent computing.
	Cost float64 `json:"cost"`
}

// Diagnosis is Diagnose's verdict.
type Diagnosis struct {
	Main Finding `json:"main"`
	// Secondary findings, costliest first.
	Secondary []Finding `json:"secondary,omitempty"`
	// Run describes the run in one line; Notes are context (the phases,
	// telemetry's own overhead).
	Run   string   `json:"run"`
	Notes []string `json:"notes,omitempty"`
}

// Healthy reports whether the verdict is compute-bound.
func (d Diagnosis) Healthy() bool { return d.Main.Kind == Compute }

// Diagnose applies the rules to t.
func Diagnose(t Telemetry) Diagnosis {
	step := t.StepMs
	share := func(ms float64) float64 {
		if step <= 0 {
			return 0
		}
		return ms / step
	}
	gpu := t.DeviceKind != "" && !(backend.Device{Kind: t.DeviceKind}).OnCPU()
	var fs []Finding

	// Data loading.
	dataShare := share(t.PhaseMs.DataWait)
	if dataShare >= DataWaitShareMin {
		workers, prefetch := t.DataWorkers, t.Prefetch
		fix := "--data-workers and --prefetch: more goroutines drawing batches, drawn further ahead"
		if workers > 0 {
			if prefetch <= 0 {
				prefetch = 2 * workers
			}
			fix = fmt.Sprintf("--data-workers %d --prefetch %d (now %d and %d): more goroutines drawing batches, drawn further ahead",
				2*workers, 2*max(prefetch, workers), workers, prefetch)
		}
		fs = append(fs, Finding{Kind: Data, Title: "data loading", Cost: dataShare,
			Evidence: []string{fmt.Sprintf("the step waited %.1f ms of its %.1f ms for data (%.0f%%, the threshold is %.0f%%)",
				t.PhaseMs.DataWait, step, 100*dataShare, 100*DataWaitShareMin)},
			Fix: fix})
	}

	// Host-device transfers.
	var transferShare float64
	if gpu {
		link := t.LinkBytesPerSec
		if link <= 0 {
			link = DefaultLinkBytesPerSec
		}
		bytes := t.H2DBytesPerStep + t.D2HBytesPerStep
		estMs := float64(bytes) / link * 1e3
		measured := share(t.PhaseMs.H2D)
		transferShare = max(measured, share(estMs))
		if transferShare >= TransferShareMin {
			ev := []string{fmt.Sprintf("%s host→device and %s device→host per step", units.Bytes(t.H2DBytesPerStep), units.Bytes(t.D2HBytesPerStep))}
			if t.PhaseMs.H2D > 0 {
				ev = append(ev, fmt.Sprintf("copies held the step %.1f ms of %.1f ms (%.0f%%)", t.PhaseMs.H2D, step, 100*measured))
			}
			ev = append(ev, fmt.Sprintf("at %.0f GB/s the bytes alone take %.1f ms (%.0f%% of the step; the threshold is %.0f%%)",
				link/1e9, estMs, 100*share(estMs), 100*TransferShareMin))
			fix := "--prefetch 4 or more: upload the next batch on the copy stream while this step computes"
			batchBytes := int64(2*4*t.MicroBatch*t.BlockSize) * int64(max(t.GradAccum, 1))
			if batchBytes > 0 && bytes > 4*batchBytes {
				ev = append(ev, fmt.Sprintf("that is %.0f× the token batches' %s (inputs and targets as int32)", float64(bytes)/float64(batchBytes), units.Bytes(batchBytes)))
				fix = "keep tensors on the device: only the token batch needs to cross each step (look for copies of weights, activations or whole tensors to the host inside the step); raise --log-interval if logged values are what crosses"
			}
			fs = append(fs, Finding{Kind: Transfer, Title: "host-device transfers", Cost: transferShare, Evidence: ev, Fix: fix})
		}
	}

	// fp32 on tensor cores.
	computeShare := share(t.PhaseMs.Compute())
	if gpu && t.TensorCores && (t.Precision == "fp32" || t.Precision == "") {
		cs := computeShare
		if t.PhaseMs.Compute() == 0 {
			cs = 1 - dataShare - transferShare
		}
		name := t.DeviceName
		if name == "" {
			name = t.Device
		}
		ev := []string{fmt.Sprintf("matrix products run in fp32 on %s, which has tensor cores", name)}
		if cs > 0 {
			ev = append(ev, fmt.Sprintf("compute is %.0f%% of the step; bf16 products run at 2× TF32's rate and 8× or more fp32's", 100*cs))
		}
		if t.MFU > 0 {
			ev = append(ev, fmt.Sprintf("MFU %.1f%% of %s", 100*t.MFU, fmtFLOPs(t.PeakFLOPs)))
		}
		fs = append(fs, Finding{Kind: Precision, Title: "fp32 on tensor cores", Cost: BF16Gain * cs, Evidence: ev,
			Fix: "--precision bf16 (bf16 activations and operands, f32 accumulation and master weights)"})
	}

	// Host syncs.
	var syncShare float64
	allowed := max(MaxSyncsPerStep, t.TrainerSyncsPerStep)
	if gpu && t.HostSyncsPerStep > allowed {
		syncShare = share(t.HostSyncsPerStep * SyncCostMs)
		fs = append(fs, Finding{Kind: Sync, Title: "host sync points", Cost: syncShare,
			Evidence: []string{fmt.Sprintf("%.1f host reads of device values per step (the trainer's own loop needs %.0f); each waits for the device's queue to drain, about %.0f µs of idle device each: ~%.1f ms of the %.1f ms step (%.0f%%)",
				t.HostSyncsPerStep, allowed, SyncCostMs*1e3, t.HostSyncsPerStep*SyncCostMs, step, 100*syncShare)},
			Fix: "read device values once per log line, not every step or micro-step: a larger --log-interval, and no .Item() inside the step"})
	}

	// Communication.
	var commShare float64
	if t.WorldSize > 1 {
		exposed := t.PhaseMs.Comm
		if t.CommMsPerStep > 0 {
			exposed = max(t.CommMsPerStep-t.CommOverlappedMs, 0)
		}
		commShare = share(exposed)
		if commShare >= ExposedCommShareMin {
			ev := []string{fmt.Sprintf("%.1f ms of the %.1f ms step waits for communication not overlapped with backward (%.0f%%; the threshold is %.0f%%)",
				exposed, step, 100*commShare, 100*ExposedCommShareMin)}
			if t.CommMsPerStep > 0 {
				ev = append(ev, fmt.Sprintf("of %.1f ms of all-reduce per step, %.1f ms (%.0f%%) ran during backward",
					t.CommMsPerStep, t.CommOverlappedMs, 100*t.CommOverlappedMs/t.CommMsPerStep))
			}
			accum := max(t.GradAccum, 1)
			fs = append(fs, Finding{Kind: Comm, Title: "communication", Cost: commShare, Evidence: ev,
				Fix: fmt.Sprintf("--grad-accum %d (now %d): one all-reduce per optimizer step over more tokens; and a smaller --bucket-mb, so that the first buckets' all-reduce starts earlier in backward and overlaps it", 2*accum, accum)})
		}
	}

	// Checkpoints and logging.
	if s := share(t.PhaseMs.CkptLog); s >= CkptLogShareMin {
		fs = append(fs, Finding{Kind: CkptLog, Title: "checkpoints and logging", Cost: s,
			Evidence: []string{fmt.Sprintf("checkpoint snapshots and logging take %.1f ms of the %.1f ms step (%.0f%%)", t.PhaseMs.CkptLog, step, 100*s)},
			Fix:      "a larger --ckpt-interval and --log-interval"})
	}

	// A shared CPU: the cores the run left idle were busy with other
	// processes, so its idle time says nothing about its batch.
	var sharedShare float64
	others := t.HostBusyPct - t.UtilMeanPct
	if !gpu && t.UtilMeanPct > 0 && others > 0 && (t.HostBusyPct >= SharedHostBusyPct || others >= SharedOthersPct) {
		sharedShare = (t.HostBusyPct - t.UtilMeanPct) / 100
		if sharedShare >= UnexplainedIdleMin {
			fs = append(fs, Finding{Kind: Shared, Title: "other processes on the CPU", Cost: sharedShare,
				Evidence: []string{fmt.Sprintf("the machine's cores were %.0f%% busy on average, this run's use %.0f%% (the thresholds are %.0f%% busy, or %.0f points taken by others)",
					t.HostBusyPct, t.UtilMeanPct, SharedHostBusyPct, SharedOthersPct)},
				Fix: "stop the other processes or use a quieter machine (or fewer --data-workers if they are this run's own); until then this run's timings understate what it does alone"})
		}
	}

	// Small batch: idle time the findings above do not explain, with
	// memory to spare.
	memUsed := t.MemPeakBytes
	if memUsed == 0 {
		memUsed = t.MemUsedBytes
	}
	if t.UtilMeanPct > 0 && t.UtilMeanPct < LowUtilPct && t.MemTotalBytes > 0 && memUsed > 0 {
		memShare := float64(memUsed) / float64(t.MemTotalBytes)
		idle := 1 - t.UtilMeanPct/100
		unexplained := idle - dataShare - transferShare - syncShare - commShare - sharedShare
		if memShare < MemSpareShare && unexplained >= UnexplainedIdleMin {
			what := "the device was busy"
			if !gpu {
				what = "the process used its cores"
				if t.Cores > 0 {
					what = fmt.Sprintf("the process used its %d cores", t.Cores)
				}
			}
			ev := []string{
				fmt.Sprintf("%s %.0f%% of the time on average (peak %.0f%%; the threshold is %.0f%%)", what, t.UtilMeanPct, t.UtilPeakPct, LowUtilPct),
				fmt.Sprintf("memory peaked at %s of %s (%.0f%%; the threshold is %.0f%%)", units.Bytes(memUsed), units.Bytes(t.MemTotalBytes), 100*memShare, 100*MemSpareShare),
			}
			if t.MicroBatch > 0 {
				ev = append(ev, fmt.Sprintf("micro-batch %d × block %d", t.MicroBatch, t.BlockSize))
			}
			fs = append(fs, Finding{Kind: Batch, Title: "small batch", Cost: unexplained, Evidence: ev,
				Fix: batchFix(t, memShare)})
		}
	}

	sort.SliceStable(fs, func(i, j int) bool { return fs[i].Cost > fs[j].Cost })
	d := Diagnosis{Run: runLine(t), Notes: notes(t)}
	if len(fs) > 0 && fs[0].Cost >= MainShareMin {
		d.Main, d.Secondary = fs[0], fs[1:]
	} else {
		d.Main, d.Secondary = computeBound(t), fs
	}
	return d
}

// batchFix proposes a micro-batch that fills at most 70% of the memory,
// growing by a power of two (at most 8×), with the accumulation cut to
// keep the tokens per step.
func batchFix(t Telemetry, memShare float64) string {
	if t.MicroBatch <= 0 {
		return "a larger --batch-size, or --batch-size auto to take the largest that fits"
	}
	grow := 1
	for grow < 8 && memShare*float64(2*grow) <= 0.7 {
		grow *= 2
	}
	if grow == 1 {
		grow = 2
	}
	fix := fmt.Sprintf("--batch-size %d (now %d)", grow*t.MicroBatch, t.MicroBatch)
	if t.GradAccum > 1 && t.GradAccum%grow == 0 {
		fix += fmt.Sprintf(" with --grad-accum %d (now %d), the same tokens per step", t.GradAccum/grow, t.GradAccum)
	}
	if t.AutoBatch {
		return fix + "; --batch-size auto chose the current one, so set it by hand"
	}
	return fix + ", or --batch-size auto to take the largest that fits"
}

// computeBound is the healthy verdict.
func computeBound(t Telemetry) Finding {
	f := Finding{Kind: Compute, Title: "compute (compute-bound: the healthy verdict)"}
	if c := t.PhaseMs.Compute(); c > 0 {
		f.Cost = c / t.StepMs
		f.Evidence = append(f.Evidence, fmt.Sprintf("forward+backward+optimizer take %.1f ms of the %.1f ms step (%.0f%%)", c, t.StepMs, 100*f.Cost))
	}
	if t.MFU > 0 {
		f.Evidence = append(f.Evidence, fmt.Sprintf("MFU %.1f%% of %s", 100*t.MFU, fmtFLOPs(t.PeakFLOPs)))
	}
	if t.UtilMeanPct > 0 {
		f.Evidence = append(f.Evidence, fmt.Sprintf("utilisation %.0f%% mean, %.0f%% peak", t.UtilMeanPct, t.UtilPeakPct))
	}
	f.Evidence = append(f.Evidence, fmt.Sprintf("data wait %.1f%% of the step", 100*t.PhaseMs.DataWait/t.StepMs))
	f.Fix = "nothing in the input pipeline or settings: the device is kept busy; more speed now comes from faster kernels (a higher MFU) or more devices"
	return f
}

func runLine(t Telemetry) string {
	var b strings.Builder
	b.WriteString(t.Device)
	if t.DeviceName != "" {
		fmt.Fprintf(&b, " (%s)", t.DeviceName)
	}
	if t.Precision != "" {
		fmt.Fprintf(&b, ", %s", t.Precision)
	}
	fmt.Fprintf(&b, ", world %d, micro-batch %d", max(t.WorldSize, 1), t.MicroBatch)
	if t.AutoBatch {
		b.WriteString(" (auto)")
	}
	fmt.Fprintf(&b, " × block %d × accum %d, %d steps at %.1f ms/step, %.0f tokens/s", t.BlockSize, max(t.GradAccum, 1), t.Steps, t.StepMs, t.TokensPerSec)
	if t.MFU > 0 {
		fmt.Fprintf(&b, ", MFU %.1f%%", 100*t.MFU)
	}
	return b.String()
}

func notes(t Telemetry) []string {
	p := t.PhaseMs
	var out []string
	if p.Sum() > 0 {
		line := fmt.Sprintf("phases, ms per step: data_wait %.2f | h2d %.2f | forward %.2f | backward %.2f | comm %.2f | optimizer %.2f | ckpt_log %.2f",
			p.DataWait, p.H2D, p.Forward, p.Backward, p.Comm, p.Optimizer, p.CkptLog)
		if other := t.StepMs - p.Sum(); other > 0 {
			line += fmt.Sprintf(" | other %.2f", other)
		}
		out = append(out, line)
	}
	if t.MemTotalBytes > 0 {
		out = append(out, fmt.Sprintf("memory: %s used, %s peak, %s total", units.Bytes(t.MemUsedBytes), units.Bytes(t.MemPeakBytes), units.Bytes(t.MemTotalBytes)))
	}
	if t.OverheadPct > 0 {
		out = append(out, fmt.Sprintf("telemetry overhead: %.2f%% of the step time", t.OverheadPct))
	}
	return out
}

func fmtFLOPs(f float64) string {
	switch {
	case f <= 0:
		return "an unknown peak"
	case f >= 1e12:
		return fmt.Sprintf("%.0f TFLOP/s", f/1e12)
	}
	return fmt.Sprintf("%.0f GFLOP/s", f/1e9)
}
