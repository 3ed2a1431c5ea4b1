// Package lab reproduces the examples of a GPU-performance lecture with
// figures measured on this machine: memory bandwidth of an elementwise add
// from cache-resident to DRAM-sized vectors, matrix-product FLOP/s against
// the device's peak, pageable versus pinned host-to-device copies, a
// batch-size sweep of training steps, fp32 versus bf16 steps, gradient
// accumulation against one large batch, the speed-up of a GPU over the
// CPU, and one device against DataParallel and DDP on the same devices
// (dataparallel.go). Everything goes through the public tensor, backend
// and train APIs, or runs the fleet binary's own training, so the figures
// are those the trainer itself would see. `fleet bench lab` runs it
// (--only NAME,... some of it) and writes the Result as lab.json.
package lab

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/monitor/report"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

// Options says what to measure and how long to spend on it.
type Options struct {
	// Device is auto, or a device backend.ParseDevice takes (backend.Choices:
	// cpu, cuda:N, opencl:N, sim:NAME).
	Device string
	// Quick shrinks every experiment (about 30 s on two CPU cores).
	Quick bool
	// Model is the configuration of the training experiments (its Device
	// and Precision are set by the lab); Vocab is the vocabulary of the
	// random tokens they train on.
	Model train.Config
	Vocab int
	// MaxBytes caps the vector-add working set (0: 1 GiB, 64 MiB with
	// Quick, and never more than an eighth of the device's memory).
	MaxBytes int64
	// MaxBatch caps the batch-size sweep (0: 64 on the CPU, 1024 on a
	// GPU, 4 with Quick); MaxStepMs stops it once a step takes longer (0:
	// 2000 ms).
	MaxBatch  int
	MaxStepMs float64
	// AccumBatch and AccumSteps are the B and k of the gradient
	// accumulation experiment (0: 4 and 4).
	AccumBatch, AccumSteps int
	// Only, when not empty, names the experiments to run (Experiments);
	// the others are left out of the Result.
	Only []string
	// Fleet is the fleet binary, which the dataparallel experiment runs
	// its training modes with (on real devices) and DDP's processes are.
	Fleet string
	// DPDevices is the dataparallel experiment's device count (0: 2, or
	// 4 of a simulated GPU).
	DPDevices int
	// RecapSeconds is the recap experiment's wall-clock budget for each
	// model (0: 60 s, 4 s with Quick).
	RecapSeconds float64
	// Data is the training data of the dataparallel and recap
	// experiments, as fleet train's --data takes it ("": the default
	// corpus).
	Data string
	// Log receives each experiment's table as it finishes (nil: none).
	Log io.Writer
}

// Experiments names the lab's experiments, in the order they run: what
// Options.Only (--only) takes.
var Experiments = []string{"vector-add", "matmul", "host-to-device", "batch-sweep", "precision", "grad-accum", "gpu-speedup", "dataparallel", "recap"}

// CheckOnly checks a list of experiment names against Experiments.
func CheckOnly(names []string) error {
	for _, n := range names {
		if !slices.Contains(Experiments, n) {
			return fmt.Errorf("no experiment %q (want one of %s)", n, strings.Join(Experiments, ", "))
		}
	}
	return nil
}

// Result is everything the lab measured; it is what lab.json holds. The
// embedded report.Lab (device, device_name, the batch-size sweep,
// batch_sweep, and the dataparallel experiment) is the part `fleet
// report` plots; the other experiments are fields of their own.
type Result struct {
	report.Lab
	Threads int    `json:"threads"` // CPU worker goroutines
	Quick   bool   `json:"quick"`
	Time    string `json:"time"` // when the run started, RFC 3339
	Model   Model  `json:"model"`

	VecAdd VecAdd `json:"vector_add"`
	MatMul MatMul `json:"matmul"`
	Copy   Copy   `json:"host_to_device"`
	// SweepPeak is the fp32 peak, TFLOP/s, the sweep's MFU is relative to.
	SweepPeak float64     `json:"batch_sweep_peak_tflops,omitempty"`
	Precision []StepPoint `json:"precision"`
	Accum     Accum       `json:"grad_accum"`
	Speedup   Speedup     `json:"gpu_speedup"`
	// Ran names the experiments this run ran (Experiments; all without
	// --only).
	Ran        []string `json:"ran"`
	ElapsedSec float64  `json:"elapsed_s"`
	// LoadAvg is the machine's one-minute load average at the start and
	// the end (-1: unknown): above the CPU count, other work shared the
	// cores and slowed the CPU figures.
	LoadAvg [2]float64 `json:"load_avg"`
}

// Model is the shape of the model the training experiments step.
type Model struct {
	NLayer    int `json:"n_layer"`
	NHead     int `json:"n_head"`
	NEmbd     int `json:"n_embd"`
	BlockSize int `json:"block_size"`
	Vocab     int `json:"vocab_size"`
	Params    int `json:"params"`
}

