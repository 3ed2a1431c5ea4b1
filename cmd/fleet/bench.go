package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/bench"
	"github.com/fleetml/fleet/internal/atomicfile"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

func benchCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "lab" {
		return labCmd(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "allreduce" {
		return benchAllReduceCmd(args[1:], stdout, stderr)
	}
	c := train.Default()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	config.Flags.Register(fs, &c, config.ModelFlags...)
	vocab := fs.Int("vocab-size", 65, "vocabulary size (random tokens)")
	steps := fs.Int("steps", 30, "timed training steps")
	warmup := fs.Int("warmup", 5, "untimed steps first")
	matmuls := fs.Bool("matmuls", true, "also time the model's matrix products against the device's peak")
	config.Flags.RegisterUsage(fs, &c, "bucket-mb", "with --sim-world: MiB of gradients per all-reduce bucket")
	config.Flags.RegisterUsage(fs, &c, "zero", "with --sim-world: 1 shards the optimizer's state over the ranks (ZeRO-1: buckets reduce-scattered, parameters all-gathered; Muon's matrices whole, cut by cost)")
	simWorld := fs.Int("sim-world", 1, "on a simulated GPU, train data-parallel over this many ranks (the others imagined alike) and report the all-reduce's time and how much of it backward does not hide, under a bus-bandwidth model (450 GB/s within a node of 8, 45 GB/s across nodes)")
	simRank := fs.Int("sim-rank", 0, "with --sim-world: the rank simulated (under --zero 1 the ranks' optimizer steps differ)")
	jsonOut := fs.String("json", "", "also write the results to this file as JSON (an object; a list for --precision all); on a simulated GPU (--device sim:h200) with what it counted per step")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *vocab <= 0 {
		return fmt.Errorf("--vocab-size must be positive")
	}
	place, err := c.Place()
	if err != nil {
		return err
	}
	dev := place.Device
	precisions := []string{c.Precision}
	if c.Precision == "all" {
		// Side by side: fp16 only where the products are native.
		precisions = []string{"fp32", "bf16"}
		if dev.Kind != "cpu" {
			precisions = append(precisions, "fp16")
		}
	}
	var results []bench.Result
	for i, p := range precisions {
		c.Precision = p
		r, err := bench.StepsWith(c, *vocab, *warmup, *steps, bench.Options{SimWorld: *simWorld, SimRank: *simRank})
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		results = append(results, r)
		if i == 0 {
			fmt.Fprintf(stdout, "device %s | %d layers, %d heads, %d embd, block %d, batch %d×%d | %.2fM params\n",
				r.Device, c.NLayer, c.NHead, c.NEmbd, c.BlockSize, r.Batch, r.Accum, float64(r.NumParams)/1e6)
		}
		label := ""
		if len(precisions) > 1 {
			label = fmt.Sprintf("%-5s ", p)
		}
		if r.SimReport != nil {
			printSim(stdout, label, r)
			continue
		}
		mfu := ""
		if r.MFU > 0 {
			mfu = fmt.Sprintf(" | MFU %.1f%% (llm.c's FLOPs; PaLM's %.1f%%)", 100*r.MFU, 100*r.MFUPaLM)
		}
		fmt.Fprintf(stdout, "%s%.2f ms/step | %.0f tokens/s | %.1f GFLOP/s (%.2f MFLOP/token, medians of %d steps)%s | peak memory %.1f MiB\n",
			label, r.MsPerStep, r.TokensPerSec, r.GFLOPs, r.FLOPsPerToken/1e6, *steps, mfu, float64(r.PeakBytes)/(1<<20))
	}
	if *jsonOut != "" {
		var v any = results
		if len(results) == 1 {
			v = results[0]
		}
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		if err := atomicfile.WriteFile(*jsonOut, append(b, '\n')); err != nil {
			return fmt.Errorf("--json: %w", err)
		}
	}
	for i := 1; i < len(results); i++ {
		fmt.Fprintf(stdout, "%s/fp32: %.2f× the tokens/s, %.2f× the peak memory\n", precisions[i],
			results[i].TokensPerSec/results[0].TokensPerSec, float64(results[i].PeakBytes)/float64(results[0].PeakBytes))
	}
	c.Precision = precisions[0]
	if !*matmuls {
		return nil
	}
	if results[0].SimReport != nil {
		fmt.Fprintln(stdout, "(matrix products are not timed on a simulated GPU: their cost is in the model above)")
		return nil
	}
	var peak float64
	if dev.Kind == "cpu" {
		b, _ := backend.Get(dev)
		threads := b.(*cpu.CPU).Threads()
		var width int
		peak, width = cpu.PeakGFLOPs(threads, 300*time.Millisecond)
		if threads == runtime.GOMAXPROCS(0) {
			cpu.RecordPeak(peak) // the figure runs use for MFU
		}
		fmt.Fprintf(stdout, "\nCPU FMA peak: %.1f GFLOP/s (%d threads × 12 independent FMA chains on %d-float vectors, measured)\n", peak, threads, width)
	}
	fmt.Fprintf(stdout, "%-12s %18s %10s %10s %8s\n", "matmul", "M×K×N", "ms", "GFLOP/s", "of peak")
	for _, s := range bench.MatMulShapes(c, *vocab) {
		sec, err := bench.TimeMatMul(dev, s, 20)
		if err != nil {
			return err
		}
		g := 2 * float64(s.M) * float64(s.K) * float64(s.N) / sec / 1e9
		pct := ""
		if peak > 0 {
			pct = fmt.Sprintf("%.0f%%", 100*g/peak)
		}
		fmt.Fprintf(stdout, "%-12s %18s %10.3f %10.1f %8s\n", s.Name, fmt.Sprintf("%d×%d×%d", s.M, s.K, s.N), sec*1e3, g, pct)
	}
	return nil
}

// printSim reports what a simulated GPU counted in a benchmark.
func printSim(w io.Writer, label string, r bench.Result) {
	s := r.SimReport
	fmt.Fprintf(w, "%ssimulated %s, per step: %.0f launches, %.0f host syncs (+%d for the final sync), %s host->device, %s device->host, %.0f driver allocations\n",
		label, s.GPU, s.LaunchesPerStep, s.HostSyncsPerStep, s.FinalSyncHostSyncs, units.Bytes(int64(s.H2DBytesPerStep)), units.Bytes(int64(s.D2HBytesPerStep)), s.DriverAllocsPerStep)
	fmt.Fprintf(w, "%s  %.1f GB touched, %.1f TFLOP | peak memory %s (reserved %s)\n",
		label, s.BytesTouchedPerStep/1e9, s.FLOPsPerStep/1e12, units.Bytes(s.PeakMemoryBytes), units.Bytes(s.PeakReservedBytes))
	if s.SimWorld > 1 {
		fmt.Fprintf(w, "%s  %d ranks (%s): collectives %.2f ms, of which %.2f ms not hidden by backward and added to the device time (estimates)\n",
			label, s.SimWorld, s.CommModel, s.CommMsPerStep, s.ExposedCommMsPerStep)
	}
	fmt.Fprintf(w, "%s  host %.2f ms to issue a step (this machine, measured) | device %.2f ms (estimate) | predicted %.2f ms/step, %.0f tokens/s, MFU %.1f%% in llm.c's FLOPs, %.1f%% in PaLM's (estimates)\n",
		label, s.HostMsPerStep, s.DeviceMsPerStep, s.PredictedMsPerStep, s.PredictedTokensPerSec, 100*s.PredictedMFU, 100*s.PredictedMFUPaLM)
}
