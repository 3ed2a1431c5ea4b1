package lab

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/train/config"

	"github.com/fleetml/fleet/backend"
	cpubackend "github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/tensor"
	"golang.org/x/sys/cpu"
)

// VecAdd is experiment 1: the bandwidth of c = a + b through the backend's
// elementwise add, for working sets from cache-sized to far beyond the
// last-level cache.
type VecAdd struct {
	L2Bytes  int64            `json:"l2_bytes,omitempty"`  // the CPU's level-2 cache per core
	LLCBytes int64            `json:"llc_bytes,omitempty"` // the CPU's last-level cache
	Points   []BandwidthPoint `json:"points"`
	Summary  string           `json:"summary"`
}

// BandwidthPoint is one vector size. Bytes is the working set, a, b and c
// together (12 bytes per element), which is also the traffic of one add:
// two reads and one write.
type BandwidthPoint struct {
	Bytes    int64   `json:"bytes"`
	Elements int     `json:"elements"`
	Us       float64 `json:"us"` // microseconds per add, the best of several trials
	GBs      float64 `json:"gb_per_s"`
}

// MatMul is experiment 2: square matrix products C = A @ B.
type MatMul struct {
	// PeakNote says where the peaks come from (measured FMA loop, data sheet).
	PeakNote string        `json:"peak_note"`
	Points   []MatMulPoint `json:"points"`
	Summary  string        `json:"summary"`
}

// MatMulPoint is one size and operand dtype; products accumulate in f32.
type MatMulPoint struct {
	N          int              `json:"n"`
	DType      config.Precision `json:"dtype"` // fp32 or bf16
	Ms         float64          `json:"ms"`    // per product, the best of several trials
	TFLOPs     float64          `json:"tflops"`
	PeakTFLOPs float64          `json:"peak_tflops,omitempty"` // 0: unknown
	OfPeak     float64          `json:"of_peak,omitempty"`     // TFLOPs / PeakTFLOPs
}

// Copy is experiment 3: host-to-device copies from ordinary (pageable)
// and page-locked (pinned) host memory.
type Copy struct {
	NotApplicable
	Points  []CopyPoint `json:"points,omitempty"`
	Summary string      `json:"summary,omitempty"`
}

// CopyPoint is one copy size.
type CopyPoint struct {
	Bytes       int64   `json:"bytes"`
	PageableGBs float64 `json:"pageable_gb_per_s"`
	PinnedGBs   float64 `json:"pinned_gb_per_s"`
}

// timePerCall returns the seconds per call of the fastest of trials:
// run(reps) issues reps calls and waits for the device, and reps is
// chosen so that one trial lasts about target. The fastest, not the
// median, since other work on the machine only ever slows a trial down:
// it is the kernel's speed, not the machine's load, that is measured.
func timePerCall(run func(reps int), target time.Duration, trials int) float64 {
	run(1) // warm up: first-use compilation, page faults
	reps := 1
	for {
		t0 := time.Now()
		run(reps)
		el := time.Since(t0)
		if el >= target/4 || reps >= 1<<20 {
			reps = max(1, int(float64(reps)*float64(target)/float64(max(el, time.Microsecond))))
			break
		}
		reps *= 4
	}
	per := make([]float64, trials)
	for i := range per {
		t0 := time.Now()
		run(reps)
		per[i] = time.Since(t0).Seconds() / float64(reps)
	}
	sort.Float64s(per)
	return per[0]
}

// wait blocks until the work issued on be so far is done, by reading one
// element of s back.
func wait(be backend.Backend, s backend.Storage) {
	var buf [8]byte
	be.Download(buf[:s.DType().Size()], backend.Ref{S: s})
}

// randomF32 uploads n random floats in [-1, 1) to new storage in dt.
func randomF32(be backend.Backend, dt backend.DType, n int, seed uint64) backend.Storage {
	r := rand.New(rand.NewPCG(seed, 1))
	s := be.Alloc(dt, n)
	switch dt {
	case backend.BF16:
		h := make([]uint16, n)
		for i := range h {
			h[i] = backend.F32ToBF16(2*r.Float32() - 1)
		}
		be.Upload(backend.Ref{S: s}, backend.AsBytes(h))
	default:
		f := make([]float32, n)
		for i := range f {
			f[i] = 2*r.Float32() - 1
		}
		be.Upload(backend.Ref{S: s}, backend.AsBytes(f))
	}
	return s
}

