package tensor

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
)

var cpu1 = Device{Kind: "cpu", Index: 1}

// mustPanic runs fn and returns the *Error it panicked with; it fails the
// test if fn returns normally or panics with anything else.
func mustPanic(t *testing.T, what string, fn func()) (e *Error) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatalf("%s did not panic", what)
		}
		var ok bool
		if e, ok = r.(*Error); !ok {
			t.Fatalf("%s panicked with %T %v, want *Error", what, r, r)
		}
	}()
	fn()
	return nil
}

// wantErr requires Catch(fn) to return an error containing each of parts.
func wantErr(t *testing.T, what string, fn func(), parts ...string) {
	t.Helper()
	err := Catch(fn)
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	var te *Error
	if !errors.As(err, &te) {
		t.Fatalf("%s: error %v is a %T, not *Error", what, err, err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: error %q does not contain %q", what, err, p)
		}
	}
}

func allocated() int64 { return MemStats(CPU).Allocated }

func equal32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCreation(t *testing.T) {
	Step(func() {
		z := Zeros(CPU, 2, 3)
		if !z.Shape().Equal(Shape{2, 3}) || z.DType() != F32 || z.Device() != CPU || z.Numel() != 6 {
			t.Fatalf("Zeros: %v", z)
		}
		if !equal32(z.Float32s(), make([]float32, 6)) {
			t.Errorf("Zeros values %v", z.Float32s())
		}
		if v := Ones(CPU, 4).Float32s(); !equal32(v, []float32{1, 1, 1, 1}) {
			t.Errorf("Ones values %v", v)
		}
		f := Full(CPU, -2.5, 3, 1, 2)
		if !f.Shape().Equal(Shape{3, 1, 2}) || f.Dim(-1) != 2 || f.Dim(0) != 3 {
			t.Errorf("Full shape %v", f.Shape())
		}
		for _, v := range f.Float32s() {
			if v != -2.5 {
				t.Fatalf("Full values %v", f.Float32s())
			}
		}
		// A scalar has shape [] and one element.
		s := Full(CPU, 7)
		if len(s.Shape()) != 0 || s.Numel() != 1 || s.Item() != 7 {
			t.Errorf("scalar: %v item %v", s, s.Item())
		}
		data := []float32{1, -2, 3.5, 4, 5, 6}
		x := FromFloat32s(CPU, data, 3, 2)
		if !equal32(x.Float32s(), data) {
			t.Errorf("FromFloat32s round trip %v", x.Float32s())
		}
		data[0] = 100 // the tensor holds a copy
		if x.Float32s()[0] != 1 {
			t.Errorf("FromFloat32s aliases its input")
		}
		ids := FromInt32s(CPU, []int32{3, -1, 7}, 3)
		if ids.DType() != I32 || fmt.Sprint(ids.Int32s()) != "[3 -1 7]" {
			t.Errorf("FromInt32s: %v %v", ids, ids.Int32s())
		}
		if zl := ZerosLike(ids); zl.DType() != I32 || fmt.Sprint(zl.Int32s()) != "[0 0 0]" {
			t.Errorf("ZerosLike: %v %v", zl, zl.Int32s())
		}
		r1, r2 := Randn(CPU, NewRNG(5), 2, 100), Randn(CPU, NewRNG(5), 2, 100)
		if !equal32(r1.Float32s(), r2.Float32s()) {
			t.Errorf("Randn with one seed differs")
		}
		var sq float64
		for _, v := range r1.Float32s() {
			sq += float64(v) * float64(v)
		}
		if sq/100 < 1 || sq/100 > 9 { // std 2: variance 4
			t.Errorf("Randn(std 2) variance %v", sq/100)
		}

		e := mustPanic(t, "FromFloat32s with 5 values for [2 3]", func() { FromFloat32s(CPU, make([]float32, 5), 2, 3) })
		if e.Op != "from_float32s" || !strings.Contains(e.Error(), "5 values for shape [2 3]") {
			t.Errorf("FromFloat32s error: %v", e)
		}
		e = mustPanic(t, "FromInt32s with 2 values for [3]", func() { FromInt32s(CPU, []int32{1, 2}, 3) })
		if e.Op != "from_int32s" {
			t.Errorf("FromInt32s error: %v", e)
		}
		mustPanic(t, "Empty with a negative dimension", func() { Empty(CPU, F32, 2, -3) })
		mustPanic(t, "Item of two elements", func() { Ones(CPU, 2).Item() })
		mustPanic(t, "Int32s of an f32 tensor", func() { Ones(CPU, 2).Int32s() })
		mustPanic(t, "SetFloat32s with the wrong count", func() { Ones(CPU, 2).SetFloat32s([]float32{1}) })
		wantErr(t, "an unknown device", func() { Zeros(Device{Kind: "tpu"}, 2) }, "no backend registered")
	})
}

