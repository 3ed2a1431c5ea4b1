package gpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/kernels"
	"github.com/fleetml/fleet/tensor"
)

// The tensor-core attention kernels (kernels/attention_mma.cu) on cuda:0:
// held to the CPU as in emulation, at sizes the emulator cannot reach, and
// timed against the CUDA-core kernels they replace (PyTorch's SDPA on the
// same shapes: scripts/torch_sdpa_bench.py).

// attnTolMMA is the emulation tests' bound: twice bf16's unit roundoff,
// normwise (kernels/attention_emu_test.go says why).
const attnTolMMA = 2.0 / 256

// TestGPUAttentionTensorCores runs attention forward and backward on
// cuda:0 with bf16 storage and with F32 storage whose products round to
// bf16 (autocast), against the CPU on the same bf16-rounded inputs.
func TestGPUAttentionTensorCores(t *testing.T) {
	checkAttentionTensorCores(t, realDevice(t), []backend.Attention{
		{B: 1, T: 1, C: 64, H: 1}, {B: 2, T: 17, C: 128, H: 2}, {B: 1, T: 64, C: 128, H: 1},
		{B: 1, T: 257, C: 64, H: 1}, {B: 1, T: 257, C: 128, H: 1}, {B: 1, T: 100, C: 72, H: 1},
		{B: 4, T: 1024, C: 768, H: 12}, {B: 2, T: 1024, C: 768, H: 6},
	})
}

// TestAttentionTensorCoresOnEmulatedDevice is the same check through the
// backend on the emulated device, at sizes the emulator can run.
func TestAttentionTensorCoresOnEmulatedDevice(t *testing.T) {
	f := newFakeGPU(64 << 20).withEmulator(t)
	checkAttentionTensorCores(t, fakeDevice(t, 23, f), []backend.Attention{{B: 2, T: 17, C: 128, H: 2}, {B: 1, T: 70, C: 72, H: 1}})
	if !slices.ContainsFunc(f.launches, kernels.TensorCoreKernel) {
		t.Error("no tensor-core kernel ran")
	}
}

func checkAttentionTensorCores(t *testing.T, dev tensor.Device, shapes []backend.Attention) {
	be, _ := backend.Get(dev)
	g := be.(*Backend)
	if !g.TensorCores() {
		t.Skip("no tensor cores (compute capability below 8.0)")
	}
	cpu, _ := backend.Get(tensor.CPU)
	for _, p := range shapes {
		// Operands at element offset 1 are not 16-byte aligned: the
		// kernels load them element by element.
		for _, c := range []struct {
			dt  backend.DType
			off int
		}{{backend.BF16, 0}, {backend.F32, 0}, {backend.BF16, 1}} {
			dt, off := c.dt, c.off
			t.Run(fmt.Sprintf("%v/off%d/B%d_T%d_C%d_H%d_KVH%d", dt, off, p.B, p.T, p.C, p.H, p.KVH), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(p.T), uint64(p.C)))
				qkv, dout := randF32(r, p.B*p.T*p.Width()), randF32(r, p.B*p.T*p.C)
				want := attnRun(host{be: cpu, asF32: true}, backend.BF16, p, qkv, dout, 0)
				q := p
				if dt == backend.F32 {
					q.Round = backend.BF16
				}
				got := attnRun(host{be: g}, dt, q, qkv, dout, off)
				for i, name := range []string{"out", "lse", "dqkv"} {
					tol := attnTolMMA
					if name == "lse" {
						tol = 1e-5
					}
					if err := closeTo(got[i], want[i], tol); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			})
		}
	}
}

// attnRun runs attention forward and backward through h with storage dt
// (F32 holding bf16-rounded values, for the CPU: host.asF32), its
// operands (but lse) at element offset off of their buffers, and returns
// out, lse and dqkv as F32.
func attnRun(h host, dt backend.DType, p backend.Attention, qkv, dout []float32, off int) [3][]float32 {
	q, d := h.upAt(dt, qkv, off), h.upAt(dt, dout, off)
	out, dq := h.alloc(dt, len(dout), off), h.alloc(dt, len(qkv), off)
	lse := h.alloc(backend.F32, p.SavedLen(), 0)
	h.be.Attention(p, out, lse, q)
	h.be.AttentionBackward(p, dq, d, out, lse, q)
	res := [3][]float32{h.down(out, len(dout)), h.down(lse, p.SavedLen()), h.down(dq, len(qkv))}
	for _, r := range []backend.Ref{q, d, out, dq, lse} {
		h.be.Free(r.S)
	}
	return res
}

// BenchmarkGPUAttention times attention forward, and forward with
// backward, on cuda:0 for GPT-2 124M's shape (B 16, T 1024, 12 heads of
// 64) and for heads of 128: the F32 kernels on CUDA cores (fp32), the
// bf16-storage CUDA-core kernels they were (bf16-cudacores), and the
// tensor-core kernels, bf16 storage (bf16-mma) and F32 rounded to bf16
// (autocast-mma). It reports ms per call and TFLOP/s (causal pairs ×
// 4·hd for the forward, × 10·hd with the backward: the products' FLOPs).
func BenchmarkGPUAttention(b *testing.B) {
	dev := backend.Device{Kind: "cuda"}
	be, err := backend.Get(dev)
	if err != nil {
		b.Skipf("no GPU: %v", err)
	}
	g := be.(*Backend)
	for _, p := range []backend.Attention{{B: 16, T: 1024, C: 768, H: 12}, {B: 16, T: 1024, C: 768, H: 6}} {
		hd := p.C / p.H
		pairs := float64(p.B*p.H) * float64(p.T) * float64(p.T+1) / 2
		for _, v := range []struct {
			name  string
			dt    backend.DType
			round backend.DType
			noMMA bool
		}{{"fp32", backend.F32, 0, true}, {"bf16-cudacores", backend.BF16, 0, true}, {"bf16-mma", backend.BF16, 0, false}, {"autocast-mma", backend.F32, backend.BF16, false}} {
			for _, bwd := range []bool{false, true} {
				pass := "fwd"
				if bwd {
					pass = "fwd+bwd"
				}
				b.Run(fmt.Sprintf("hd%d/%s/%s", hd, v.name, pass), func(b *testing.B) {
					g.noMMA.Store(v.noMMA)
					defer g.noMMA.Store(false)
					q := p
					q.Round = v.round
					n := p.B * p.T * p.C
					r := rand.New(rand.NewPCG(1, 2))
					h := host{be: g}
					qkv, dout := h.up(v.dt, randF32(r, 3*n)), h.up(v.dt, randF32(r, n))
					dq, out, lse := h.alloc(v.dt, 3*n, 0), h.alloc(v.dt, n, 0), h.alloc(backend.F32, p.SavedLen(), 0)
					step := func() {
						g.Attention(q, out, lse, qkv)
						if bwd {
							g.AttentionBackward(q, dq, dout, out, lse, qkv)
						}
					}
					step()
					if err := g.Synchronize(); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					for range b.N {
						step()
					}
					if err := g.Synchronize(); err != nil {
						b.Fatal(err)
					}
					b.StopTimer() // the frees below are not the kernels' time
					sec := b.Elapsed().Seconds() / float64(b.N)
					flops := pairs * 4 * float64(hd)
					if bwd {
						flops = pairs * 10 * float64(hd)
					}
					b.ReportMetric(sec*1e3, "ms/call")
					b.ReportMetric(flops/sec/1e12, "TFLOP/s")
					for _, x := range []backend.Ref{qkv, dq, out, dout, lse} {
						g.Free(x.S)
					}
				})
			}
		}
	}
}