func vectorAdd(dev tensor.Device, be backend.Backend, o Options) (VecAdd, error) {
	var v VecAdd
	if dev.OnCPU() {
		v.L2Bytes, v.LLCBytes = cacheSizes()
	}
	limit := o.MaxBytes
	if limit <= 0 {
		limit = 1 << 30
		if o.Quick {
			limit = 64 << 20
		}
	}
	if total := be.MemStats().Total; total > 0 {
		limit = min(limit, total/8)
	}
	target, trials := 300*time.Millisecond, 7
	if o.Quick {
		target, trials = 40*time.Millisecond, 3
	}
	w := o.Log
	fmt.Fprintf(w, "   %12s %12s %10s %10s\n", "working set", "elements", "µs/add", "GB/s")
	for size := int64(64 << 10); size <= limit; size *= 4 {
		n := int(size / 12)
		var p BandwidthPoint
		err := tensor.Catch(func() {
			a := randomF32(be, backend.F32, n, 1)
			b := randomF32(be, backend.F32, n, 2)
			c := be.Alloc(backend.F32, n)
			defer func() { be.Free(a); be.Free(b); be.Free(c) }()
			ra, rb, rc := backend.Ref{S: a}, backend.Ref{S: b}, backend.Ref{S: c}
			sec := timePerCall(func(reps int) {
				for i := 0; i < reps; i++ {
					be.Binary(backend.Add, rc, ra, rb, n)
				}
				wait(be, c)
			}, target, trials)
			p = BandwidthPoint{Bytes: int64(n) * 12, Elements: n, Us: sec * 1e6, GBs: float64(n) * 12 / sec / 1e9}
		})
		if isOOM(err) {
			fmt.Fprintf(w, "   %12s out of memory: stopped\n", units.Bytes(size))
			break
		}
		if err != nil {
			return v, err
		}
		v.Points = append(v.Points, p)
		fmt.Fprintf(w, "   %12s %12d %10.2f %10.1f\n", units.Bytes(p.Bytes), p.Elements, p.Us, p.GBs)
	}
	if len(v.Points) == 0 {
		return v, fmt.Errorf("no vector size fits under %s", units.Bytes(limit))
	}
	v.Summary = vecAddSummary(v)
	fmt.Fprintf(w, "   => %s\n", v.Summary)
	return v, nil
}

// vecAddSummary compares the best bandwidth with that of the largest
// working set.
func vecAddSummary(v VecAdd) string {
	best := v.Points[0]
	for _, p := range v.Points {
		if p.GBs > best.GBs {
			best = p
		}
	}
	last := v.Points[len(v.Points)-1]
	caches := ""
	if v.LLCBytes > 0 {
		caches = fmt.Sprintf(" (L2 %s per core, last-level cache %s)", units.Bytes(v.L2Bytes), units.Bytes(v.LLCBytes))
	}
	beyond := "the largest working set"
	if v.LLCBytes > 0 && last.Bytes > v.LLCBytes {
		beyond = "beyond the last-level cache, from DRAM"
	}
	return fmt.Sprintf("an add moves %.1f GB/s at best (%s working set) and %.1f GB/s at %s, %s: %.1fx%s; "+
		"it does 1 FLOP per 12 bytes, so its speed is that of the memory level the data lives in",
		best.GBs, units.Bytes(best.Bytes), last.GBs, units.Bytes(last.Bytes), beyond, best.GBs/last.GBs, caches)
}