func TestReshapeRows(t *testing.T) {
	Step(func() {
		data := make([]float32, 24)
		for i := range data {
			data[i] = float32(i)
		}
		x := FromFloat32s(CPU, data, 2, 3, 4)
		for _, c := range []struct {
			in   []int
			want Shape
		}{
			{[]int{-1}, Shape{24}},
			{[]int{4, -1}, Shape{4, 6}},
			{[]int{-1, 3, 2}, Shape{4, 3, 2}},
			{[]int{2, -1, 3}, Shape{2, 4, 3}},
			{[]int{6, 4}, Shape{6, 4}},
			{[]int{1, 24, 1}, Shape{1, 24, 1}},
		} {
			v := x.Reshape(c.in...)
			if !v.Shape().Equal(c.want) {
				t.Errorf("Reshape(%v) gave %v, want %v", c.in, v.Shape(), c.want)
			}
			if !equal32(v.Float32s(), data) {
				t.Errorf("Reshape(%v) changed the data", c.in)
			}
		}
		for _, bad := range [][]int{{5, -1}, {-1, -1}, {25}, {7, 4}, {-2, -12}, {-1, -24}, {2, -3, -4}} {
			e := mustPanic(t, fmt.Sprintf("Reshape%v", bad), func() { x.Reshape(bad...) })
			if e.Op != "reshape" {
				t.Errorf("Reshape(%v) error %v", bad, e)
			}
		}
		// Views share storage: writing through a view changes the base.
		v := x.Reshape(6, 4)
		Fill(v.Rows(1, 2), -1)
		got := x.Float32s()
		for i := range got {
			want := float32(i)
			if i >= 4 && i < 8 {
				want = -1
			}
			if got[i] != want {
				t.Fatalf("after filling a view, base[%d] = %v, want %v", i, got[i], want)
			}
		}
		rows := x.Rows(1, 2)
		if !rows.Shape().Equal(Shape{1, 3, 4}) || !equal32(rows.Float32s(), data[12:]) {
			t.Errorf("Rows(1, 2): %v %v", rows.Shape(), rows.Float32s())
		}
		inner := x.Reshape(8, 3).Rows(2, 5)
		if !equal32(inner.Float32s(), got[6:15]) {
			t.Errorf("Rows(2, 5) of [8 3] = %v, want %v", inner.Float32s(), got[6:15])
		}
		// Rows of a view that starts part-way into the storage.
		nested := x.Rows(1, 2).Reshape(4, 3).Rows(1, 3)
		if !equal32(nested.Float32s(), got[15:21]) {
			t.Errorf("Rows of an offset view = %v, want %v", nested.Float32s(), got[15:21])
		}
		inner.SetFloat32s(make([]float32, 9))
		for i, v := range x.Float32s() {
			if (i >= 6 && i < 15) != (v == 0) && i != 0 {
				t.Fatalf("SetFloat32s through a view: base[%d] = %v", i, v)
			}
		}
		if e := x.Rows(0, 0); e.Numel() != 0 {
			t.Errorf("empty Rows has %d elements", e.Numel())
		}
		for _, r := range [][2]int{{-1, 1}, {1, 3}, {2, 1}} {
			mustPanic(t, fmt.Sprintf("Rows(%d, %d)", r[0], r[1]), func() { x.Rows(r[0], r[1]) })
		}
		mustPanic(t, "Rows of a scalar", func() { Full(CPU, 1).Rows(0, 1) })
		// Clone does not share storage.
		cl := x.Clone()
		Fill(x, 3)
		if cl.Float32s()[1] != 1 {
			t.Errorf("Clone shares storage with its source")
		}
	})
}

