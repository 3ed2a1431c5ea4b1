package cpu

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/rng"
)

// TestCastBF16 holds the vector F32↔BF16 conversions to backend.F32ToBF16
// and backend.BF16ToF32, bit for bit, on random values with ties, NaNs,
// infinities, subnormals and the largest finite values mixed in, for
// lengths around the block size and unaligned starts.
func TestCastBF16(t *testing.T) {
	r := rng.New(9)
	special := []uint32{0x7fc00000, 0xffc00001, 0x7f800001, 0x7f800000, 0xff800000, 0x00000001, 0x80400000,
		0x7f7fffff, 0xff7f8000, 0x3f808000, 0x3f818000, 0x3f807fff, 0x00008000, 0}
	src := make([]float32, 300)
	for i := range src {
		switch r.Intn(4) {
		case 0:
			src[i] = math.Float32frombits(special[r.Intn(len(special))])
		case 1:
			src[i] = math.Float32frombits(uint32(r.Intn(1 << 31)))
		default:
			src[i] = float32(r.Norm() * math.Exp(8*r.Norm()))
		}
	}
	defer func(f func([]uint16, []float32) int, g func([]float32, []uint16) int) {
		f32ToBF16Block, bf16ToF32Block = f, g
	}(f32ToBF16Block, bf16ToF32Block)
	for _, portable := range []bool{false, true} {
		if portable {
			f32ToBF16Block = func([]uint16, []float32) int { return 0 }
			bf16ToF32Block = func([]float32, []uint16) int { return 0 }
		}
		testCastBF16(t, r, src)
	}
}

func testCastBF16(t *testing.T, r *rng.RNG, src []float32) {
	for _, n := range []int{0, 1, 15, 16, 17, 33, 64, 255, 299} {
		off := r.Intn(len(src) - n + 1)
		s := src[off : off+n]
		got := make([]uint16, n+1)
		got[n] = 0xabcd
		f32ToBF16s(got, s)
		for i, v := range s {
			if want := backend.F32ToBF16(v); got[i] != want {
				t.Fatalf("n=%d: bf16(%#08x) = %#04x, want %#04x", n, math.Float32bits(v), got[i], want)
			}
		}
		if got[n] != 0xabcd {
			t.Fatalf("n=%d: wrote past the end", n)
		}
		wide := make([]float32, n)
		bf16ToF32s(wide, got[:n])
		for i, h := range got[:n] {
			if w := backend.BF16ToF32(h); math.Float32bits(wide[i]) != math.Float32bits(w) {
				t.Fatalf("n=%d: f32(%#04x) = %#08x, want %#08x", n, h, math.Float32bits(wide[i]), math.Float32bits(w))
			}
		}
	}
}

// TestCastFast checks castFast through Buffers with offsets, and that it
// declines other dtype pairs.
func TestCastFast(t *testing.T) {
	c := newCPU(2)
	r := rng.New(3)
	const n = 100
	f := c.Alloc(backend.F32, n+5).(*Buffer)
	h := c.Alloc(backend.BF16, n+7).(*Buffer)
	back := c.Alloc(backend.F32, n+2).(*Buffer)
	for i := range f.F32 {
		f.F32[i] = float32(r.Norm())
	}
	if !castFast(h, f, 7, 5, 0, n) || !castFast(back, h, 2, 7, 0, n) {
		t.Fatal("castFast declined F32↔BF16")
	}
	for i := 0; i < n; i++ {
		if want := backend.BF16ToF32(backend.F32ToBF16(f.F32[5+i])); back.F32[2+i] != want {
			t.Fatalf("element %d: %v, want %v", i, back.F32[2+i], want)
		}
	}
	if castFast(c.Alloc(backend.F16, n).(*Buffer), f, 0, 0, 0, n) {
		t.Fatal("castFast took F32→F16")
	}
}

// BenchmarkCastBF16 times the conversions on 1M values.
func BenchmarkCastBF16(b *testing.B) {
	const n = 1 << 20
	f := make([]float32, n)
	h := make([]uint16, n)
	r := rng.New(1)
	for i := range f {
		f[i] = float32(r.Norm())
	}
	b.Run("f32_to_bf16", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			f32ToBF16s(h, f)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
	b.Run("bf16_to_f32", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			bf16ToF32s(f, h)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "Gelem/s")
	})
}