func matMul(dev tensor.Device, be backend.Backend, o Options) (MatMul, error) {
	var m MatMul
	w := o.Log
	sizes := []int{256, 512, 1024, 2048, 4096}
	peak := map[config.Precision]float64{}
	// On the CPU the FMA peak is measured between the products and the
	// best figure kept, so that a burst of other work on the machine
	// does not set the bar.
	var cpuGFLOPs float64
	var width int
	remeasure := func() {}
	if dev.OnCPU() {
		sizes = []int{128, 256, 512, 1024}
		if o.Quick {
			sizes = []int{128, 256, 512}
		}
		remeasure = func() {
			if g, wd := cpuPeak(be, 100*time.Millisecond); g > cpuGFLOPs {
				cpuGFLOPs, width = g, wd
			}
		}
	} else {
		if p, ok := be.(interface {
			PeakTFLOPs(backend.DType) (float64, bool)
		}); ok {
			if t, ok := p.PeakTFLOPs(backend.F32); ok {
				peak[config.FP32] = t
			}
			if t, ok := p.PeakTFLOPs(backend.BF16); ok {
				peak[config.BF16] = t
			}
		}
		if len(peak) > 0 {
			m.PeakNote = fmt.Sprintf("data-sheet dense peaks: fp32 %.1f, bf16 %.1f TFLOP/s (tensor cores)", peak[config.FP32], peak[config.BF16])
		} else {
			m.PeakNote = "this GPU is not in the table of data-sheet peaks"
		}
		if o.Quick {
			sizes = sizes[:3]
		}
	}
	target, trials := 300*time.Millisecond, 5
	if o.Quick {
		target, trials = 50*time.Millisecond, 3
	}
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		name := map[backend.DType]config.Precision{backend.F32: config.FP32, backend.BF16: config.BF16}[dt]
		for _, n := range sizes {
			remeasure()
			var p MatMulPoint
			err := tensor.Catch(func() {
				a := randomF32(be, dt, n*n, 3)
				b := randomF32(be, dt, n*n, 4)
				c := be.Alloc(backend.F32, n*n)
				defer func() { be.Free(a); be.Free(b); be.Free(c) }()
				pm := backend.MatMul{Batch: 1, M: n, N: n, K: n, Alpha: 1}
				ra, rb, rc := backend.Ref{S: a}, backend.Ref{S: b}, backend.Ref{S: c}
				sec := timePerCall(func(reps int) {
					for i := 0; i < reps; i++ {
						be.MatMul(pm, ra, rb, rc, backend.Ref{})
					}
					wait(be, c)
				}, target, trials)
				p = MatMulPoint{N: n, DType: name, Ms: sec * 1e3, TFLOPs: 2 * float64(n) * float64(n) * float64(n) / sec / 1e12}
			})
			if isOOM(err) {
				fmt.Fprintf(w, "   n=%d %s: out of memory: stopped\n", n, name)
				break
			}
			if err != nil {
				return m, err
			}
			m.Points = append(m.Points, p)
		}
	}
	if len(m.Points) == 0 {
		return m, fmt.Errorf("no product fits in memory")
	}
	if dev.OnCPU() {
		remeasure()
		peak[config.FP32] = cpuGFLOPs / 1e3
		m.PeakNote = fmt.Sprintf("fp32 peak %.1f GFLOP/s measured (the best of runs between the products: %d threads x 12 independent FMA chains on %d-float vectors)",
			cpuGFLOPs, threads(be), width)
		if cpu.X86.HasAVX512BF16 {
			peak[config.BF16] = 2 * cpuGFLOPs / 1e3
			m.PeakNote += "; bf16 peak taken as twice that: AVX512-BF16's VDPBF16PS does two products per lane"
		} else {
			peak[config.BF16] = cpuGFLOPs / 1e3
			m.PeakNote += "; no AVX512-BF16 here, so bf16 products are widened to f32 and share the fp32 peak"
		}
	}
	fmt.Fprintf(w, "   %s\n", m.PeakNote)
	fmt.Fprintf(w, "   %6s %6s %10s %10s %8s\n", "n", "dtype", "ms", "TFLOP/s", "of peak")
	for i := range m.Points {
		p := &m.Points[i]
		if pk := peak[p.DType]; pk > 0 {
			p.PeakTFLOPs, p.OfPeak = pk, p.TFLOPs/pk
		}
		fmt.Fprintf(w, "   %6d %6s %10.3f %10.3f %8s\n", p.N, p.DType, p.Ms, p.TFLOPs, percent(p.OfPeak))
	}
	m.Summary = matMulSummary(m)
	fmt.Fprintf(w, "   => %s\n", m.Summary)
	return m, nil
}

// cpuPeak measures the CPU's FMA peak in GFLOP/s: the best of five runs
// of the FMA loop lasting d in all, since a peak is a maximum and other
// processes on the machine only ever lower a run's figure.
func cpuPeak(be backend.Backend, d time.Duration) (gflops float64, width int) {
	for i := 0; i < 5; i++ {
		g, w := cpubackend.PeakGFLOPs(threads(be), d/5)
		if g > gflops {
			gflops, width = g, w
		}
	}
	return gflops, width
}