func TestTo(t *testing.T) {
	Step(func() {
		x := FromFloat32s(CPU, []float32{1, 2, 3, 4, 5}, 5)
		if x.To(CPU) != x {
			t.Errorf("To(cpu) of a cpu tensor is not the tensor itself")
		}
		before := MemStats(cpu1).Copied
		y := x.To(cpu1)
		if y.Device() != cpu1 || y == x || !y.Shape().Equal(x.Shape()) {
			t.Fatalf("To(cpu:1) = %v", y)
		}
		if d := MemStats(cpu1).Copied - before; d != 5*4 {
			t.Errorf("To(cpu:1) counted %d bytes copied onto cpu:1, want 20", d)
		}
		if !equal32(y.Float32s(), x.Float32s()) {
			t.Errorf("To(cpu:1) values %v", y.Float32s())
		}
		Fill(y, 0) // a copy, not a view
		if x.Float32s()[0] != 1 {
			t.Errorf("To(cpu:1) shares storage")
		}
		if back := y.To(CPU); back.Device() != CPU || back.Float32s()[4] != 0 {
			t.Errorf("To back to cpu: %v %v", back, back.Float32s())
		}
		ids := FromInt32s(CPU, []int32{4, -2}, 2).To(cpu1)
		if ids.DType() != I32 || fmt.Sprint(ids.Int32s()) != "[4 -2]" {
			t.Errorf("i32 To(cpu:1): %v %v", ids, ids.Int32s())
		}
		h := Cast(FromFloat32s(CPU, []float32{1.0 / 3, -7}, 2), BF16)
		h1 := h.To(cpu1)
		if h1.DType() != BF16 || !equal32(h1.Float32s(), h.Float32s()) {
			t.Errorf("bf16 To(cpu:1): %v %v vs %v", h1, h1.Float32s(), h.Float32s())
		}
		if !equal32(h.Float32s(), []float32{backend.BF16ToF32(backend.F32ToBF16(1.0 / 3)), -7}) {
			t.Errorf("bf16 values %v", h.Float32s())
		}
	})
}

func TestMismatchErrors(t *testing.T) {
	Step(func() {
		a := Ones(CPU, 2, 3)
		b := Ones(cpu1, 3, 4)
		wantErr(t, "matmul across devices", func() { MatMul(a, b) }, "matmul: tensors on cpu and cpu:1")
		wantErr(t, "add across devices", func() { Add(a, Ones(cpu1, 2, 3)) }, "add: tensors on cpu and cpu:1")
		wantErr(t, "linear across devices", func() { Linear(a, Ones(CPU, 3, 4), Ones(cpu1, 4)) }, "linear: tensors on cpu and cpu:1")
		wantErr(t, "embedding across devices", func() { Embedding(a, FromInt32s(cpu1, []int32{0}, 1)) }, "embedding: tensors on cpu and cpu:1")

		h := Cast(a, BF16)
		wantErr(t, "add f32 and bf16", func() { Add(a, h) }, "add: want one dtype, got f32 and bf16", "tensor([2 3] bf16 cpu)")
		wantErr(t, "add i32", func() { Add(FromInt32s(CPU, []int32{1}, 1), FromInt32s(CPU, []int32{1}, 1)) }, "add: want f32 or bf16, got i32")
		wantErr(t, "matmul bf16", func() { MatMul(h, Ones(CPU, 3, 2)) }, "matmul: want f32, got bf16")
		wantErr(t, "embedding with float ids", func() { Embedding(a, Ones(CPU, 4)) }, "embedding: want i32, got f32")
		wantErr(t, "cross entropy with float targets", func() { CrossEntropy(a, Ones(CPU, 2)) }, "cross_entropy: want i32, got f32")

		wantErr(t, "add shapes", func() { Add(a, Ones(CPU, 3, 2)) }, "add: shapes [2 3] and [3 2] differ")
		wantErr(t, "matmul shapes", func() { MatMul(a, Ones(CPU, 2, 3)) }, "matmul: inner dimensions 3 and 2 differ")
		wantErr(t, "attention heads", func() { Attention(Ones(CPU, 1, 2, 9), 2) }, "3 channels do not split into 2 heads")
	})
}

