package lab

// The dataparallel experiment: the lecture's "same script run with
// DataParallel and then with DDP". One model, one data set and one global
// batch of B rows, trained three ways on the same N devices:
//
//   - one device: B rows on the first device;
//   - DataParallel (fleet train --replicas): one process, the parameters
//     broadcast from the first device each step, B/N rows on each device,
//     the gradients summed onto the first device and the optimizer there;
//   - DDP (fleet run --nproc-per-node N -- train): one process per device,
//     B/N rows each, the gradients all-reduced in buckets during backward.
//
// On real devices (the CPU's logical devices, CUDA, OpenCL) every mode is
// a real training run of the fleet binary, so each is timed the way the
// trainer times itself (summary.json's median step). A simulated GPU
// holds one device per process, so there the three steps are predicted
// from the simulator's counted kernels instead (dpSimulated).
//
// Bytes through the first device per step, with P parameters of 4 bytes
// (master weights and gradients are F32 in every precision):
//
//   - one device: none;
//   - DataParallel: (N-1)·4P out (the broadcast) and (N-1)·4P in (the
//     gradients), plus the other devices' rows of x and y out (2·4 bytes a
//     token) and their losses in (4 bytes each): what replicas.json counts;
//   - DDP: a ring all-reduce sends 2(N-1)/N·4P and receives as much
//     through every rank, the first included; each rank reads its own
//     rows, and the loss and stop flags it agrees on are a few bytes.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/monitor/report"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

// DataParallel is the dataparallel experiment's result, DPMode one of its
// modes and Segment a span of a mode's timeline: the report's types,
// which lab.json holds and `fleet report` plots.
type (
	DataParallel = report.DataParallel
	DPMode       = report.DPMode
	Segment      = report.Segment
)

// dpDevices picks the experiment's N devices from the lab's device: the
// CPU's logical devices cpu:0..cpu:N-1, CUDA's or OpenCL's numbered
// devices from 0, or N of the simulated GPU named.
func dpDevices(dev tensor.Device, n int) ([]tensor.Device, error) {
	if n <= 0 {
		n = 2
		if simOf(dev) != nil {
			n = 4
		}
	}
	if n < 2 {
		return nil, fmt.Errorf("--dp-devices %d: DataParallel needs two or more devices", n)
	}
	out := make([]tensor.Device, n)
	for i := range out {
		out[i] = dev
		if simOf(dev) == nil {
			out[i] = tensor.Device{Kind: dev.Kind, Index: i}
			if _, err := backend.Get(out[i]); err != nil {
				return nil, fmt.Errorf("--dp-devices %d: %v: %w", n, out[i], err)
			}
		}
	}
	return out, nil
}

// dataParallel runs the experiment on the devices the lab's device names.
func dataParallel(dev tensor.Device, o Options) (DataParallel, error) {
	devs, err := dpDevices(dev, o.DPDevices)
	if err != nil {
		return DataParallel{}, err
	}
	n := len(devs)
	c := o.Model
	if c.BatchSize%n != 0 {
		return DataParallel{}, fmt.Errorf("--batch-size %d: the global batch must split evenly over the %d devices", c.BatchSize, n)
	}
	d := DataParallel{Batch: c.BatchSize, BlockSize: c.BlockSize}
	for i, x := range devs {
		name := x.String()
		if simOf(dev) != nil {
			name = fmt.Sprintf("%s #%d", x, i) // N of one simulated model
		}
		d.Devices = append(d.Devices, name)
	}
	if simOf(dev) != nil {
		err = dpSimulated(dev, devs, o, &d)
	} else {
		err = dpMeasured(devs, o, &d)
	}
	if err != nil {
		return d, err
	}
	one := d.Modes[0]
	d.Modes[0].Efficiency = 1 // the reference
	for i := 1; i < len(d.Modes); i++ {
		m := &d.Modes[i]
		m.Efficiency = one.StepMs / (float64(n) * m.StepMs)
	}
	d.Conclusion = dpConclusion(d)
	dpPrint(o, d)
	return d, nil
}

