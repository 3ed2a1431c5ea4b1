package gpu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cpu"
)

var testDev = backend.Device{Kind: "cuda", Index: 9}

func TestSizeClass(t *testing.T) {
	prev := 0
	for _, n := range []int{0, 1, 511, 512, 513, 4000, 1 << 20, 1<<20 + 1, 3 << 20, 5<<20 + 7, 1 << 30, 1<<30 + 1} {
		c := sizeClass(n)
		if c < n || c < prev {
			t.Errorf("sizeClass(%d) = %d: below the request or the previous class %d", n, c, prev)
		}
		if n > 1<<20 && float64(c-n) > float64(n)/8 {
			t.Errorf("sizeClass(%d) = %d wastes more than an eighth", n, c)
		}
		if c%512 != 0 {
			t.Errorf("sizeClass(%d) = %d is not a multiple of 512", n, c)
		}
		prev = c
	}
}

// deviceError runs fn and returns the *backend.DeviceError it panics with;
// any other panic goes on.
func deviceError(fn func()) (err *backend.DeviceError) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*backend.DeviceError)
			if !ok {
				panic(r)
			}
			err = e
		}
	}()
	fn()
	return nil
}

func TestPoolReuseStatsAndOutOfMemory(t *testing.T) {
	f := newFakeGPU(1 << 20)
	c := New(testDev, f)
	a := c.Alloc(backend.F32, 1000) // 4000 bytes: class 4096
	b := c.Alloc(backend.BF16, 100) // 200 bytes: class 512
	if s := c.MemStats(); s.Allocated != 4096+512 || s.Reserved != 4096+512 || s.Peak != 4096+512 {
		t.Errorf("stats after two allocations: %+v", s)
	}
	c.Free(a)
	a2 := c.Alloc(backend.F32, 1010) // same class: reused
	if f.allocs != 2 || a2.(*Buffer).ptr != a.(*Buffer).ptr {
		t.Errorf("a block of the same class was not reused (%d driver allocations)", f.allocs)
	}
	c.Free(a2)
	c.Free(b)
	if s := c.MemStats(); s.Allocated != 0 || s.Reserved != 4096+512 || s.Peak != 4096+512 {
		t.Errorf("stats after freeing: %+v", s)
	}
	// The device is full of cached blocks: a new size returns them first.
	big := c.Alloc(backend.F32, (1<<20-4096)/4)
	if f.used > 1<<20 || c.MemStats().Reserved != int64(sizeClass(1<<20-4096)) {
		t.Errorf("cached blocks were not released for a large request: %+v", c.MemStats())
	}
	// Nothing left to release: out of memory, typed and explained.
	err := deviceError(func() { c.Alloc(backend.F32, 1<<20) })
	if err == nil || !errors.Is(err, backend.ErrOutOfMemory) {
		t.Fatalf("want an out-of-memory device error, got %v", err)
	}
	t.Log(err)
	c.Free(big)
	if c.EmptyCache() != nil || f.used != 0 {
		t.Errorf("EmptyCache left %d bytes on the device", f.used)
	}
}

func TestUploadDownloadCopy(t *testing.T) {
	c := New(testDev, newFakeGPU(1<<20))
	s := c.Alloc(backend.F32, 16)
	v := []float32{1, 2, 3, 4, 5}
	c.Upload(backend.Ref{S: s, Off: 3}, backend.AsBytes(v))
	d := c.Alloc(backend.F32, 8)
	c.Copy(backend.Ref{S: d, Off: 1}, backend.Ref{S: s, Off: 4}, 3)
	got := make([]float32, 3)
	c.Download(backend.AsBytes(got), backend.Ref{S: d, Off: 1})
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Errorf("round trip gave %v", got)
	}
	if c.MemStats().Copied != 20+12 {
		t.Errorf("copied %d bytes, want 32", c.MemStats().Copied)
	}
	if err := deviceError(func() { c.Upload(backend.Ref{S: d, Off: 6}, backend.AsBytes(v)) }); err == nil {
		t.Error("an upload past the end was accepted")
	}
	if err := deviceError(func() { c.Copy(backend.Ref{S: d}, backend.Ref{S: c.Alloc(backend.BF16, 4)}, 2) }); err == nil {
		t.Error("a copy between dtypes was accepted")
	}
}

