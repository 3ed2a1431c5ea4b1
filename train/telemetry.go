package train

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/fleetml/fleet/backend"
	fcpu "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/launch"
	"github.com/fleetml/fleet/monitor/diagnose"
	"github.com/fleetml/fleet/monitor/sysstat"
	"github.com/fleetml/fleet/tensor"
)

// Phases of a training step, as telemetry splits its time.
const (
	phData      = iota // waiting for the loader's batches
	phH2D              // copying batches to the device
	phForward          // the model's forward pass and loss
	phBackward         // backpropagation
	phComm             // gradient communication not hidden behind backward
	phOptimizer        // unscaling, clipping, AdamW, zeroing
	phCkptLog          // checkpoints, log lines and metric files
	nPhases
)

// PhaseNames name the phases in telemetry.json, metrics and logs.
var PhaseNames = [nPhases]string{"data_wait", "h2d", "forward", "backward", "comm", "optimizer", "ckpt_log"}

// telemetry times each step's phases. On a synchronous device (the CPU)
// it reads the host clock at every phase change; on an asynchronous one
// (a GPU) it records device marks in queue order and reads them once the
// step's work is done. Waiting for data is host time on both. A nil
// telemetry records nothing, so the trainer can run without it.
type telemetry struct {
	timer backend.Timer // nil: host clock

	cur   int
	last  time.Time
	marks []backend.Mark // GPU: a mark at each phase change of the step
	at    []int          // the phase each mark starts
	step  [nPhases]float64

	// pending are the GPU steps whose marks are not read yet: reading a
	// mark waits for the device, so they are read together at the next
	// log line (or when many are pending), not after each step.
	pending []pendingStep

	window [nPhases]float64 // ms per phase over the log window
	total  [nPhases]float64 // over the measured steps (after warm-up)
	// totalStepMs is the measured steps' time, all phases together.
	totalStepMs float64

	// Counters sampled at step boundaries: host reads of device values
	// and host<->device bytes.
	reads0, copied0 int64
	reads, copied   int64 // in the measured steps
	dev             tensor.Device
}

func newTelemetry(dev tensor.Device) *telemetry {
	return &telemetry{timer: tensor.DeviceTimer(dev), dev: dev}
}

// pendingStep is a GPU step's marks, read later (see telemetry.pending).
type pendingStep struct {
	marks    []backend.Mark
	at       []int
	step     [nPhases]float64 // host-time moves between phases
	measured bool
}

// maxPending bounds the steps whose marks wait to be read.
const maxPending = 256

// begin starts a step in phase p.
func (t *telemetry) begin(p int) {
	if t == nil {
		return
	}
	t.step = [nPhases]float64{}
	t.reads0, t.copied0 = tensor.HostReads(), tensor.MemStats(t.dev).Copied
	t.cur, t.last = p, time.Now()
	if t.timer != nil {
		t.marks, t.at = t.marks[:0], t.at[:0]
		t.mark(p)
	}
}

func (t *telemetry) mark(p int) {
	m, err := t.timer.Mark()
	if err != nil { // timing is best effort: fall back to the host clock
		t.timer = nil
		return
	}
	t.marks = append(t.marks, m)
	t.at = append(t.at, p)
}

// to moves the step into phase p.
// Communicating moves to the communication phase (ddp.Phases).
func (t *telemetry) Communicating() { t.to(phComm) }

func (t *telemetry) to(p int) {
	if t == nil || p == t.cur {
		return
	}
	if t.timer != nil {
		t.mark(p)
	} else {
		now := time.Now()
		t.step[t.cur] += float64(now.Sub(t.last).Nanoseconds()) / 1e6
		t.last = now
	}
	t.cur = p
}

// move reattributes host time d from phase from to phase to (the data
// wait inside a batch fetch). On a GPU the marks around the fetch saw the
// device idle for the same wait, so it moves there too.
func (t *telemetry) move(from, to int, d time.Duration) {
	if t == nil {
		return
	}
	ms := float64(d.Nanoseconds()) / 1e6
	t.step[from] -= ms
	t.step[to] += ms
}

