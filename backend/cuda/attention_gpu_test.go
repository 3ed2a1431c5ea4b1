package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cuda/kernels"
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
	g := be.(*CUDA)
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
			t.Run(fmt.Sprintf("%v/off%d/B%d_T%d_C%d_H%d", dt, off, p.B, p.T, p.C, p.H), func(t *testing.T) {
				r := rand.New(rand.NewPCG(uint64(p.T), uint64(p.C)))
				qkv, dout := randVec(r, p.B*p.T*3*p.C), randVec(r, p.B*p.T*p.C)
				rq, rd := roundBF16(qkv), roundBF16(dout)
				want := attnRun(cpu, backend.F32, p, rq, rd, 0)
				q := p
				if dt == backend.F32 {
					q.Round = backend.BF16
				}
				got := attnRun(g, dt, q, qkv, dout, off)
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

// attnRun runs attention forward and backward on be with storage dt, its
// operands (but lse) at element offset off of their buffers, and returns
// out, lse and dqkv as F32.
func attnRun(be backend.Backend, dt backend.DType, p backend.Attention, qkv, dout []float32, off int) [3][]float32 {
	at := func(n int) backend.Ref { return backend.Ref{S: be.Alloc(dt, n+off), Off: off} }
	up := func(v []float32) backend.Ref {
		r := at(len(v))
		uploadAs(be, r, dt, v)
		return r
	}
	q, d := up(qkv), up(dout)
	out, dq := at(len(dout)), at(len(qkv))
	lse := backend.Ref{S: be.Alloc(backend.F32, p.SavedLen())}
	be.Attention(p, out, lse, q)
	be.AttentionBackward(p, dq, d, out, lse, q)
	res := [3][]float32{downloadAs(be, out, dt, len(dout)), downloadAs(be, lse, backend.F32, p.SavedLen()), downloadAs(be, dq, dt, len(qkv))}
	for _, r := range []backend.Ref{q, d, out, dq, lse} {
		be.Free(r.S)
	}
	return res
}

func uploadAs(be backend.Backend, r backend.Ref, dt backend.DType, v []float32) {
	if dt == backend.BF16 {
		h := make([]uint16, len(v))
		for i, x := range v {
			h[i] = backend.F32ToBF16(x)
		}
		be.Upload(r, backend.AsBytes(h))
		return
	}
	be.Upload(r, backend.AsBytes(v))
}

func downloadAs(be backend.Backend, r backend.Ref, dt backend.DType, n int) []float32 {
	v := make([]float32, n)
	if dt == backend.BF16 {
		h := make([]uint16, n)
		be.Download(backend.AsBytes(h), r)
		for i, x := range h {
			v[i] = backend.BF16ToF32(x)
		}
		return v
	}
	be.Download(backend.AsBytes(v), r)
	return v
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

func roundBF16(v []float32) []float32 {
	o := make([]float32, len(v))
	for i, x := range v {
		o[i] = backend.BF16ToF32(backend.F32ToBF16(x))
	}
	return o
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
	g := be.(*CUDA)
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
					qkv, dq := backend.Ref{S: g.Alloc(v.dt, 3*n)}, backend.Ref{S: g.Alloc(v.dt, 3*n)}
					out, dout := backend.Ref{S: g.Alloc(v.dt, n)}, backend.Ref{S: g.Alloc(v.dt, n)}
					lse := backend.Ref{S: g.Alloc(backend.F32, p.SavedLen())}
					uploadAs(g, qkv, v.dt, randVec(r, 3*n))
					uploadAs(g, dout, v.dt, randVec(r, n))
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
