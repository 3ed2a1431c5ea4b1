package opencl

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/kcache"
	"github.com/fleetml/fleet/backend/gpu/libs"
	"github.com/fleetml/fleet/internal/testenv"
)

// devices lists the OpenCL devices, or skips the test saying why there
// are none (no loader, or no platform: .ci/run installs PoCL's).
func devices(t *testing.T) []Device {
	t.Helper()
	ds, err := Devices()
	if errors.Is(err, libs.ErrNotFound) || errors.Is(err, ErrNoPlatform) {
		testenv.NoOpenCL(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestDevices: every device is listed with its place in the numbering,
// its platform, name, version and memory.
func TestDevices(t *testing.T) {
	for i, d := range devices(t) {
		t.Logf("opencl:%d: %s (%s, %s) on %s (%s), %d compute units, %d MiB, fp16 %v, driver %s",
			d.Index, d.Name, d.Type, d.Version, d.Platform, d.PlatformVersion, d.ComputeUnits, d.GlobalMemBytes>>20, d.FP16, d.DriverVersion)
		if d.Index != i || d.Name == "" || d.Platform == "" || !strings.HasPrefix(d.Version, "OpenCL ") ||
			d.GlobalMemBytes <= 0 || d.MaxWorkGroupSize <= 0 || d.ComputeUnits <= 0 {
			t.Errorf("device %d: %+v", i, d)
		}
	}
}

const testSource = `
__kernel void axpy(__global const float *x, __global float *y, float a, int n) {
	int i = get_global_id(0);
	if (i < n) {
		y[i] = a * x[i] + y[i];
	}
}

__kernel void add(__global const float *x, __global const float *y, __global float *out, int n) {
	int i = get_global_id(0);
	if (i < n) {
		out[i] = x[i] + y[i];
	}
}
`

// TestKernelsOnDevices builds two kernels with each device's compiler and
// runs them on random inputs of sizes that are not multiples of the
// work-group (and of one element), against Go: the sum bit for bit, and
// a·x + y within one rounding of the fused or the unfused form, since
// OpenCL C may contract it into a fused multiply-add.
func TestKernelsOnDevices(t *testing.T) {
	for _, d := range devices(t) {
		c, err := Open(d)
		if err != nil {
			t.Fatalf("opencl:%d: %v", d.Index, err)
		}
		prog, err := c.Build(testSource, "")
		if err != nil {
			t.Fatalf("opencl:%d: %v", d.Index, err)
		}
		axpy, err := prog.Kernel("axpy")
		if err != nil {
			t.Fatal(err)
		}
		add, err := prog.Kernel("add")
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(1, uint64(d.Index)))
		for _, n := range []int{1, 63, 1000003} {
			x, y := make([]float32, n), make([]float32, n)
			for i := range x {
				x[i], y[i] = float32(r.NormFloat64()), float32(r.NormFloat64())
			}
			bx, err1 := c.Alloc(4 * n)
			by, err2 := c.Alloc(4 * n)
			bo, err3 := c.Alloc(4 * n)
			if err := errors.Join(err1, err2, err3); err != nil {
				t.Fatal(err)
			}
			const a = float32(0.37)
			err = errors.Join(bx.Write(bytesOf(x)), by.Write(bytesOf(y)),
				add.SetArgs(bx, by, bo, int32(n)), c.Launch(add, n, 64),
				axpy.SetArgs(bx, by, a, int32(n)), c.Launch(axpy, n, 0))
			if err != nil {
				t.Fatal(err)
			}
			sum, got := make([]float32, n), make([]float32, n)
			if err := errors.Join(bo.Read(bytesOf(sum)), by.Read(bytesOf(got))); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if want := x[i] + y[i]; math.Float32bits(sum[i]) != math.Float32bits(want) {
					t.Fatalf("opencl:%d n %d: add[%d] = %v, want %v", d.Index, n, i, sum[i], want)
				}
				fused := float32(math.FMA(float64(a), float64(x[i]), float64(y[i])))
				plain := float32(a*x[i]) + y[i]
				if got[i] != fused && got[i] != plain {
					t.Fatalf("opencl:%d n %d: axpy[%d] = %v, want %v (fused) or %v", d.Index, n, i, got[i], fused, plain)
				}
			}
			if err := errors.Join(bx.Free(), by.Free(), bo.Free()); err != nil {
				t.Fatal(err)
			}
		}
		if err := errors.Join(axpy.Release(), add.Release(), prog.Release(), c.Close()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBuildError: a program that does not compile fails with the
// compiler's log, naming the line at fault; an unknown kernel name and a
// buffer of no bytes are errors too.
func TestBuildError(t *testing.T) {
	d := devices(t)[0]
	c, err := Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Build("__kernel void broken(__global float *x) { x[0] = undefined_name; }", "")
	var e *Error
	if !errors.As(err, &e) || e.Code != clBuildProgramFailure || !strings.Contains(e.Log, "undefined_name") {
		t.Fatalf("a broken program: %v", err)
	}
	prog, err := c.Build(testSource, "")
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Release()
	if _, err := prog.Kernel("nope"); err == nil || !strings.Contains(err.Error(), "CL_INVALID_KERNEL_NAME") {
		t.Errorf("an unknown kernel: %v", err)
	}
	if _, err := c.Alloc(0); err == nil {
		t.Error("a buffer of 0 bytes was made")
	}
}

// TestLibrarySearch: the loader is looked for in $FLEET_OPENCL_PATH
// first, and a search that finds nothing names each place it looked.
func TestLibrarySearch(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("FLEET_OPENCL_PATH", dir)
	missing := Library
	missing.Sonames = []string{"libOpenCL-missing.so.1"}
	_, err := libs.Search(missing)
	var nf *libs.NotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "$FLEET_OPENCL_PATH") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a missing loader: %v", err)
	}
}

// bytesOf views f's memory as bytes.
func bytesOf(f []float32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// TestBuildCached: the first build compiles and stores the device's
// binary, the second loads it without compiling and its kernels compute
// the same, and a damaged entry is compiled again.
func TestBuildCached(t *testing.T) {
	d := devices(t)[0]
	c, err := Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cache, err := kcache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := func(p *Program) []float32 {
		t.Helper()
		k, err := p.Kernel("add")
		if err != nil {
			t.Fatal(err)
		}
		defer k.Release()
		const n = 1000
		x, y := make([]float32, n), make([]float32, n)
		for i := range x {
			x[i], y[i] = float32(i)*0.5, float32(n-i)
		}
		bx, _ := c.Alloc(4 * n)
		by, _ := c.Alloc(4 * n)
		bo, _ := c.Alloc(4 * n)
		defer func() { bx.Free(); by.Free(); bo.Free() }()
		out := make([]float32, n)
		if err := errors.Join(bx.Write(bytesOf(x)), by.Write(bytesOf(y)), k.SetArgs(bx, by, bo, int32(n)), c.Launch(k, n, 0), bo.Read(bytesOf(out))); err != nil {
			t.Fatal(err)
		}
		return out
	}
	var want []float32
	for i, wantHit := range []bool{false, true} {
		p, hit, err := c.BuildCached(cache, testSource, "-cl-std=CL1.2")
		if err != nil {
			t.Fatal(err)
		}
		if hit != wantHit {
			t.Fatalf("build %d: hit %v, want %v", i+1, hit, wantHit)
		}
		got := run(p)
		if want == nil {
			want = got
		} else if string(bytesOf(got)) != string(bytesOf(want)) {
			t.Fatal("the cached program computes otherwise")
		}
		p.Release()
	}
	entries, _ := os.ReadDir(cache.Dir())
	for _, e := range entries {
		if err := os.WriteFile(filepath.Join(cache.Dir(), e.Name()), []byte("damaged"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, hit, err := c.BuildCached(cache, testSource, "-cl-std=CL1.2")
	if err != nil || hit {
		t.Fatalf("after damage: hit %v, %v", hit, err)
	}
	if got := run(p); string(bytesOf(got)) != string(bytesOf(want)) {
		t.Fatal("the rebuilt program computes otherwise")
	}
	p.Release()
}

// TestSgemm holds CLBlast's products to a float64 reference on random
// inputs, with each transpose, sizes that fit no tile, beta, offsets, and
// a strided batch. It skips, saying why, where CLBlast is not installed.
func TestSgemm(t *testing.T) {
	d := devices(t)[0]
	if _, err := loadBLAS(); err != nil {
		testenv.NoOpenCL(t, fmt.Errorf("%w (install libclblast1)", err))
	}
	c, err := Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := rand.New(rand.NewPCG(3, 4))
	for _, g := range []GEMM{
		{Batch: 1, M: 67, N: 45, K: 33, Alpha: 1},
		{Batch: 1, M: 20, N: 70, K: 129, TransA: true, Alpha: 0.5, Beta: 1},
		{Batch: 1, M: 64, N: 31, K: 40, TransB: true, Alpha: 1, Beta: 0.25, OffA: 3, OffB: 5, OffC: 7},
		{Batch: 3, M: 17, N: 19, K: 23, TransA: true, TransB: true, Alpha: 1, StrideA: 23*17 + 2, StrideB: 19*23 + 1, StrideC: 17*19 + 3},
	} {
		na := g.OffA + (g.Batch-1)*g.StrideA + g.M*g.K
		nb := g.OffB + (g.Batch-1)*g.StrideB + g.K*g.N
		nc := g.OffC + (g.Batch-1)*g.StrideC + g.M*g.N
		av, bv, cv := make([]float32, na), make([]float32, nb), make([]float32, nc)
		for _, v := range [][]float32{av, bv, cv} {
			for i := range v {
				v[i] = float32(r.NormFloat64())
			}
		}
		ba, _ := c.Alloc(4 * na)
		bb, _ := c.Alloc(4 * nb)
		bc, _ := c.Alloc(4 * nc)
		got := make([]float32, nc)
		if err := errors.Join(ba.Write(bytesOf(av)), bb.Write(bytesOf(bv)), bc.Write(bytesOf(cv)), c.Sgemm(g, ba, bb, bc), bc.Read(bytesOf(got))); err != nil {
			t.Fatalf("%+v: %v", g, err)
		}
		for bi := range g.Batch {
			at := func(i, k int) float64 { // op(A)[i][k]
				o := g.OffA + bi*g.StrideA
				if g.TransA {
					return float64(av[o+k*g.M+i])
				}
				return float64(av[o+i*g.K+k])
			}
			bt := func(k, j int) float64 {
				o := g.OffB + bi*g.StrideB
				if g.TransB {
					return float64(bv[o+j*g.K+k])
				}
				return float64(bv[o+k*g.N+j])
			}
			for i := range g.M {
				for j := range g.N {
					var s float64
					for k := range g.K {
						s += at(i, k) * bt(k, j)
					}
					ci := g.OffC + bi*g.StrideC + i*g.N + j
					want := float64(g.Alpha)*s + float64(g.Beta)*float64(cv[ci])
					if math.Abs(float64(got[ci])-want) > 1e-5*float64(g.K)+1e-5*math.Abs(want) {
						t.Fatalf("%+v: C[%d][%d][%d] = %v, want %v", g, bi, i, j, got[ci], want)
					}
				}
			}
		}
		ba.Free()
		bb.Free()
		bc.Free()
	}
}

// TestErrorMessages: a failed call names cl.h's code (through the
// binding's libs.Codes table) beside its number, "error" for a code the
// table does not name, and a missing symbol keeps the function's name.
func TestErrorMessages(t *testing.T) {
	for _, c := range []struct {
		r    uintptr
		want string
	}{
		{uintptr(0), ""},
		{uintptr(uint32(0xFFFFFFFC)), "opencl: clCreateBuffer: CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)"},
		{^uintptr(4), "opencl: clCreateBuffer: CL_OUT_OF_RESOURCES (-5)"},
		{uintptr(uint32(0xFFFFFC17)), "opencl: clCreateBuffer: CL_PLATFORM_NOT_FOUND_KHR (no OpenCL platform is installed) (-1001)"},
		{uintptr(uint32(0xFFFFFF00)), "opencl: clCreateBuffer: error (-256)"},
	} {
		err := check("clCreateBuffer", c.r, nil)
		if got := fmt.Sprint(err); (err == nil && c.want != "") || (err != nil && got != c.want) {
			t.Errorf("check(%#x) = %q, want %q", c.r, got, c.want)
		}
	}
	missing := errors.New("no such symbol")
	if err := check("clFlush", 0, missing); !errors.Is(err, missing) || err.Error() != "opencl: clFlush: no such symbol" {
		t.Errorf("missing symbol: %v", err)
	}
}