// end closes the step; measured says whether it counts in the totals
// (warm-up steps do not).
func (t *telemetry) end(measured bool) {
	if t == nil {
		return
	}
	if t.timer != nil {
		t.mark(t.cur)
		if t.timer != nil {
			// Read later: the marks of a step the device may still run.
			ps := pendingStep{step: t.step, measured: measured}
			if n := len(t.pending); n < cap(t.pending) {
				ps.marks, ps.at = t.pending[:n+1][n].marks[:0], t.pending[:n+1][n].at[:0]
			}
			ps.marks, ps.at = append(ps.marks, t.marks...), append(ps.at, t.at...)
			t.pending = append(t.pending, ps)
			t.marks, t.at = t.marks[:0], t.at[:0]
			if len(t.pending) >= maxPending {
				t.flush()
			}
			t.counters(measured)
			return
		}
		// A mark failed: timing falls back to the host clock, and the
		// step's marks go back.
		t.release(t.marks)
		t.marks, t.at = t.marks[:0], t.at[:0]
	} else {
		t.to(-1)
	}
	t.add(t.step, measured)
	t.counters(measured)
}

// release returns marks to the device's timer.
func (t *telemetry) release(marks []backend.Mark) {
	if tm := tensor.DeviceTimer(t.dev); tm != nil {
		for _, m := range marks {
			tm.ReleaseMark(m)
		}
	}
}

// drop releases the pending steps' marks unread (a run that ends early).
func (t *telemetry) drop() {
	if t == nil {
		return
	}
	for i := range t.pending {
		t.release(t.pending[i].marks)
	}
	t.pending = t.pending[:0]
}

// flush reads the pending steps' marks (waiting for the device to reach
// the last) and adds their phase times.
func (t *telemetry) flush() {
	if t == nil {
		return
	}
	for i := range t.pending {
		ps := &t.pending[i]
		for j := 0; t.timer != nil && j+1 < len(ps.marks); j++ {
			ms, err := t.timer.Elapsed(ps.marks[j], ps.marks[j+1])
			if err != nil {
				t.timer = nil // timing is best effort
				break
			}
			ps.step[ps.at[j]] += ms
		}
		t.release(ps.marks)
		t.add(ps.step, ps.measured)
	}
	t.pending = t.pending[:0]
}

// add adds one step's ms per phase to the window and, if measured, the
// totals.
func (t *telemetry) add(step [nPhases]float64, measured bool) {
	for p, ms := range step {
		t.window[p] += ms
		if measured {
			t.total[p] += ms
			t.totalStepMs += ms
		}
	}
}

// counters adds the step's host reads and copied bytes, if measured.
func (t *telemetry) counters(measured bool) {
	if measured {
		t.reads += tensor.HostReads() - t.reads0
		t.copied += tensor.MemStats(t.dev).Copied - t.copied0
	}
}

// addHost adds host time outside the step proper (checkpointing and
// logging) to phase p.
func (t *telemetry) addHost(p int, d time.Duration, measured bool) {
	if t == nil {
		return
	}
	ms := float64(d.Nanoseconds()) / 1e6
	t.window[p] += ms
	if measured {
		t.total[p] += ms
		t.totalStepMs += ms
	}
}

// takeWindow returns the window's ms per phase and restarts it.
func (t *telemetry) takeWindow() [nPhases]float64 {
	if t == nil {
		return [nPhases]float64{}
	}
	t.flush()
	w := t.window
	t.window = [nPhases]float64{}
	return w
}

// peakFLOPs is the device's peak FLOP/s for products in dt, with where
// the figure comes from: a data-sheet table for GPUs, a measurement of
// the FMA peak on all cores for the CPU. 0 where unknown.
func peakFLOPs(dev tensor.Device, dt tensor.DType) (float64, string) {
	if onHost(dev) {
		// BF16 products count against the FMA peak too: where VDPBF16PS
		// is slow or missing they run as widened F32 products, and where it
		// is fast its rate is not measured here.
		return fcpu.BestPeakGFLOPs() * 1e9, "measured FMA peak"
	}
	type peaker interface {
		PeakTFLOPs(backend.DType) (float64, bool)
	}
	if p, ok := tensor.BackendOf(dev).(peaker); ok {
		if tf, ok := p.PeakTFLOPs(dt); ok {
			return tf * 1e12, "data sheet"
		}
	}
	return 0, "unknown device"
}

