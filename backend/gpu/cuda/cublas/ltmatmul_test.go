package cublas

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
	"github.com/fleetml/fleet/internal/testenv"
)

// fakeLt builds testdata/fakecublaslt.c into a libcublasLt the search
// finds, or skips saying why it cannot.
func fakeLt(t *testing.T) *Lt {
	t.Helper()
	testenv.FakeLibrary(t, "testdata/fakecublaslt.c", "libcublasLt.so.12", "-lm")
	lib, err := libs.Search(libs.CUBLASLt)
	if err != nil || lib.Where != "$FLEET_CUDA_PATH" {
		t.Skipf("cannot load the fake libcublasLt (%v); found %+v", err, lib)
	}
	return LoadLt(lib)
}

func ltAddr(v []float32) uint64 { return uint64(uintptr(unsafe.Pointer(&v[0]))) }

func geluRef(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

func dgeluRef(x float64) float64 {
	u := math.Sqrt(2/math.Pi) * (x + 0.044715*x*x*x)
	th := math.Tanh(u)
	return 0.5*(1+th) + 0.5*x*(1-th*th)*math.Sqrt(2/math.Pi)*(1+3*0.044715*x*x)
}

// TestLtMatmulEpilogues runs cublasLtMatmul through the binding against
// the fake library: D = A·Bᵀ with a bias and GELU, keeping the GELU input
// in Aux; then the GELU gradient from Aux with the bias gradient; each held
// to a float64 reference on random inputs. The arguments that reach the
// library (epilogue, stream, workspace) are checked too.
func TestLtMatmulEpilogues(t *testing.T) {
	lt := fakeLt(t)
	h, err := lt.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer lt.Destroy(h)
	const m, n, k = 5, 4, 3
	rng := rand.New(rand.NewPCG(4, 5))
	rnd := func(c int) []float32 {
		v := make([]float32, c)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	a, b, bias := rnd(m*k), rnd(n*k), rnd(m) // A m×k, B stored n×k (op T), column-major
	d, aux := make([]float32, m*n), make([]float32, m*n)
	ws := make([]float32, 64)
	mm := &LtMatmul{TransA: OpN, TransB: OpT, M: m, N: n, K: k, Alpha: 1, A: ltAddr(a), B: ltAddr(b), C: ltAddr(d), D: ltAddr(d),
		LDA: m, LDB: n, LDC: m, Compute: Compute32F, Epilogue: EpilogueGELUAuxBias, Bias: ltAddr(bias), Aux: ltAddr(aux), AuxLD: m,
		Workspace: ltAddr(ws), WorkspaceBytes: 256, Stream: 0x5eed}
	if err := lt.Matmul(h, mm); err != nil {
		t.Fatal(err)
	}
	pre := make([]float64, m*n)
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			var s float64
			for p := 0; p < k; p++ {
				s += float64(a[i+p*m]) * float64(b[j+p*n])
			}
			pre[i+j*m] = s + float64(bias[i])
			if e := math.Abs(float64(aux[i+j*m]) - pre[i+j*m]); e > 1e-5 {
				t.Errorf("aux[%d,%d] = %v, want %v", i, j, aux[i+j*m], pre[i+j*m])
			}
			if e := math.Abs(float64(d[i+j*m]) - geluRef(pre[i+j*m])); e > 1e-5 {
				t.Errorf("D[%d,%d] = %v, want gelu %v", i, j, d[i+j*m], geluRef(pre[i+j*m]))
			}
		}
	}
	lib := func(i int) int64 {
		r, err := lt.Lib.Func("fake_get").Call(uintptr(i))
		if err != nil {
			t.Fatal(err)
		}
		return int64(r)
	}
	if lib(0) != 256 || lib(1) != 0x5eed || lib(2) != int64(ltAddr(ws)) || lib(4) != int64(EpilogueGELUAuxBias) {
		t.Errorf("the library saw workspace limit %d, stream %#x, workspace %#x, epilogue %d", lib(0), lib(1), lib(2), lib(4))
	}

	// The same shape again keeps its plan (no second heuristic), but with
	// a bias and aux of their own: the pointers are set per product.
	bias2, aux2, d2 := rnd(m), make([]float32, m*n), make([]float32, m*n)
	again := *mm
	again.Bias, again.Aux, again.C, again.D = ltAddr(bias2), ltAddr(aux2), ltAddr(d2), ltAddr(d2)
	if err := lt.Matmul(h, &again); err != nil {
		t.Fatal(err)
	}
	for j := 0; j < n; j++ {
		for i := 0; i < m; i++ {
			want := pre[i+j*m] - float64(bias[i]) + float64(bias2[i])
			if e := math.Abs(float64(aux2[i+j*m]) - want); e > 1e-5 {
				t.Fatalf("second product's aux[%d,%d] = %v, want %v (the plan kept the first bias?)", i, j, aux2[i+j*m], want)
			}
		}
	}
	if len(lt.plans) != 1 {
		t.Errorf("%d plans for one shape", len(lt.plans))
	}

	// The backward pass: dpre = (dY·B) · gelu'(aux), with the bias
	// gradient, the sum of dpre over its columns.
	dy, bgrad := rnd(m*n), make([]float32, m)
	bb := rnd(n * n) // a second product: dY (m×n) · W (n×n)
	dx := make([]float32, m*n)
	mm2 := &LtMatmul{TransA: OpN, TransB: OpN, M: m, N: n, K: n, Alpha: 1, A: ltAddr(dy), B: ltAddr(bb), C: ltAddr(dx), D: ltAddr(dx),
		LDA: m, LDB: n, LDC: m, Compute: Compute32F, Epilogue: EpilogueDGELUBGrad, Bias: ltAddr(bgrad), Aux: ltAddr(aux), AuxLD: m}
	if err := lt.Matmul(h, mm2); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < m; i++ {
		var sum float64
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < n; p++ {
				s += float64(dy[i+p*m]) * float64(bb[p+j*n])
			}
			want := s * dgeluRef(float64(aux[i+j*m]))
			sum += want
			if e := math.Abs(float64(dx[i+j*m]) - want); e > 1e-4 {
				t.Errorf("dgelu D[%d,%d] = %v, want %v", i, j, dx[i+j*m], want)
			}
		}
		if e := math.Abs(float64(bgrad[i]) - sum); e > 1e-4 {
			t.Errorf("bias gradient %d = %v, want %v", i, bgrad[i], sum)
		}
	}

	// Types the heuristic has no algorithm for are an error that says so.
	mm.AType, mm.BType = R16BF, R16BF
	if err := lt.Matmul(h, mm); err == nil || !strings.Contains(err.Error(), "no algorithm") {
		t.Errorf("bf16 operands on the fake: %v, want no algorithm", err)
	}
}
