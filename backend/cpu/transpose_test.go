package cpu

import (
	"slices"
	"testing"

	"github.com/fleetml/fleet/internal/rng"
)

// TestPackBTransposed: packing a transposed B through the SIMD 8×8
// transpose gives exactly the strips the scalar loop gives, for strips
// whose width and depth are not multiples of 8, at offsets inside B.
func TestPackBTransposed(t *testing.T) {
	if transpose8 == nil {
		t.Skip("no SIMD transpose on this CPU")
	}
	r := rng.New(4)
	for _, sh := range [][4]int{{32, 256, 0, 0}, {37, 203, 3, 5}, {8, 8, 0, 0}, {13, 9, 1, 2}, {100, 77, 32, 11}} {
		nr, kr, j0, k0 := sh[0], sh[1], sh[2], sh[3]
		ld := k0 + kr + 3
		b := randF32(r, (j0+nr)*ld, 1)
		B := mat{b, ld, true}
		NR := 32
		strips := (nr + NR - 1) / NR
		simd := make([]float32, strips*NR*kr)
		scalar := make([]float32, strips*NR*kr)
		for i := range simd {
			simd[i], scalar[i] = -7, -7
		}
		packB(simd, B, k0, j0, kr, nr, NR)
		saved := transpose8
		transpose8 = nil
		packB(scalar, B, k0, j0, kr, nr, NR)
		transpose8 = saved
		if !slices.Equal(simd, scalar) {
			t.Fatalf("nr %d kr %d at (%d, %d): the SIMD transpose packs differently", nr, kr, j0, k0)
		}
	}
}

// BenchmarkPackBTransposed packs a transposed 1536×384 B (the 6L/384
// MLP's weight) in kc×32 strips, with the SIMD transpose and with the
// scalar loop, alternately in one run.
func BenchmarkPackBTransposed(b *testing.B) {
	r := rng.New(5)
	const n, k = 1536, 384
	B := mat{randF32(r, n*k, 1), k, true}
	dst := make([]float32, 32*gemmKC)
	saved := transpose8
	defer func() { transpose8 = saved }()
	for _, simd := range []bool{true, false} {
		name := "scalar"
		if simd {
			name = "simd"
		}
		b.Run(name, func(b *testing.B) {
			if simd && saved == nil {
				b.Skip("no SIMD transpose on this CPU")
			}
			transpose8 = nil
			if simd {
				transpose8 = saved
			}
			b.SetBytes(4 * n * k)
			for b.Loop() {
				for k0 := 0; k0 < k; k0 += gemmKC {
					kr := min(gemmKC, k-k0)
					for j0 := 0; j0 < n; j0 += 32 {
						packB(dst, B, k0, j0, kr, 32, 32)
					}
				}
			}
		})
	}
}