// fmtPhases prints ms per step of each phase with its share.
func fmtPhases(ms [nPhases]float64, steps int) string {
	var sum float64
	for _, v := range ms {
		sum += v
	}
	if sum <= 0 || steps <= 0 {
		return ""
	}
	s := ""
	for p, v := range ms {
		if v/sum < 0.005 {
			continue
		}
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("%s %.1f%%", PhaseNames[p], 100*v/sum)
	}
	return s
}

// peakMem is the run's peak memory on its device so far.
func (r *run) peakMem() int64 {
	return r.micros().peakMem(r.dev)
}

// onHost reports whether dev computes in the host's memory on the host's
// cores (the CPU backend): then the operating system measures its
// utilisation and memory, its peak is measured rather than looked up,
// and it has no native fp16 products.
func onHost(dev tensor.Device) bool {
	_, ok := tensor.BackendOf(dev).(backend.HostMemory)
	return ok
}

// startSampler starts sampling the device's utilisation and memory in the
// background, once a second: NVML for a GPU, /proc for the CPU (where
// utilisation is the process's CPU time over the cores it may use). A
// platform without either runs without.
func (r *run) startSampler() {
	var s *sysstat.Sampler
	var err error
	switch {
	case onHost(r.dev):
		s, err = sysstat.NewCPUSampler(0, 0)
	case r.dev.IsCUDA() || r.simulated: // NVML's numbering is CUDA's
		s, err = sysstat.NewGPUSampler(launch.PhysicalGPU(r.dev.Index, os.Getenv(launch.EnvVisibleDevices)), 0)
	default:
		fmt.Fprintf(r.log, "telemetry: no utilisation sampling: %v has no utilisation counter fleet reads (memory comes from fleet's own allocator)\n", r.dev)
		return
	}
	if err != nil {
		fmt.Fprintf(r.log, "telemetry: no utilisation sampling: %v\n", err)
		return
	}
	s.Start()
	r.out.sampler = s
}

// utilPct converts a sample to the device's utilisation in percent.
func (r *run) utilPct(util, procCPU float64) float64 {
	if onHost(r.dev) {
		return procCPU / float64(runtime.GOMAXPROCS(0))
	}
	return util
}

// utilisation is the device's utilisation in percent at the latest
// background sample; ok is false without one.
func (r *run) utilisation() (float64, bool) {
	if r.out.sampler == nil {
		return 0, false
	}
	st := r.out.sampler.Stats()
	if st.Samples == 0 {
		return 0, false
	}
	return r.utilPct(st.Latest.Util, st.Latest.ProcCPU), true
}

// stopSampler stops the sampler and puts its mean and peak in sum.
func (r *run) stopSampler(sum *Summary) {
	if r.out.sampler == nil {
		return
	}
	st := r.out.sampler.Stop()
	r.out.sampler = nil
	if sum != nil && st.Samples > 0 {
		sum.UtilMeanPct = r.utilPct(st.MeanUtil, st.MeanProcCPU)
		sum.UtilPeakPct = r.utilPct(st.PeakUtil, st.PeakProcCPU)
		if onHost(r.dev) {
			sum.HostBusyPct = st.MeanUtil
		}
	}
}

// summarizeTelemetry puts the run's telemetry totals in sum.
func (r *run) summarizeTelemetry(sum *Summary) {
	r.stopSampler(sum)
	if sum.PeakFLOPs > 0 {
		sum.MFU = sum.TokensPerSec * sum.FLOPsPerToken / sum.PeakFLOPs
	}
	st := tensor.MemStats(r.dev)
	sum.PeakMemBytes, sum.MemTotalBytes = r.peakMem(), st.Total
	if r.tel == nil || r.perf.measured == 0 {
		return
	}
	r.tel.flush()
	n := float64(r.perf.measured)
	sum.PhaseMs = make(map[string]float64, nPhases)
	for p, ms := range r.tel.total {
		sum.PhaseMs[PhaseNames[p]] = ms / n
	}
	r.perf.commOverlappedMs = r.group().OverlapMs()
	sum.HostReadsPerStep = float64(r.tel.reads) / n
	sum.CopiedBytesPerStep = float64(r.tel.copied) / n
	r.perf.meanStepMs = r.tel.totalStepMs / n
	sum.TelemetryOverheadPct = r.overheadPct(r.perf.meanStepMs)
}

