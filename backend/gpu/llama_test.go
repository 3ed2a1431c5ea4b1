package gpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/kernels"
	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
)

// The kernels of Llama-style blocks and grouped-query attention, as the
// runtime issues them, held to the CPU backend: op by op on random inputs
// in odd shapes (checkOpCases), and a whole Llama-style model's loss,
// gradients and weights after optimizer steps (checkGPTTraining with
// llamaCases), on the emulated CUDA device, on opencl:0 and on cuda:0.

// llamaOpCases are the LlamaBlocks ops and grouped attention on random
// inputs; BF16 cases are held to the CPU in F32 on the rounded inputs.
func llamaOpCases(seed uint64) []opCase {
	r := rand.New(rand.NewPCG(seed, 11))
	rnd := func(n int) []float32 { return randF32(r, n) }
	var cases []opCase
	add := func(name string, tol float64, run func(h host) [][]float32) {
		cases = append(cases, opCase{name, tol, tol == 1e-2, run})
	}
	dts := []backend.DType{backend.F32, backend.BF16}
	tolOf := func(dt backend.DType) float64 {
		if dt == backend.BF16 {
			return 1e-2
		}
		return 1e-5
	}
	for _, sh := range [][2]int{{1, 1}, {3, 70}, {37, 129}, {300, 33}} {
		rows, cols := sh[0], sh[1]
		x, y, dy, w, res := rnd(rows*cols), rnd(rows*cols), rnd(rows*cols), rnd(cols), rnd(rows*cols)
		for _, dt := range dts {
			add(fmt.Sprintf("rms norm %v %dx%d", dt, rows, cols), tolOf(dt), func(h host) [][]float32 {
				xr, wr := h.up(dt, x), h.up(backend.F32, w)
				out, rstd := h.up(dt, x), h.up(backend.F32, x[:rows])
				h.be.(backend.LlamaBlocks).RMSNorm(out, rstd, xr, wr, rows, cols, 1e-5)
				dx, dw := h.up(dt, x), h.up(backend.F32, w) // dw accumulates
				drop := backend.DropoutOut{Dst: h.up(dt, x), Mask: backend.NewDropoutMask(uint64(rows*cols), 1, 6, 0.2)}
				h.be.(backend.LlamaBlocks).RMSNormBackward(dx, h.up(dt, res), dw, h.up(dt, dy), xr, rstd, wr, rows, cols, drop)
				return [][]float32{h.down(out, rows*cols), h.down(rstd, rows), h.down(dx, rows*cols), h.down(dw, cols), h.down(drop.Dst, rows*cols)}
			})
			add(fmt.Sprintf("add rms norm %v %dx%d", dt, rows, cols), tolOf(dt), func(h host) [][]float32 {
				sum, out, rstd := h.up(dt, x), h.up(dt, x), h.up(backend.F32, x[:rows])
				m := backend.NewDropoutMask(uint64(rows)*5, 3, 17, 0.3)
				h.be.(backend.LlamaBlocks).AddRMSNorm(sum, out, rstd, h.up(dt, x), h.up(dt, y), h.up(backend.F32, w), rows, cols, 1e-6, m)
				return [][]float32{h.down(sum, rows*cols), h.down(out, rows*cols), h.down(rstd, rows)}
			})
			add(fmt.Sprintf("swiglu %v %dx%d", dt, rows, cols), tolOf(dt), func(h host) [][]float32 {
				hid := cols / 2
				gu := h.up(dt, x[:2*rows*hid])
				out, dgu := h.up(dt, y[:rows*hid]), h.up(dt, y[:2*rows*hid])
				h.be.(backend.LlamaBlocks).SwiGLU(out, gu, rows, hid)
				h.be.(backend.LlamaBlocks).SwiGLUBackward(dgu, gu, h.up(dt, dy[:rows*hid]), rows, hid)
				return [][]float32{h.down(out, rows*hid), h.down(dgu, 2*rows*hid)}
			})
			add(fmt.Sprintf("relu2 %v %dx%d", dt, rows, cols), tolOf(dt), func(h host) [][]float32 {
				n := rows * cols
				xr := h.up(dt, x)
				out, dx := h.up(dt, y), h.up(dt, y)
				h.be.(backend.LlamaBlocks).ReLU2(out, xr, n)
				h.be.(backend.LlamaBlocks).ReLU2Backward(dx, xr, h.up(dt, dy), n)
				return [][]float32{h.down(out, n), h.down(dx, n)}
			})
		}
	}
	for _, p := range []backend.Rotary{
		{B: 2, T: 37, H: 4, KVH: 2, HD: 16, MaxPos: 40, Eps: 1e-6},
		{B: 1, T: 5, H: 3, KVH: 1, HD: 6, Pos: 9, MaxPos: 16, Eps: 1e-5},
		{B: 1, T: 70, H: 2, KVH: 2, HD: 128, MaxPos: 70, Eps: 1e-6},
	} {
		n, nr := p.B*p.T*p.Width(), p.B*p.T*(p.H+p.KVH)
		x, dy, qw, kw := rnd(n), rnd(n), rnd(p.HD), rnd(p.HD)
		cos, sin := ref.RotaryAngles(p.MaxPos, p.HD, 10000, nil)
		var tab []float32
		for _, v := range append(cos, sin...) {
			tab = append(tab, float32(v))
		}
		for _, dt := range dts {
			for _, qk := range []bool{false, true} {
				add(fmt.Sprintf("rotary %v %+v qknorm=%v", dt, p, qk), tolOf(dt), func(h host) [][]float32 {
					lb := h.be.(backend.LlamaBlocks)
					xr, tr := h.up(dt, x), h.up(backend.F32, tab)
					var qr, kr, rs, dq, dk backend.Ref
					if qk {
						qr, kr, rs = h.up(backend.F32, qw), h.up(backend.F32, kw), h.up(backend.F32, x[:nr])
						dq, dk = h.up(backend.F32, qw), h.up(backend.F32, kw) // accumulate
					}
					out, d := h.up(dt, dy), h.up(dt, dy)
					lb.Rotary(p, out, rs, xr, qr, kr, tr)
					lb.RotaryBackward(p, d, dq, dk, h.up(dt, dy), xr, rs, qr, kr, tr)
					o := [][]float32{h.down(out, n), h.down(d, n)}
					if qk {
						o = append(o, h.down(rs, nr), h.down(dq, p.HD), h.down(dk, p.HD))
					}
					return o
				})
			}
		}
	}
	for _, p := range []backend.Attention{{B: 2, T: 19, C: 24, H: 3, KVH: 1}, {B: 1, T: 70, C: 64, H: 4, KVH: 2}} {
		qkv, dout, sv := rnd(p.B*p.T*p.Width()), rnd(p.B*p.T*p.C), rnd(p.SavedLen())
		for _, dt := range dts {
			for _, round := range []backend.DType{0, backend.BF16} {
				if round != 0 && dt != backend.F32 {
					continue
				}
				tol := tolOf(dt)
				if round != 0 { // the products round q, k, v, dout and the probabilities; the CPU computes in F32
					tol = 1e-2
				}
				products := "as stored"
				if round != 0 {
					products = "rounded to " + round.String()
				}
				add(fmt.Sprintf("grouped attention %v products %s B=%d T=%d C=%d H=%d KVH=%d", dt, products, p.B, p.T, p.C, p.H, p.KVH), tol, func(h host) [][]float32 {
					q := p
					if _, ok := h.be.(*Backend); ok {
						q.Round = round
					}
					x := h.up(dt, qkv)
					out, saved := h.up(dt, dout), h.up(backend.F32, sv)
					h.be.Attention(q, out, saved, x)
					d := h.up(dt, qkv)
					h.be.AttentionBackward(q, d, h.up(dt, dout), out, saved, x)
					return [][]float32{h.down(out, len(dout)), h.down(saved, p.SavedLen()), h.down(d, len(qkv))}
				})
			}
		}
		kv := backend.AttentionKV{B: p.B, T: p.T, C: p.C, H: p.H, KVH: p.KVH, Pos: 3, MaxT: p.T + 5}
		cache := rnd(p.B * kv.MaxT * p.C / p.H * p.KVH)
		add(fmt.Sprintf("grouped attention kv %+v", kv), 1e-5, func(h host) [][]float32 {
			kc, vc := h.up(backend.F32, cache), h.up(backend.F32, cache)
			out := h.up(backend.F32, dout)
			h.be.AttentionKV(kv, out, h.up(backend.F32, qkv), kc, vc)
			return [][]float32{h.down(out, len(dout)), h.down(kc, len(cache)), h.down(vc, len(cache))}
		})
	}
	return cases
}

