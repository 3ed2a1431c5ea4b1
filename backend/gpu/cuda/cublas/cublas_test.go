package cublas

import (
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
	"github.com/fleetml/fleet/internal/testenv"
)

func TestOpenWithoutCUBLAS(t *testing.T) {
	b, err := Open()
	if err == nil {
		v, _ := b.Version()
		t.Skipf("cuBLAS %s is here (%s)", v, b.Lib.Path)
	}
	t.Log(err)
	if !errors.Is(err, libs.ErrNotFound) || !strings.Contains(err.Error(), "libcublas.so.13, libcublas.so.12 not found") {
		t.Errorf("error %v", err)
	}
	if _, err := OpenLt(); err == nil {
		t.Log("cuBLASLt is here without cuBLAS")
	}
}

func fake(t *testing.T) *CUBLAS {
	t.Helper()
	testenv.FakeLibrary(t, "testdata/fakecublas.c", "libcublas.so.12")
	lib, err := libs.Search(libs.CUBLAS)
	if err != nil || lib.Where != "$FLEET_CUDA_PATH" {
		t.Skipf("cannot load the fake libcublas (%v); found %+v", err, lib)
	}
	return Load(lib)
}

func fakeGet(t *testing.T, b *CUBLAS, i int) int64 {
	r, err := b.Lib.Func("fake_get").Call(uintptr(i))
	if err != nil {
		t.Fatal(err)
	}
	return int64(r)
}

func addr(s []float32) uint64 { return uint64(uintptr(unsafe.Pointer(&s[0]))) }

// rowMajor computes C[M,N] = A[M,K]·B[K,N] (or with B given as [N,K] and
// transposed, when bT).
func rowMajor(a, b []float32, m, n, k int, bT bool) []float32 {
	c := make([]float32, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				if bT {
					s += a[i*k+p] * b[j*k+p]
				} else {
					s += a[i*k+p] * b[p*n+j]
				}
			}
			c[i*n+j] = s
		}
	}
	return c
}

func seq(n int, scale float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(i%7-3) * scale
	}
	return s
}

func near(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-5 {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestFakeGemm checks both GEMM calls' 19 and 23 arguments against a C
// stand-in that computes, and the row-major recipes in Gemm's documentation.
func TestFakeGemm(t *testing.T) {
	b := fake(t)
	if v, err := b.Version(); err != nil || v != "12.8.4" {
		t.Errorf("Version = %q, %v", v, err)
	}
	h, err := b.Create()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.SetStream(0x77); err != nil || fakeGet(t, b, 0) != 0x77 {
		t.Errorf("SetStream: %v", err)
	}
	if err := h.SetWorkspace(0x1000, 4<<20); err != nil || fakeGet(t, b, 1) != 0x1000 || fakeGet(t, b, 2) != 4<<20 {
		t.Errorf("SetWorkspace: %v", err)
	}
	var mse *libs.MissingSymbolError
	if err := h.SetMathMode(MathDefault); !errors.As(err, &mse) || mse.Symbol != "cublasSetMathMode" {
		t.Errorf("missing cublasSetMathMode: %v", err)
	}

	// A Linear layer: y[B,out] = x[B,in]·W[out,in]ᵀ.
	const batch, in, out = 3, 4, 5
	x, w := seq(batch*in, 0.5), seq(out*in, 0.25)
	y := make([]float32, batch*out)
	g := &Gemm{TransA: OpT, TransB: OpN, M: out, N: batch, K: in, Alpha: 1,
		A: addr(w), AType: R32F, LDA: in, B: addr(x), BType: R32F, LDB: in,
		C: addr(y), CType: R32F, LDC: out, Compute: Compute32F, Algo: AlgoDefault}
	if err := h.GemmEx(g); err != nil {
		t.Fatal(err)
	}
	near(t, "linear y", y, rowMajor(x, w, batch, out, in, true))
	if fakeGet(t, b, 3) != int64(Compute32F) || fakeGet(t, b, 4) != -1 || fakeGet(t, b, 5) != 1 {
		t.Errorf("compute %d algo %d", fakeGet(t, b, 3), fakeGet(t, b, 4))
	}
	// Beta accumulates, alpha scales.
	g.Alpha, g.Beta = 2, 1
	if err := h.GemmEx(g); err != nil {
		t.Fatal(err)
	}
	want := rowMajor(x, w, batch, out, in, true)
	for i := range want {
		want[i] *= 3
	}
	near(t, "y after alpha 2 beta 1", y, want)
	if a := testing.AllocsPerRun(50, func() { h.GemmEx(g) }); a != 0 {
		t.Errorf("GemmEx allocates %v times", a)
	}
	runtime.KeepAlive(x)
	runtime.KeepAlive(w)
	runtime.KeepAlive(y)

	// A batch of row-major C[b] = A[b]·B[b], as column-major Cᵀ = Bᵀ·Aᵀ.
	const nb, m, n, k = 2, 3, 4, 5
	A, B := seq(nb*m*k, 1), seq(nb*k*n, 0.5)
	C := make([]float32, nb*m*n)
	sg := &Gemm{TransA: OpN, TransB: OpN, M: n, N: m, K: k, Alpha: 1,
		A: addr(B), AType: R32F, LDA: n, StrideA: k * n,
		B: addr(A), BType: R32F, LDB: k, StrideB: m * k,
		C: addr(C), CType: R32F, LDC: n, StrideC: m * n,
		Batch: nb, Compute: Compute32F, Algo: AlgoDefault}
	if err := h.GemmStridedBatchedEx(sg); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < nb; i++ {
		near(t, "batched C", C[i*m*n:(i+1)*m*n], rowMajor(A[i*m*k:], B[i*k*n:], m, n, k, false))
	}
	if fakeGet(t, b, 5) != nb {
		t.Errorf("batch count %d", fakeGet(t, b, 5))
	}
	runtime.KeepAlive(A)
	runtime.KeepAlive(B)
	runtime.KeepAlive(C)

	// A status is an error naming the call.
	g.AType = R16BF
	if err := h.GemmEx(g); !errors.Is(err, ErrNotSupported) || err.Error() != "cublas: cublasGemmEx: CUBLAS_STATUS_NOT_SUPPORTED" {
		t.Errorf("unsupported type: %v", err)
	}
	g.Compute = 70 // CUBLAS_COMPUTE_64F takes double scalars
	if err := h.GemmEx(g); err == nil {
		t.Error("a compute type with double scalars was accepted")
	}
	if err := h.Destroy(); err != nil {
		t.Error(err)
	}
}

func TestLtVersion(t *testing.T) {
	if v := ltVersion(120805); v != "12.8.5" {
		t.Error(v)
	}
	if v := ltVersion(130001); v != "13.0.1" {
		t.Error(v)
	}
}