// NotApplicable is set, with the reason, on an experiment the device has
// no use for (host-to-device copies on the CPU).
type NotApplicable struct {
	Applicable bool   `json:"applicable"`
	Note       string `json:"note,omitempty"`
}

// Run runs every experiment on the device opts names, writing each table
// to opts.Log as it finishes.
func Run(opts Options) (*Result, error) {
	start := time.Now()
	if opts.Device == "" {
		opts.Device = "auto"
	}
	if opts.Vocab <= 0 {
		opts.Vocab = 65
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := CheckOnly(opts.Only); err != nil {
		return nil, err
	}
	dev, err := backend.Resolve(opts.Device)
	if err != nil {
		return nil, setting.Errorf("{Device} %s: %w", opts.Device, err)
	}
	be, err := backend.Get(dev)
	if err != nil {
		return nil, err
	}
	opts.Model.Device = dev.String()
	opts.Model.Precision = config.FP32.String()
	opts.Model.GradAccum = 1
	opts.Model.TokensPerStep = 0
	opts.Model.Out = "-"
	if err := opts.Model.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Lab: report.Lab{Device: dev.String(), DeviceName: deviceName(be)}, Threads: threads(be), Quick: opts.Quick,
		Time: start.UTC().Format(time.RFC3339), LoadAvg: [2]float64{loadAvg(), -1}}
	c := opts.Model
	res.Model = Model{NLayer: c.NLayer, NHead: c.NHead, NEmbd: c.NEmbd, BlockSize: c.BlockSize, Vocab: opts.Vocab}
	w := opts.Log
	fmt.Fprintf(w, "fleet lab on %s (%s), %d CPU threads%s\n", res.Device, res.DeviceName, res.Threads, map[bool]string{true: ", quick"}[opts.Quick])
	if l := res.LoadAvg[0]; l > float64(runtime.NumCPU()) {
		fmt.Fprintf(w, "(load average %.1f on %d CPUs: other work shares the cores, so CPU figures will be low and noisy)\n", l, runtime.NumCPU())
	}

	steps := []struct {
		name string
		fn   func() error
	}{
		{"vector add", func() (err error) { res.VecAdd, err = vectorAdd(dev, be, opts); return }},
		{"matmul", func() (err error) { res.MatMul, err = matMul(dev, be, opts); return }},
		{"host to device", func() (err error) { res.Copy, err = hostToDevice(dev, be, opts); return }},
		{"batch sweep", func() (err error) {
			res.Sweep, res.SweepPeak, err = batchSweep(dev, be, opts, &res.Model, res.MatMul)
			return
		}},
		{"precision", func() (err error) { res.Precision, err = precisions(dev, opts); return }},
		{"grad accum", func() (err error) { res.Accum, err = gradAccum(dev, opts); return }},
		{"gpu speed-up", func() (err error) { res.Speedup, err = speedup(dev, opts); return }},
		{"DataParallel against DDP", func() error {
			d, err := dataParallel(dev, opts)
			res.DataParallel = &d
			if res.Model.Params == 0 {
				res.Model.Params = d.Params
			}
			return err
		}},
		{"recap: n-gram, LSTM and Transformer", func() error {
			r, err := recap(dev, opts)
			res.Recap = &r
			return err
		}},
	}
	for i, s := range steps {
		if len(opts.Only) > 0 && !slices.Contains(opts.Only, Experiments[i]) {
			continue
		}
		res.Ran = append(res.Ran, Experiments[i])
		fmt.Fprintf(w, "\n%d. %s\n", i+1, s.name)
		t0 := time.Now()
		if err := s.fn(); err != nil {
			return res, fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(w, "   (%.1f s)\n", time.Since(t0).Seconds())
	}
	res.ElapsedSec = time.Since(start).Seconds()
	res.LoadAvg[1] = loadAvg()
	return res, nil
}

// deviceName is the GPU's name where the backend has one, else the CPU's.
func deviceName(be backend.Backend) string {
	if n, ok := be.(interface{ Name() string }); ok {
		return n.Name()
	}
	return cpu.Model()
}

// threads is the CPU backend's worker count, or GOMAXPROCS on a GPU.
func threads(be backend.Backend) int {
	if t, ok := be.(interface{ Threads() int }); ok {
		return t.Threads()
	}
	return runtime.GOMAXPROCS(0)
}

// isOOM reports whether err is a device out of memory.
func isOOM(err error) bool { return errors.Is(err, backend.ErrOutOfMemory) }

// benchThreads is how many threads a benchmark on the named device can
// keep busy: the CPU backend's workers, or one (the thread that issues
// the GPU's work).
func benchThreads(d tensor.Device) int {
	if !d.OnCPU() {
		return 1
	}
	be, err := backend.Get(d)
	if err != nil {
		return runtime.GOMAXPROCS(0)
	}
	return threads(be)
}
