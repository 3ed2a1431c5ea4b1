package gpu

import (
	"testing"

	"github.com/fleetml/fleet/backend"
)

// TestLaunchAllocatesNothing: queuing a kernel on the simulated H200
// (through the real launcher and driver binding) makes no heap
// allocation: the arguments are a value, nothing is boxed.
func TestLaunchAllocatesNothing(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	checkLaunchAllocs(t, be.(*Backend), 0)
}

// TestOpenCLLaunchAllocatesNothing is the same on opencl:0 for its
// kernels: a buffer argument goes as its block's handle and offset, and
// each argument's value through a field of the kernel, not the heap. Its
// products are held to the 20 allocations they make now (measured):
// CLBlast takes alpha and beta as floats by value, which only
// purego.RegisterFunc's reflective call can pass.
func TestOpenCLLaunchAllocatesNothing(t *testing.T) {
	be, _ := backend.Get(openCLDevice(t))
	checkLaunchAllocs(t, be.(*Backend), 20)
}

// checkLaunchAllocs requires no heap allocation of each launch on c, and
// at most productAllocs of a product.
func checkLaunchAllocs(t *testing.T, c *Backend, productAllocs float64) {
	a, b := c.Alloc(backend.F32, 1<<20), c.Alloc(backend.F32, 1<<20)
	defer c.Free(a)
	defer c.Free(b)
	h := c.Alloc(backend.BF16, 1<<20)
	defer c.Free(h)
	ra, rb, rh := backend.Ref{S: a}, backend.Ref{S: b}, backend.Ref{S: h}
	launches := map[string]func(){
		"binary":      func() { c.Binary(backend.Add, ra, ra, rb, 1<<20) },
		"dropout_add": func() { c.DropoutAdd(ra, ra, rb, 1<<20, backend.NewDropoutMask(7, 1, 0, 0.1)) },
		"layer_norm":  func() { c.LayerNorm(ra, rb, rb, ra, rb, backend.Ref{}, 1024, 1024, 1e-5) },
		"adamw": func() {
			c.AdamW(backend.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 3}, ra, rb, ra, rb, 1<<20)
		},
		"attention": func() {
			c.Attention(backend.Attention{B: 2, T: 64, C: 128, H: 4}, ra, rb, ra)
		},
		"attention, bf16": func() { // on tensor cores where the device has them: attention_mma.cu
			c.Attention(backend.Attention{B: 2, T: 64, C: 128, H: 4}, rh, rb, rh)
		},
		"matmul": func() {
			c.MatMul(backend.MatMul{M: 256, N: 256, K: 256, Batch: 1, Alpha: 1}, ra, rb, ra, backend.Ref{})
		},
	}
	for name, f := range launches {
		f() // compiles and loads the kernel
		want := 0.0
		if name == "matmul" {
			want = productAllocs
		}
		if n := testing.AllocsPerRun(20, f); n > want {
			t.Errorf("%s: %v heap allocations per launch, want at most %v", name, n, want)
		}
	}
}