// llamaCases are Llama-style models for checkGPTTraining: grouped
// attention (4 heads, 2 key/value heads), SwiGLU, RMSNorm, rotary
// embeddings; and Qwen3's pieces (multi-query, QK-norm, q/k/v biases, an
// untied head, a head width not C/H) in F32, with bf16 activations and
// with dropout; and the ReLU² feed-forward (--mlp relu2) in F32 and bf16.
func llamaCases() []gptCase {
	llama := func(c *model.Config) {
		c.Arch, c.NHead, c.NKVHead, c.NEmbd, c.MLPHidden = model.ArchLlama, 4, 2, 32, 40
	}
	qwen3 := func(c *model.Config) {
		llama(c)
		c.NKVHead, c.HeadDim, c.QKNorm, c.QKVBias, c.UntiedHead, c.MLPHidden = 1, 16, true, true, true, 36
	}
	relu2 := func(c *model.Config) {
		llama(c)
		c.MLP, c.MLPHidden = model.MLPReLU2, 64
	}
	return []gptCase{
		{prec: tensor.F32, arch: llama, name: "llama,"},
		{prec: tensor.F32, arch: qwen3, name: "qwen3,"},
		{prec: tensor.BF16, arch: llama, name: "llama,"},
		{prec: tensor.BF16, arch: qwen3, name: "qwen3,"},
		{prec: tensor.F32, drop: 0.25, arch: llama, name: "llama,"},
		{prec: tensor.F32, arch: relu2, name: "relu2,"},
		{prec: tensor.BF16, arch: relu2, name: "relu2,"},
	}
}