// TestMatMulAgainstCPU runs the backend's MatMul (the row-major to
// column-major mapping onto cuBLAS) against the CPU backend, on a device
// whose GEMM is cuBLAS's definition written out: every transpose pair,
// batches with broadcast operands, alpha and beta, F32 and BF16 inputs.
func TestMatMulAgainstCPU(t *testing.T) {
	f := newFakeGPU(64 << 20)
	gc := New(testDev, f)
	cc := cpu.New(backend.CPU)
	r := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
			for _, sh := range []struct{ batch, m, n, k, sa, sb int }{
				{1, 1, 1, 1, 0, 0}, {1, 5, 7, 3, 0, 0}, {3, 4, 6, 5, -1, -1}, {2, 3, 5, 4, -1, 0}, {2, 3, 5, 4, 0, -1},
			} {
				for _, ab := range [][2]float32{{1, 0}, {1, 0.5}, {0.5, 1}, {-2, 0.25}} {
					p := backend.MatMul{Batch: sh.batch, M: sh.m, N: sh.n, K: sh.k, TransA: tr[0], TransB: tr[1],
						StrideC: sh.m * sh.n, Alpha: ab[0], Beta: ab[1]}
					if sh.sa != 0 {
						p.StrideA = sh.m * sh.k
					}
					if sh.sb != 0 {
						p.StrideB = sh.k * sh.n
					}
					if dt == backend.BF16 && p.Alpha != 1 {
						continue // the backends take BF16 with alpha 1 only
					}
					name := fmt.Sprintf("%v %+v", dt, p)
					na, nb, nc := max(1, sh.batch*(p.StrideA/max(1, sh.m*sh.k)))*sh.m*sh.k, max(1, sh.batch*(p.StrideB/max(1, sh.k*sh.n)))*sh.k*sh.n, sh.batch*sh.m*sh.n
					a, b, c0 := randF32(r, na), randF32(r, nb), randF32(r, nc)
					want := matmulOn(cc, dt, p, a, b, c0)
					got := matmulOn(gc, dt, p, a, b, c0)
					if err := closeTo(got, want, 1e-5); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
			}
		}
	}
}

// matmulOn runs one MatMul on be with host operands (a and b stored as dt).
func matmulOn(be backend.Backend, dt backend.DType, p backend.MatMul, a, b, c []float32) []float32 {
	h := host{be: be}
	cr := h.up(backend.F32, c)
	be.MatMul(p, h.up(dt, a), h.up(dt, b), cr, backend.Ref{})
	return h.down(cr, len(c))
}

func randF32(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
		if v[i] == 0 {
			v[i] = 1
		}
	}
	return v
}

// closeTo reports a normwise relative difference above tol, or any NaN.
func closeTo(got, want []float32, tol float64) error {
	var d, n float64
	for i := range want {
		if math.IsNaN(float64(got[i])) {
			return fmt.Errorf("NaN at %d", i)
		}
		d += math.Pow(float64(got[i]-want[i]), 2)
		n += math.Pow(float64(want[i]), 2)
	}
	if math.Sqrt(d) > tol*math.Sqrt(n) {
		k := min(len(want), 8)
		return fmt.Errorf("normwise error %.3g > %g\ngot  %v...\nwant %v...", math.Sqrt(d/n), tol, got[:k], want[:k])
	}
	return nil
}

func TestPeakTable(t *testing.T) {
	c := New(testDev, newFakeGPU(1<<20))                      // named as an H200
	if p, ok := c.PeakTFLOPs(backend.BF16); !ok || p != 989 { // the data sheets' table, in sim
		t.Errorf("H200 bf16 peak %v %v", p, ok)
	}
	if p, ok := c.PeakTFLOPs(backend.F32); !ok || p != 67 {
		t.Errorf("H200 fp32 peak %v %v", p, ok)
	}
}

func TestUploadAsync(t *testing.T) {
	c := New(testDev, newFakeGPU(1<<20))
	pinned, err := c.PinnedAlloc(12)
	if err != nil {
		t.Fatal(err)
	}
	copy(pinned, backend.AsBytes([]float32{1, 2, 3}))
	s := c.Alloc(backend.F32, 5)
	u := c.UploadAsync(backend.Ref{S: s, Off: 2}, pinned)
	if err := errors.Join(u.Ready(), u.Wait()); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 3)
	c.Download(backend.AsBytes(got), backend.Ref{S: s, Off: 2})
	if fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("async upload gave %v", got)
	}
	if err := deviceError(func() { c.UploadAsync(backend.Ref{S: s, Off: 4}, pinned) }); err == nil {
		t.Error("an async upload past the end was accepted")
	}
	if err := c.PinnedFree(pinned); err != nil {
		t.Error(err)
	}
}

// TestTimerMarks: the backend's marks measure the time between them
// (host time on the fake device, events on a real one).
func TestTimerMarks(t *testing.T) {
	c := New(testDev, newFakeGPU(1<<20))
	var tm backend.Timer = c
	a, err := tm.Mark()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	b, err := tm.Mark()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := tm.Elapsed(a, b)
	if err != nil || ms < 15 || ms > 2000 {
		t.Errorf("elapsed %v ms (err %v) across a 20 ms sleep", ms, err)
	}
	tm.ReleaseMark(a)
	tm.ReleaseMark(b)
}