// dpBytes is the bytes through the first device per step for each mode:
// one device, DataParallel, DDP (see the file's comment).
func dpBytes(params, n, batch, block int) (one, dp, ddp float64) {
	p4 := 4 * float64(params)
	others := float64(batch - batch/n) // the rows the other devices take
	dp = 2*float64(n-1)*p4 + others*float64(block)*8 + float64(n-1)*4
	ddp = 2 * 2 * float64(n-1) / float64(n) * p4
	return 0, dp, ddp
}

const dpBytesMethod = "P parameters of 4 bytes (F32 master weights and gradients): DataParallel moves (N-1)·4P out (the broadcast) and (N-1)·4P in " +
	"(the gradients) through the first device, plus the other devices' rows of x and y out and their losses in; DDP's ring all-reduce " +
	"sends and receives 2(N-1)/N·4P through every rank, the first included (its rows are its own; the loss and stop flags it agrees on, " +
	"a few bytes, are left out)"

// trainArgs renders the model flags of c (its shape, precision, seed and
// learning rate) and DDP's bucket size for a fleet train command line:
// those that differ from fleet train's defaults.
func trainArgs(c train.Config) []string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	def := flag.NewFlagSet("", flag.ContinueOnError)
	var names []string
	for _, n := range append(config.ModelFlags, "bucket-mb") {
		switch n {
		case "device", "batch-size", "grad-accum", "memory-limit", "cuda-graphs":
		default:
			names = append(names, n)
		}
	}
	d := train.Default()
	config.Flags.Register(fs, &c, names...)
	config.Flags.Register(def, &d, names...)
	var args []string
	for _, n := range names {
		if v := fs.Lookup(n).Value.String(); v != def.Lookup(n).Value.String() {
			args = append(args, "--"+n+"="+v)
		}
	}
	return args
}