func TestStepFrees(t *testing.T) {
	start := allocated()
	var inside *Tensor
	var during int64
	Step(func() {
		a := Randn(CPU, NewRNG(1), 1, 100)
		b := Add(a, a)
		inside = b.Reshape(10, 10) // a view: freed too, but owns nothing
		during = allocated()
	})
	if during != start+2*400 {
		t.Errorf("inside the step %d bytes were allocated, want %d", during-start, 800)
	}
	if got := allocated(); got != start {
		t.Errorf("after the step %d bytes are still allocated", got-start)
	}
	e := mustPanic(t, "use after the step", func() { inside.Float32s() })
	if !strings.Contains(e.Error(), "freed") {
		t.Errorf("use-after-free error %q does not mention freed", e)
	}
	Step(func() { // inside a step: the output allocated before the check is freed too
		wantErr(t, "op on a freed tensor", func() { Add(inside, inside) }, "freed")
	})

	// A step that panics still frees, and leaves no scope behind.
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v", r)
			}
		}()
		Step(func() {
			Ones(CPU, 1000)
			panic("boom")
		})
	}()
	if got := allocated(); got != start {
		t.Errorf("after a panicking step %d bytes are still allocated", got-start)
	}
	if len(defaultProgram.scopes) != 0 {
		t.Errorf("%d scopes left open", len(defaultProgram.scopes))
	}

	// Storage comes back to the pool: the next step reuses it.
	before := MemStats(CPU).Reserved
	for i := 0; i < 3; i++ {
		Step(func() { Add(Ones(CPU, 100), Ones(CPU, 100)) })
	}
	if grown := MemStats(CPU).Reserved - before; grown > 3*400 {
		t.Errorf("three identical steps grew the pool by %d bytes", grown)
	}
}

func TestStepBackwardFrees(t *testing.T) {
	// Leaves made inside a step, their gradients, and the graph are all
	// returned when the step ends.
	start := allocated()
	Step(func() {
		x := Randn(CPU, NewRNG(2), 1, 4, 8).SetRequiresGrad(true)
		w := Randn(CPU, NewRNG(3), 1, 8, 3).SetRequiresGrad(true)
		Mean(GELU(MatMul(x, w))).Backward()
		if x.Grad == nil || w.Grad == nil {
			t.Fatal("no gradients")
		}
	})
	if got := allocated(); got != start {
		t.Errorf("after a step with Backward %d bytes are still allocated", got-start)
	}
}

func TestPersist(t *testing.T) {
	start := allocated()
	var kept, view *Tensor
	Step(func() {
		Persist(func() {
			kept = Full(CPU, 4, 3)
			view = kept.Reshape(1, 3)
		})
		Ones(CPU, 7)
	})
	if got := allocated(); got != start+12 {
		t.Errorf("after the step %d bytes are allocated, want the 12 of the persistent tensor", got-start)
	}
	if !equal32(kept.Float32s(), []float32{4, 4, 4}) || !equal32(view.Float32s(), []float32{4, 4, 4}) {
		t.Errorf("persistent tensor reads %v / %v", kept.Float32s(), view.Float32s())
	}
	// A view of a persistent tensor made inside a step is freed with the
	// step, but the storage stays with its owner.
	var tmp *Tensor
	Step(func() { tmp = kept.Reshape(3, 1) })
	mustPanic(t, "scoped view after its step", func() { tmp.Float32s() })
	if got := allocated(); got != start+12 || kept.Float32s()[2] != 4 {
		t.Errorf("a scoped view freed its persistent base (%d bytes held)", got-start)
	}
	kept.Free()
	kept.Free() // idempotent
	if got := allocated(); got != start {
		t.Errorf("after Free %d bytes are still allocated", got-start)
	}
	mustPanic(t, "use after Free", func() { kept.Float32s() })
}