// overheadPct measures what the step telemetry costs: it times 1000 steps'
// worth of phase changes on the device with no work in between, and
// returns that per step as a percent of a step of stepMs.
func (r *run) overheadPct(stepMs float64) float64 {
	if r.tel == nil || stepMs <= 0 {
		return 0
	}
	t := newTelemetry(r.dev)
	const n = 1000
	t0 := time.Now()
	for range n {
		t.begin(phH2D)
		for p := phH2D; p < nPhases; p++ {
			t.to(p)
		}
		t.end(false)
	}
	per := float64(time.Since(t0).Nanoseconds()) / 1e6 / n
	return 100 * per / stepMs
}

// telemetry is the run's diagnose.Telemetry, from its summary.
func (r *run) telemetry(sum Summary) diagnose.Telemetry {
	cfg := r.cfg
	t := diagnose.Telemetry{
		Version:    1,
		Device:     sum.Device,
		DeviceKind: r.dev.Kind,
		Precision:  cfg.Precision,
		WorldSize:  max(cfg.WorldSize, 1),
		MicroBatch: cfg.BatchSize, BlockSize: cfg.BlockSize, GradAccum: cfg.GradAccum, AutoBatch: cfg.BatchAuto,
		DataWorkers: cfg.DataWorkers, Prefetch: cfg.Prefetch,
		Steps: r.perf.measured, StepMs: r.perf.meanStepMs, TokensPerSec: sum.TokensPerSec,
		MFU: sum.MFU, PeakFLOPs: sum.PeakFLOPs,
		PhaseMs:          diagnose.PhasesFromMap(sum.PhaseMs),
		H2DBytesPerStep:  int64(sum.CopiedBytesPerStep),
		HostSyncsPerStep: sum.HostReadsPerStep,
		// The loss of every micro-step (a pipeline's: every micro-batch's)
		// and the gradient norm.
		TrainerSyncsPerStep: float64(cfg.GradAccum*max(cfg.MicroBatches, 1) + 1),
		MemPeakBytes:        sum.PeakMemBytes,
		MemTotalBytes:       sum.MemTotalBytes,
		MemUsedBytes:        tensor.MemStats(r.dev).Allocated,
		OptimizerStateBytes: r.opt.StateBytes(),
		ZeroStage:           cfg.Zero,
		CommMsPerStep:       sum.PhaseMs[PhaseNames[phComm]] + r.perf.commOverlappedMs,
		CommOverlappedMs:    r.perf.commOverlappedMs,
		OverheadPct:         sum.TelemetryOverheadPct,
		UtilMeanPct:         sum.UtilMeanPct,
		UtilPeakPct:         sum.UtilPeakPct,
		HostBusyPct:         sum.HostBusyPct,
	}
	type named interface{ Name() string }
	if onHost(r.dev) {
		t.DeviceName, t.Cores = fcpu.Model(), runtime.GOMAXPROCS(0)
	} else {
		t.TensorCores = r.dev.IsCUDA() // every GPU fleet's CUDA backend runs on (sm_80+) has them; its OpenCL kernels use none
		if n, ok := tensor.BackendOf(r.dev).(named); ok {
			t.DeviceName = n.Name()
		}
	}
	return t
}

// diagnose writes telemetry.json and prints the diagnosis.
func (r *run) diagnose(sum Summary) error {
	if r.tel == nil || r.perf.measured == 0 || r.cfg.Rank != 0 {
		return nil
	}
	t := r.telemetry(sum)
	if err := diagnose.WriteFile(filepath.Join(r.cfg.Out, diagnose.TelemetryFile), t); err != nil {
		return err
	}
	fmt.Fprintln(r.log)
	return diagnose.Format(r.log, diagnose.Diagnose(t))
}
