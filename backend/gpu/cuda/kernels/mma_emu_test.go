package kernels_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
)

// probeSource is testdata/mma_probe.cu: one warp multiplying a 16x16 by a
// 16x8 tile through cp.async, ldmatrix (plain and transposed) and mma.sync.
func probeSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/mma_probe.cu")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// randF32 is emu.RandF32 scaled by s.
func randF32(rng *rand.Rand, n int, s float32) []float32 {
	v := emu.RandF32(rng, n)
	for i := range v {
		v[i] *= s
	}
	return v
}

// runProbe builds src and runs fleet_probe_mma_<bf16|f16> on random tiles,
// returning D and the float64 reference from the tiles as rounded.
func runProbe(t *testing.T, src string, bf16 bool, seed uint64) (got, want []float64, err error) {
	t.Helper()
	m, err := emu.BuildSource("mma_probe.cu", src)
	if errors.Is(err, emu.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		return nil, nil, err
	}
	r := newRNG(seed)
	enc, dec := backend.F32ToBF16, backend.BF16ToF32
	name := "fleet_probe_mma_bf16"
	if !bf16 {
		enc, dec, name = backend.F32ToF16, backend.F16ToF32, "fleet_probe_mma_f16"
	}
	a, b := make([]uint16, 16*16), make([]uint16, 16*8)
	for i := range a {
		a[i] = enc(float32(r.NormFloat64()))
	}
	for i := range b {
		b[i] = enc(float32(r.NormFloat64()))
	}
	c := randF32(r, 16*8, 1)
	d := emu.Poison(emu.F32, 16*8)
	if err := m.Launch(name, emu.Dim(1), emu.Dim(32), 0, d, emu.NewU16(a), emu.NewU16(b), emu.NewF32(c)); err != nil {
		return nil, nil, err
	}
	for i := 0; i < 16; i++ {
		for j := 0; j < 8; j++ {
			s := float64(c[i*8+j])
			for k := 0; k < 16; k++ {
				s += float64(dec(a[i*16+k])) * float64(dec(b[k*8+j]))
			}
			want = append(want, s)
			got = append(got, float64(d.F32()[i*8+j]))
		}
	}
	return got, want, nil
}

// closeProbe is the error of got against want: the products of 16-bit
// values are exact in float, so only the f32 sums round, 16 terms each.
func closeProbe(got, want []float64) error {
	for i := range want {
		if d := math.Abs(got[i] - want[i]); !(d <= 1e-5*(1+math.Abs(want[i]))) {
			return fmt.Errorf("D[%d][%d] = %v, want %v", i/8, i%8, got[i], want[i])
		}
	}
	return nil
}

// TestWarpMatrixPrimitives runs the probe in the emulator, bf16 and f16:
// the emulated cp.async, ldmatrix and mma.sync, with the PTX ISA's
// fragment layouts, must multiply the tiles.
func TestWarpMatrixPrimitives(t *testing.T) {
	src := probeSource(t)
	for _, bf16 := range []bool{true, false} {
		for seed := uint64(1); seed <= 3; seed++ {
			got, want, err := runProbe(t, src, bf16, seed)
			if err != nil {
				t.Fatal(err)
			}
			if err := closeProbe(got, want); err != nil {
				t.Fatalf("bf16=%v seed %d: %v", bf16, seed, err)
			}
		}
	}
}

// TestWarpMatrixMutants breaks the probe the ways a kernel gets fragments
// wrong; each must come out wrong in emulation.
func TestWarpMatrixMutants(t *testing.T) {
	src := probeSource(t)
	for _, mu := range []struct{ name, from, to string }{
		{"swap two A fragment registers", "fleet_mma_bf16(dd, fa, bb, cc);", "unsigned fs[4] = {fa[0], fa[2], fa[1], fa[3]};\n\t\tfleet_mma_bf16(dd, fs, bb, cc);"},
		{"swap the B fragment registers", "unsigned bb[2] = {fb[0], fb[1]};", "unsigned bb[2] = {fb[1], fb[0]};"},
		{"shift an ldmatrix row address", "fleet_ldmatrix_x4(fa, sa + ((m & 1) * 8 + r) * 16", "fleet_ldmatrix_x4(fa, sa + ((m & 1) * 8 + (r + 1) % 8) * 16"},
		{"load B without .trans", "fleet_ldmatrix_x4_trans(fb,", "fleet_ldmatrix_x4(fb,"},
		{"drop the cp.async wait", "fleet_cp_async_wait<0>();", ""},
	} {
		if !strings.Contains(src, mu.from) {
			t.Fatalf("%s: the probe has no %q", mu.name, mu.from)
		}
		got, want, err := runProbe(t, strings.Replace(src, mu.from, mu.to, 1), true, 1)
		if err == nil {
			err = closeProbe(got, want)
		}
		if err == nil {
			t.Errorf("%s: the probe still multiplies the tiles", mu.name)
			continue
		}
		t.Logf("%s: caught: %v", mu.name, err)
	}
}