func TestNestedStep(t *testing.T) {
	start := allocated()
	Step(func() {
		a := Ones(CPU, 10)
		var inner, innerView *Tensor
		Step(func() {
			inner = Add(a, a)
			innerView = a.Reshape(2, 5)
			if got := allocated(); got != start+80 {
				t.Errorf("inside the inner step %d bytes, want 80", got-start)
			}
		})
		if got := allocated(); got != start+40 {
			t.Errorf("after the inner step %d bytes, want 40", got-start)
		}
		mustPanic(t, "inner tensor after the inner step", func() { inner.Float32s() })
		mustPanic(t, "inner view after the inner step", func() { innerView.Float32s() })
		if v := a.Float32s(); v[0] != 1 {
			t.Errorf("outer tensor reads %v", v)
		}
	})
	if got := allocated(); got != start {
		t.Errorf("after both steps %d bytes are still allocated", got-start)
	}
}

func TestNoGrad(t *testing.T) {
	Step(func() {
		x := Ones(CPU, 3).SetRequiresGrad(true)
		if !x.RequiresGrad() || !GradEnabled() {
			t.Fatal("gradients off to begin with")
		}
		if y := Mul(x, x); !y.RequiresGrad() {
			t.Errorf("Mul of a leaf that requires grad does not")
		}
		NoGrad(func() {
			if GradEnabled() {
				t.Error("GradEnabled inside NoGrad")
			}
			y := Mul(x, x)
			if y.RequiresGrad() {
				t.Error("an op inside NoGrad requires grad")
			}
			NoGrad(func() {})
			if GradEnabled() {
				t.Error("a nested NoGrad turned gradients back on")
			}
			if z := Scale(x.Reshape(1, 3), 2); z.RequiresGrad() {
				t.Error("reshape/scale inside NoGrad require grad")
			}
			wantErr(t, "Backward of a NoGrad result", func() { Sum(y).Backward() }, "does not require grad")
		})
		if !GradEnabled() {
			t.Error("NoGrad did not restore gradients")
		}
		if x.Detach().RequiresGrad() {
			t.Error("Detach requires grad")
		}
		if z := Add(Ones(CPU, 3), Ones(CPU, 3)); z.RequiresGrad() {
			t.Error("an op on constants requires grad")
		}
		y := Scale(x, 2)
		mustPanic(t, "SetRequiresGrad on a non-leaf", func() { y.SetRequiresGrad(false) })
	})
}

func TestGradAccumulation(t *testing.T) {
	c := []float32{1, -2, 3.5, 0.25}
	x := FromFloat32s(CPU, []float32{0.5, 1, -1, 2}, 4).SetRequiresGrad(true) // persistent leaf
	defer x.Free()
	start := allocated()
	pass := func() {
		Step(func() { Sum(Mul(x, FromFloat32s(CPU, c, 4))).Backward() })
	}
	pass()
	if x.Grad == nil || !equal32(x.Grad.Float32s(), c) {
		t.Fatalf("grad after one pass %v, want %v", x.Grad, c)
	}
	if got := allocated(); got != start+16 {
		t.Errorf("after one pass %d bytes are allocated, want the 16 of the gradient", got-start)
	}
	g := x.Grad
	pass()
	if x.Grad != g {
		t.Errorf("the second pass replaced the gradient tensor instead of adding into it")
	}
	want := make([]float32, len(c))
	for i := range c {
		want[i] = 2 * c[i]
	}
	if !equal32(x.Grad.Float32s(), want) {
		t.Errorf("grad after two passes %v, want %v", x.Grad.Float32s(), want)
	}
	ZeroGradInPlace(x)
	if x.Grad != g || !equal32(x.Grad.Float32s(), make([]float32, 4)) {
		t.Errorf("ZeroGradInPlace: %v", x.Grad.Float32s())
	}
	ZeroGrad(x)
	if x.Grad != nil {
		t.Errorf("ZeroGrad left a gradient")
	}
	if got := allocated(); got != start {
		t.Errorf("ZeroGrad did not free the gradient (%d bytes held)", got-start)
	}
	pass()
	if !equal32(x.Grad.Float32s(), c) {
		t.Errorf("grad after ZeroGrad and a pass %v, want %v", x.Grad.Float32s(), c)
	}
	ZeroGrad(x)

	// One tensor used twice in a graph gets both contributions.
	Step(func() {
		y := Add(Scale(x, 3), Mul(x, x))
		Sum(y).Backward()
	})
	xv := x.Float32s()
	for i, g := range x.Grad.Float32s() {
		if w := 3 + 2*xv[i]; g != w {
			t.Errorf("d/dx sum(3x + x²)[%d] = %v, want %v", i, g, w)
		}
	}
	ZeroGrad(x)
}