// TestLlamaOpsOnEmulatedDevice holds the Llama-style ops, as the backend
// issues them, to the CPU backend on the emulated device.
func TestLlamaOpsOnEmulatedDevice(t *testing.T) {
	be, err := backend.Get(emulatedDevice(t, 40))
	if err != nil {
		t.Fatal(err)
	}
	checkOpCases(t, be, llamaOpCases(1))
}

// TestLlamaOnEmulatedDevice trains Llama-style models for a few steps on
// the emulated device and on the CPU (checkGPTTraining); grouped
// attention under bf16 runs on the tensor-core kernels.
func TestLlamaOnEmulatedDevice(t *testing.T) {
	f := newFakeGPU(256 << 20).withEmulator(t)
	checkGPTTraining(t, fakeDevice(t, 41, f), llamaCases()...)
	for _, k := range []string{"fleet_rotary_backward_dw_f32", "fleet_swiglu_backward_bf16", "fleet_add_rmsnorm_bf16", "fleet_rmsnorm_backward_f32",
		"fleet_relu2_f32", "fleet_relu2_backward_bf16"} {
		if !slices.Contains(f.launches, k) {
			t.Errorf("%s never ran", k)
		}
	}
	if !slices.ContainsFunc(f.launches, kernels.TensorCoreKernel) {
		t.Error("no tensor-core kernel ran: bf16 grouped attention did not reach them")
	}
	if slices.ContainsFunc(f.launches, func(k string) bool {
		return strings.HasPrefix(k, "fleet_layernorm") || strings.HasPrefix(k, "fleet_gelu")
	}) {
		t.Error("a Llama-style model ran GPT-2's LayerNorm or GELU kernels")
	}
}

// TestLlamaOnEmulatedDeviceWithoutTensorCores: bf16 grouped attention on
// the CUDA-core kernels.
func TestLlamaOnEmulatedDeviceWithoutTensorCores(t *testing.T) {
	f := newFakeGPU(256 << 20).withEmulator(t)
	f.noTensorCores = true
	checkGPTTraining(t, fakeDevice(t, 42, f), llamaCases()[3])
	if i := slices.IndexFunc(f.launches, kernels.TensorCoreKernel); i >= 0 {
		t.Errorf("%s ran on a device without tensor cores", f.launches[i])
	}
}

// TestLlamaOpsOnOpenCL and TestLlamaOnOpenCL are the checks on opencl:0
// (PoCL in CI), running the OpenCL kernels for real.
func TestLlamaOpsOnOpenCL(t *testing.T) {
	be, _ := backend.Get(openCLDevice(t))
	checkOpCases(t, be, llamaOpCases(1))
}

func TestLlamaOnOpenCL(t *testing.T) { checkGPTTraining(t, openCLDevice(t), llamaCases()...) }

// TestLlamaOpsOnGPU and TestLlamaOnGPU are the checks on cuda:0, where
// there is one.
func TestLlamaOpsOnGPU(t *testing.T) {
	be, _ := backend.Get(realDevice(t))
	checkOpCases(t, be, llamaOpCases(1))
}

func TestLlamaOnGPU(t *testing.T) { checkGPTTraining(t, realDevice(t), llamaCases()...) }

// TestGPUGroupedAttentionTensorCores is TestGPUAttentionTensorCores for
// grouped-query attention on cuda:0, at a Llama-style model's sizes (4
// key/value heads of 12, and heads of 128 in groups of 6) and multi-query.
func TestGPUGroupedAttentionTensorCores(t *testing.T) {
	checkAttentionTensorCores(t, realDevice(t), []backend.Attention{
		{B: 4, T: 1024, C: 768, H: 12, KVH: 4}, {B: 2, T: 1024, C: 1536, H: 12, KVH: 2}, {B: 1, T: 257, C: 256, H: 4, KVH: 1},
	})
}

// TestGroupedAttentionTensorCoresOnEmulatedDevice is the same check
// through the backend on the emulated device.
func TestGroupedAttentionTensorCoresOnEmulatedDevice(t *testing.T) {
	f := newFakeGPU(64 << 20).withEmulator(t)
	checkAttentionTensorCores(t, fakeDevice(t, 44, f), []backend.Attention{{B: 2, T: 17, C: 128, H: 4, KVH: 2}})
	if !slices.ContainsFunc(f.launches, kernels.TensorCoreKernel) {
		t.Error("no tensor-core kernel ran")
	}
}