func matMulSummary(m MatMul) string {
	var small, best MatMulPoint
	for _, p := range m.Points {
		if p.DType != config.FP32 {
			continue
		}
		if small.N == 0 || p.N < small.N {
			small = p
		}
		if p.TFLOPs > best.TFLOPs {
			best = p
		}
	}
	s := fmt.Sprintf("fp32 reaches %.3f TFLOP/s at n=%d", best.TFLOPs, best.N)
	if best.OfPeak > 0 {
		s += fmt.Sprintf(" (%s of peak)", percent(best.OfPeak))
	}
	if small.N != best.N {
		s += fmt.Sprintf(", against %.3f at n=%d", small.TFLOPs, small.N)
	}
	for _, p := range m.Points {
		if p.DType == config.BF16 && p.N == best.N {
			s += fmt.Sprintf("; bf16 at n=%d: %.3f TFLOP/s, %.2fx fp32", p.N, p.TFLOPs, p.TFLOPs/best.TFLOPs)
		}
	}
	return s + "; a product does 2n³ FLOPs on 3n² numbers, so large ones can be compute-bound while small ones pay for memory traffic and call overheads"
}

func hostToDevice(dev tensor.Device, be backend.Backend, o Options) (Copy, error) {
	w := o.Log
	au, ok := be.(backend.AsyncUploader)
	if dev.OnCPU() || !ok {
		c := Copy{NotApplicable: NotApplicable{Note: "not applicable: no host↔device copies on the CPU"}}
		if !dev.OnCPU() {
			c.Note = "not applicable: " + dev.String() + " has no pinned-memory uploads"
		}
		fmt.Fprintf(w, "   %s\n", c.Note)
		return c, nil
	}
	c := Copy{NotApplicable: NotApplicable{Applicable: true}}
	sizes := []int64{1 << 20, 16 << 20, 256 << 20}
	if o.Quick {
		sizes = sizes[:2]
	}
	target := 200 * time.Millisecond
	if o.Quick {
		target = 50 * time.Millisecond
	}
	fmt.Fprintf(w, "   %10s %16s %16s\n", "bytes", "pageable GB/s", "pinned GB/s")
	for _, size := range sizes {
		var p CopyPoint
		var perr error
		err := tensor.Catch(func() {
			s := be.Alloc(backend.F32, int(size/4))
			defer be.Free(s)
			dst := backend.Ref{S: s}
			src := make([]byte, size)
			for i := range src {
				src[i] = byte(i)
			}
			pageable := timePerCall(func(reps int) {
				for i := 0; i < reps; i++ {
					be.Upload(dst, src)
				}
				wait(be, s)
			}, target, 3)
			pinned, err := au.PinnedAlloc(int(size))
			if err != nil {
				perr = err
				return
			}
			defer au.PinnedFree(pinned)
			copy(pinned, src)
			var uerr error
			pin := timePerCall(func(reps int) {
				for i := 0; i < reps; i++ {
					if err := au.UploadAsync(dst, pinned).Wait(); err != nil {
						uerr = err
					}
				}
			}, target, 3)
			if uerr != nil {
				perr = uerr
				return
			}
			p = CopyPoint{Bytes: size, PageableGBs: float64(size) / pageable / 1e9, PinnedGBs: float64(size) / pin / 1e9}
		})
		if err == nil {
			err = perr
		}
		if err != nil {
			return c, err
		}
		c.Points = append(c.Points, p)
		fmt.Fprintf(w, "   %10s %16.2f %16.2f\n", units.Bytes(p.Bytes), p.PageableGBs, p.PinnedGBs)
	}
	last := c.Points[len(c.Points)-1]
	c.Summary = fmt.Sprintf("at %s pinned memory uploads at %.1f GB/s, pageable at %.1f GB/s (%.2fx): the driver copies pageable memory through a pinned staging buffer, and only pinned copies can overlap compute",
		units.Bytes(last.Bytes), last.PinnedGBs, last.PageableGBs, last.PinnedGBs/last.PageableGBs)
	fmt.Fprintf(w, "   => %s\n", c.Summary)
	return c, nil
}

// parseSize reads sysfs sizes such as "48K" or "260M".
func parseSize(s string) int64 {
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mul, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return n * mul
}

func percent(f float64) string {
	if f <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*f)
}