func TestCastGradient(t *testing.T) {
	Step(func() {
		x := FromFloat32s(CPU, []float32{1.0 / 3, 1e5, -2}, 3).SetRequiresGrad(true)
		h := Cast(x, F16)
		if h.DType() != F16 || !h.RequiresGrad() {
			t.Fatalf("Cast to f16: %v", h)
		}
		if Cast(x, F32) != x {
			t.Errorf("Cast to the same dtype is not the identity")
		}
		y := Cast(h, F32)
		want := []float32{backend.F16ToF32(backend.F32ToF16(1.0 / 3)), float32(posInf()), -2}
		if !equal32(y.Float32s(), want) {
			t.Errorf("f32->f16->f32 = %v, want %v", y.Float32s(), want)
		}
		Sum(Scale(y, 2)).Backward()
		if !equal32(x.Grad.Float32s(), []float32{2, 2, 2}) {
			t.Errorf("gradient through casts %v", x.Grad.Float32s())
		}
	})
}

func posInf() float64 { return 1 / zero() }
func zero() float64   { return 0 }

func TestBackwardErrors(t *testing.T) {
	Step(func() {
		x := Ones(CPU, 2, 3).SetRequiresGrad(true)
		y := Scale(x, 2)
		e := mustPanic(t, "Backward of a [2 3] tensor", func() { y.Backward() })
		if e.Op != "backward" || !strings.Contains(e.Error(), "one-element") {
			t.Errorf("error %v", e)
		}
		wantErr(t, "BackwardWith a wrong-shaped seed", func() { y.BackwardWith(Ones(CPU, 3, 2)) }, "shapes [2 3] and [3 2] differ")
		// BackwardWith seeds a non-scalar output.
		y.BackwardWith(FromFloat32s(CPU, []float32{1, 2, 3, 4, 5, 6}, 2, 3))
		if !equal32(x.Grad.Float32s(), []float32{2, 4, 6, 8, 10, 12}) {
			t.Errorf("BackwardWith grad %v", x.Grad.Float32s())
		}
	})
}

func TestCatch(t *testing.T) {
	if err := Catch(func() {}); err != nil {
		t.Errorf("Catch of a clean run = %v", err)
	}
	err := Catch(func() { panic(&Error{Op: "op", Msg: "bad"}) })
	if err == nil || err.Error() != "op: bad" {
		t.Errorf("Catch = %v", err)
	}
	for _, p := range []any{"plain", errors.New("an error"), 42} {
		func() {
			defer func() {
				if r := recover(); r != p {
					t.Errorf("Catch swallowed or changed a %T panic: recovered %v", p, r)
				}
			}()
			Catch(func() { panic(p) })
			t.Errorf("Catch returned after a %T panic", p)
		}()
	}
}

// TestUploadAsyncOnCPU: where the backend has no asynchronous copy, the
// upload is done before UploadAsync returns.
func TestUploadAsyncOnCPU(t *testing.T) {
	b, free, err := PinnedAlloc(CPU, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer free()
	copy(b, backend.AsBytes([]float32{4, 5}))
	x := Zeros(CPU, 2)
	if err := x.UploadAsync(b).Wait(); err != nil {
		t.Fatal(err)
	}
	if got := x.Float32s(); got[0] != 4 || got[1] != 5 {
		t.Errorf("got %v", got)
	}
	wantErr(t, "wrong size", func() { x.UploadAsync(b[:4]) }, "4 bytes for 2 elements")
}