// fleetRun runs the fleet binary with args; its error holds the end of
// the output.
func fleetRun(o Options, args ...string) error {
	if o.Fleet == "" {
		return errors.New("no fleet binary to run the training modes with (Options.Fleet)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Fleet, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = cleanEnv()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("fleet %s: %v\n%s", strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	return nil
}

// cleanEnv is this process's environment without a launcher's variables,
// which would make a run join another job.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GROUP_RANK",
			"FLEET_JOB_SECRET", "TORCHELASTIC_RESTART_COUNT":
			continue
		}
		if strings.HasPrefix(name, "SLURM_") || strings.HasPrefix(name, "PET_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// dpMeasured trains the model each way with the fleet binary and reads
// each run's summary.json (and DataParallel's replicas.json).
func dpMeasured(devs []tensor.Device, o Options, d *DataParallel) error {
	n := len(devs)
	c := o.Model
	steps := 30
	if o.Quick {
		steps = 10 // the summary's median skips the first 5
	}
	tmp, err := os.MkdirTemp("", "fleet-lab-dp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	common := append(trainArgs(c), fmt.Sprintf("--max-iters=%d", steps), fmt.Sprintf("--eval-interval=%d", steps),
		"--eval-iters=1", fmt.Sprintf("--log-interval=%d", steps), fmt.Sprintf("--ckpt-interval=%d", steps))
	if o.Data != "" {
		common = append(common, "--data="+o.Data)
	} else {
		common = append(common, "--corpus-bytes=1000000")
	}
	names := make([]string, n)
	for i, x := range devs {
		names[i] = x.String()
	}
	// DDP's processes each take a device of the kind by local rank: the
	// CPU backend in each process, a GPU's ordinal.
	kind := devs[0].Kind
	modes := []struct {
		name string
		args []string
	}{
		{"one device", append([]string{"train", "--device=" + names[0], fmt.Sprintf("--batch-size=%d", c.BatchSize)}, common...)},
		{"DataParallel", append([]string{"train", "--replicas=" + strings.Join(names, ","), fmt.Sprintf("--batch-size=%d", c.BatchSize)}, common...)},
		{"DDP", append([]string{"run", fmt.Sprintf("--nproc-per-node=%d", n), "--", "train", "--device=" + kind,
			fmt.Sprintf("--batch-size=%d", c.BatchSize/n)}, common...)},
	}
	d.Measured = true
	data := "--data"
	if o.Data == "" {
		data = "the default corpus's first MB"
	}
	d.Method = fmt.Sprintf("each mode a fleet training run of %d steps on %s; the step time is summary.json's median "+
		"(skipping 5 warm-up steps), tokens/s the job's", steps, data)
	if devs[0].OnCPU() {
		d.Method += fmt.Sprintf("; cpu:N are logical devices over this machine's %d cores, which one device already uses: here the modes share the cores, "+
			"so an efficiency near 1/%d is the expected, and the comparison shows each mode's overheads", runtime.NumCPU(), n)
	}
	one, dp, ddp := 0.0, 0.0, 0.0
	for i, m := range modes {
		dir := filepath.Join(tmp, fmt.Sprint(i))
		args := append(m.args, "--out="+dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := fleetRun(o, args...); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		var sum train.Summary
		if err := readJSON(filepath.Join(dir, train.SummaryFile), &sum); err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		if i == 0 {
			d.Params = sum.NumParams
			one, dp, ddp = dpBytes(sum.NumParams, n, c.BatchSize, c.BlockSize)
		}
		mode := DPMode{Name: m.name, Command: "fleet " + strings.Join(m.args, " "), StepMs: sum.MsPerStep,
			TokensPerSec: float64(c.BatchSize*c.BlockSize) / (sum.MsPerStep / 1e3)}
		switch i {
		case 0:
			mode.FirstDeviceBytes = one
			mode.Timeline = phaseTimeline(0, sum.PhaseMs, 0)
			mode.TimelineNote = "summary.json's mean phases per step, laid end to end"
		case 1:
			mode.FirstDeviceBytes = dp
			var rep train.ReplicaReport
			if err := readJSON(filepath.Join(dir, train.ReplicasFile), &rep); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
			mode.CountedBytes = rep.BytesPerStep
			for _, s := range rep.Timeline {
				mode.Timeline = append(mode.Timeline, Segment{Device: s.Stage, Kind: s.Kind, StartMs: s.StartMs, EndMs: s.EndMs})
			}
			mode.TimelineNote = "replicas.json: the last step's host wall times on each device (the update: the optimizer and the step's bookkeeping on the first)"
		case 2:
			mode.FirstDeviceBytes = ddp
			if len(sum.RankPhaseMs) != n {
				return fmt.Errorf("%s: summary.json has %d ranks' phases, want %d", m.name, len(sum.RankPhaseMs), n)
			}
			for r, ph := range sum.RankPhaseMs {
				mode.Timeline = append(mode.Timeline, phaseTimeline(r, ph, ph["comm_overlapped"])...)
			}
			mode.TimelineNote = "summary.json's mean phases per step of each rank, laid end to end; the all-reduce that overlapped backward is drawn under backward's end"
		}
		d.Modes = append(d.Modes, mode)
	}
	d.BytesMethod = dpBytesMethod
	return nil
}

// phaseTimeline lays a step's mean phases end to end on device dev:
// forward (with the copy of the batch), backward, the wait for the
// all-reduce and the update (the optimizer); the checkpoint and log
// bookkeeping between steps is left out, as the step time leaves it
// out. overlapped, the all-reduce time hidden under backward, is
// drawn as its own span ending where backward ends.
func phaseTimeline(dev int, ph map[string]float64, overlapped float64) []Segment {
	var out []Segment
	t := 0.0
	add := func(kind string, ms float64) {
		if ms > 0 {
			out = append(out, Segment{Device: dev, Kind: kind, StartMs: t, EndMs: t + ms})
			t += ms
		}
	}
	add("forward", ph["data_wait"]+ph["h2d"]+ph["forward"])
	add("backward", ph["backward"])
	if overlapped > 0 {
		out = append(out, Segment{Device: dev, Kind: "all-reduce", StartMs: max(0, t-overlapped), EndMs: t})
	}
	add("all-reduce", ph["comm"])
	add("update", ph["optimizer"])
	return out
}

// busy is each device's busy time in a timeline and the timeline's span.
func busy(tl []Segment, n int) (per []float64, span float64) {
	per = make([]float64, n)
	lo, hi := 0.0, 0.0
	for i, s := range tl {
		if s.Device >= 0 && s.Device < n && s.Kind != "all-reduce" {
			per[s.Device] += s.EndMs - s.StartMs
		}
		if i == 0 || s.StartMs < lo {
			lo = s.StartMs
		}
		hi = max(hi, s.EndMs)
	}
	return per, hi - lo
}

// dpConclusion weighs the lecture's claims against the figures.
func dpConclusion(d DataParallel) []string {
	one, dp, ddp := d.Modes[0], d.Modes[1], d.Modes[2]
	n := len(d.Devices)
	var out []string
	r := dp.StepMs / ddp.StepMs
	switch {
	case r > 1.05:
		out = append(out, fmt.Sprintf("DDP beats DataParallel here: its step is %.2fx faster (%.2f against %.2f ms)", r, ddp.StepMs, dp.StepMs))
	case r < 1/1.05:
		out = append(out, fmt.Sprintf("not supported here: DataParallel's step is %.2fx faster than DDP's (%.2f against %.2f ms)", 1/r, dp.StepMs, ddp.StepMs))
	default:
		out = append(out, fmt.Sprintf("no clear winner here: DataParallel %.2f ms, DDP %.2f ms a step (within 5%%)", dp.StepMs, ddp.StepMs))
	}
	if per, span := busy(dp.Timeline, n); span > 0 && n > 1 {
		extra := 0.0
		for _, s := range dp.Timeline {
			if s.Device == 0 && (s.Kind == "update" || s.Kind == "sum" || s.Kind == "broadcast") {
				extra += s.EndMs - s.StartMs
			}
		}
		idle := 0.0
		for _, b := range per[1:] {
			idle += 1 - b/span
		}
		idle /= float64(n - 1)
		out = append(out, fmt.Sprintf("DataParallel's first device spends %.2f ms of its %.2f ms step broadcasting, summing gradients and updating; "+
			"the other devices are idle %.0f%% of it", extra, span, 100*idle))
	}
	out = append(out, fmt.Sprintf("bytes through the first device per step: DataParallel %s, DDP %s (%.2fx)",
		units.Bytes(int64(dp.FirstDeviceBytes)), units.Bytes(int64(ddp.FirstDeviceBytes)), dp.FirstDeviceBytes/max(ddp.FirstDeviceBytes, 1)))
	comm, over := 0.0, 0.0
	for _, s := range ddp.Timeline {
		if s.Kind == "all-reduce" {
			comm += s.EndMs - s.StartMs
			for _, b := range ddp.Timeline {
				if b.Device == s.Device && (b.Kind == "backward" || b.Kind == "fwd+bwd") {
					over += max(0, min(s.EndMs, b.EndMs)-max(s.StartMs, b.StartMs))
				}
			}
		}
	}
	if comm > 0 {
		out = append(out, fmt.Sprintf("DDP overlapped %.0f%% of its all-reduce time with backward", 100*over/comm))
	}
	out = append(out, fmt.Sprintf("scaling efficiency against one device (%.2f ms): DataParallel %.0f%%, DDP %.0f%%", one.StepMs, 100*dp.Efficiency, 100*ddp.Efficiency))
	return out
}

func dpPrint(o Options, d DataParallel) {
	w := o.Log
	fmt.Fprintf(w, "   %d devices (%s), global batch %d × %d tokens, %.2fM parameters; %s\n", len(d.Devices), strings.Join(d.Devices, ","),
		d.Batch, d.BlockSize, float64(d.Params)/1e6, d.Method)
	fmt.Fprintf(w, "   %-13s %10s %12s %11s %22s\n", "mode", "step ms", "tokens/s", "efficiency", "bytes through first")
	for _, m := range d.Modes {
		counted := ""
		if m.CountedBytes > 0 {
			counted = fmt.Sprintf(" (counted %s)", units.Bytes(int64(m.CountedBytes)))
		}
		fmt.Fprintf(w, "   %-13s %10.2f %12.0f %10.0f%% %22s%s\n", m.Name, m.StepMs, m.TokensPerSec, 100*m.Efficiency, units.Bytes(int64(m.FirstDeviceBytes)), counted)
	}
	for _, m := range d.Modes {
		per, span := busy(m.Timeline, len(d.Devices))
		var b []string
		for i, x := range per {
			b = append(b, fmt.Sprintf("%s %.2f", d.Devices[i], x))
		}
		fmt.Fprintf(w, "   timeline %-13s busy ms of a %.2f ms step: %s\n", m.Name, span, strings.Join(b, ", "))
	}
	fmt.Fprintf(w, "   bytes: %s\n", d.BytesMethod)
	for _, s := range d.Conclusion {
		fmt.Fprintf(w, "   => %s\n", s)
	}
}
