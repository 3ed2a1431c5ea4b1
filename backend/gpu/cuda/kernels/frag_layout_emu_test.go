package kernels_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
)

// The fragment layouts of mma.sync.m16n8k16 (bf16 and f16 operands, f32
// accumulators) and of ldmatrix, transcribed on their own from the
// figures of NVIDIA's PTX ISA ("Matrix Fragments for mma.m16n8k16 with
// floating point type": the figures for A, for B and for C and D; and
// "Warp-level matrix load instruction: ldmatrix": the fragment of an 8x8
// matrix), cell by cell: the cell in row r, column c of a matrix names the
// lane T that holds it and which of that lane's elements it is. A lane's
// elements fill its 32-bit registers in order, two 16-bit elements to a
// register, the lower-numbered in the low half: a0 and a1 are register 0,
// a2 and a3 register 1, and so on; C's and D's elements are a register
// each. mma.cuh's emulation is held to these tables, not to its own
// comments, so that a misreading shared by the emulator and a kernel
// fails here.
var (
	fragA = []string{ // A: 16 rows x 16 columns (k)
		"  T0:a0   T0:a1   T1:a0   T1:a1   T2:a0   T2:a1   T3:a0   T3:a1   T0:a4   T0:a5   T1:a4   T1:a5   T2:a4   T2:a5   T3:a4   T3:a5",
		"  T4:a0   T4:a1   T5:a0   T5:a1   T6:a0   T6:a1   T7:a0   T7:a1   T4:a4   T4:a5   T5:a4   T5:a5   T6:a4   T6:a5   T7:a4   T7:a5",
		"  T8:a0   T8:a1   T9:a0   T9:a1  T10:a0  T10:a1  T11:a0  T11:a1   T8:a4   T8:a5   T9:a4   T9:a5  T10:a4  T10:a5  T11:a4  T11:a5",
		" T12:a0  T12:a1  T13:a0  T13:a1  T14:a0  T14:a1  T15:a0  T15:a1  T12:a4  T12:a5  T13:a4  T13:a5  T14:a4  T14:a5  T15:a4  T15:a5",
		" T16:a0  T16:a1  T17:a0  T17:a1  T18:a0  T18:a1  T19:a0  T19:a1  T16:a4  T16:a5  T17:a4  T17:a5  T18:a4  T18:a5  T19:a4  T19:a5",
		" T20:a0  T20:a1  T21:a0  T21:a1  T22:a0  T22:a1  T23:a0  T23:a1  T20:a4  T20:a5  T21:a4  T21:a5  T22:a4  T22:a5  T23:a4  T23:a5",
		" T24:a0  T24:a1  T25:a0  T25:a1  T26:a0  T26:a1  T27:a0  T27:a1  T24:a4  T24:a5  T25:a4  T25:a5  T26:a4  T26:a5  T27:a4  T27:a5",
		" T28:a0  T28:a1  T29:a0  T29:a1  T30:a0  T30:a1  T31:a0  T31:a1  T28:a4  T28:a5  T29:a4  T29:a5  T30:a4  T30:a5  T31:a4  T31:a5",
		"  T0:a2   T0:a3   T1:a2   T1:a3   T2:a2   T2:a3   T3:a2   T3:a3   T0:a6   T0:a7   T1:a6   T1:a7   T2:a6   T2:a7   T3:a6   T3:a7",
		"  T4:a2   T4:a3   T5:a2   T5:a3   T6:a2   T6:a3   T7:a2   T7:a3   T4:a6   T4:a7   T5:a6   T5:a7   T6:a6   T6:a7   T7:a6   T7:a7",
		"  T8:a2   T8:a3   T9:a2   T9:a3  T10:a2  T10:a3  T11:a2  T11:a3   T8:a6   T8:a7   T9:a6   T9:a7  T10:a6  T10:a7  T11:a6  T11:a7",
		" T12:a2  T12:a3  T13:a2  T13:a3  T14:a2  T14:a3  T15:a2  T15:a3  T12:a6  T12:a7  T13:a6  T13:a7  T14:a6  T14:a7  T15:a6  T15:a7",
		" T16:a2  T16:a3  T17:a2  T17:a3  T18:a2  T18:a3  T19:a2  T19:a3  T16:a6  T16:a7  T17:a6  T17:a7  T18:a6  T18:a7  T19:a6  T19:a7",
		" T20:a2  T20:a3  T21:a2  T21:a3  T22:a2  T22:a3  T23:a2  T23:a3  T20:a6  T20:a7  T21:a6  T21:a7  T22:a6  T22:a7  T23:a6  T23:a7",
		" T24:a2  T24:a3  T25:a2  T25:a3  T26:a2  T26:a3  T27:a2  T27:a3  T24:a6  T24:a7  T25:a6  T25:a7  T26:a6  T26:a7  T27:a6  T27:a7",
		" T28:a2  T28:a3  T29:a2  T29:a3  T30:a2  T30:a3  T31:a2  T31:a3  T28:a6  T28:a7  T29:a6  T29:a7  T30:a6  T30:a7  T31:a6  T31:a7",
	}
	fragB = []string{ // B: 16 rows (k) x 8 columns (n)
		"  T0:b0   T4:b0   T8:b0  T12:b0  T16:b0  T20:b0  T24:b0  T28:b0",
		"  T0:b1   T4:b1   T8:b1  T12:b1  T16:b1  T20:b1  T24:b1  T28:b1",
		"  T1:b0   T5:b0   T9:b0  T13:b0  T17:b0  T21:b0  T25:b0  T29:b0",
		"  T1:b1   T5:b1   T9:b1  T13:b1  T17:b1  T21:b1  T25:b1  T29:b1",
		"  T2:b0   T6:b0  T10:b0  T14:b0  T18:b0  T22:b0  T26:b0  T30:b0",
		"  T2:b1   T6:b1  T10:b1  T14:b1  T18:b1  T22:b1  T26:b1  T30:b1",
		"  T3:b0   T7:b0  T11:b0  T15:b0  T19:b0  T23:b0  T27:b0  T31:b0",
		"  T3:b1   T7:b1  T11:b1  T15:b1  T19:b1  T23:b1  T27:b1  T31:b1",
		"  T0:b2   T4:b2   T8:b2  T12:b2  T16:b2  T20:b2  T24:b2  T28:b2",
		"  T0:b3   T4:b3   T8:b3  T12:b3  T16:b3  T20:b3  T24:b3  T28:b3",
		"  T1:b2   T5:b2   T9:b2  T13:b2  T17:b2  T21:b2  T25:b2  T29:b2",
		"  T1:b3   T5:b3   T9:b3  T13:b3  T17:b3  T21:b3  T25:b3  T29:b3",
		"  T2:b2   T6:b2  T10:b2  T14:b2  T18:b2  T22:b2  T26:b2  T30:b2",
		"  T2:b3   T6:b3  T10:b3  T14:b3  T18:b3  T22:b3  T26:b3  T30:b3",
		"  T3:b2   T7:b2  T11:b2  T15:b2  T19:b2  T23:b2  T27:b2  T31:b2",
		"  T3:b3   T7:b3  T11:b3  T15:b3  T19:b3  T23:b3  T27:b3  T31:b3",
	}
	fragCD = []string{ // C and D: 16 rows x 8 columns
		"  T0:c0   T0:c1   T1:c0   T1:c1   T2:c0   T2:c1   T3:c0   T3:c1",
		"  T4:c0   T4:c1   T5:c0   T5:c1   T6:c0   T6:c1   T7:c0   T7:c1",
		"  T8:c0   T8:c1   T9:c0   T9:c1  T10:c0  T10:c1  T11:c0  T11:c1",
		" T12:c0  T12:c1  T13:c0  T13:c1  T14:c0  T14:c1  T15:c0  T15:c1",
		" T16:c0  T16:c1  T17:c0  T17:c1  T18:c0  T18:c1  T19:c0  T19:c1",
		" T20:c0  T20:c1  T21:c0  T21:c1  T22:c0  T22:c1  T23:c0  T23:c1",
		" T24:c0  T24:c1  T25:c0  T25:c1  T26:c0  T26:c1  T27:c0  T27:c1",
		" T28:c0  T28:c1  T29:c0  T29:c1  T30:c0  T30:c1  T31:c0  T31:c1",
		"  T0:c2   T0:c3   T1:c2   T1:c3   T2:c2   T2:c3   T3:c2   T3:c3",
		"  T4:c2   T4:c3   T5:c2   T5:c3   T6:c2   T6:c3   T7:c2   T7:c3",
		"  T8:c2   T8:c3   T9:c2   T9:c3  T10:c2  T10:c3  T11:c2  T11:c3",
		" T12:c2  T12:c3  T13:c2  T13:c3  T14:c2  T14:c3  T15:c2  T15:c3",
		" T16:c2  T16:c3  T17:c2  T17:c3  T18:c2  T18:c3  T19:c2  T19:c3",
		" T20:c2  T20:c3  T21:c2  T21:c3  T22:c2  T22:c3  T23:c2  T23:c3",
		" T24:c2  T24:c3  T25:c2  T25:c3  T26:c2  T26:c3  T27:c2  T27:c3",
		" T28:c2  T28:c3  T29:c2  T29:c3  T30:c2  T30:c3  T31:c2  T31:c3",
	}
	fragLdmatrix = []string{ // one 8x8 b16 matrix, as each of ldmatrix's registers holds it
		"  T0:0   T0:1   T1:0   T1:1   T2:0   T2:1   T3:0   T3:1",
		"  T4:0   T4:1   T5:0   T5:1   T6:0   T6:1   T7:0   T7:1",
		"  T8:0   T8:1   T9:0   T9:1  T10:0  T10:1  T11:0  T11:1",
		" T12:0  T12:1  T13:0  T13:1  T14:0  T14:1  T15:0  T15:1",
		" T16:0  T16:1  T17:0  T17:1  T18:0  T18:1  T19:0  T19:1",
		" T20:0  T20:1  T21:0  T21:1  T22:0  T22:1  T23:0  T23:1",
		" T24:0  T24:1  T25:0  T25:1  T26:0  T26:1  T27:0  T27:1",
		" T28:0  T28:1  T29:0  T29:1  T30:0  T30:1  T31:0  T31:1",
	}
)

// cell is one table entry: lane and element.
type cell struct{ lane, elem int }

// parseFrag reads a table: each row's cells, "T<lane>:<letter?><elem>";
// it checks that every lane holds elems elements, each once.
func parseFrag(t *testing.T, name string, rows []string, elems int) [][]cell {
	t.Helper()
	seen := map[cell]bool{}
	var out [][]cell
	for r, line := range rows {
		var row []cell
		for _, f := range strings.Fields(line) {
			var c cell
			var tail string
			if _, err := fmt.Sscanf(f, "T%d:%s", &c.lane, &tail); err != nil {
				t.Fatalf("%s row %d: cell %q: %v", name, r, f, err)
			}
			if _, err := fmt.Sscanf(strings.TrimLeft(tail, "abc"), "%d", &c.elem); err != nil {
				t.Fatalf("%s row %d: cell %q: %v", name, r, f, err)
			}
			if c.lane < 0 || c.lane > 31 || c.elem < 0 || c.elem >= elems || seen[c] {
				t.Fatalf("%s row %d: cell %q out of range or repeated", name, r, f)
			}
			seen[c] = true
			row = append(row, c)
		}
		out = append(out, row)
	}
	if len(seen) != 32*elems {
		t.Fatalf("%s: %d cells, want %d", name, len(seen), 32*elems)
	}
	return out
}

// TestFragmentLayoutTable pins the emulated mma.sync and ldmatrix to the
// PTX ISA's figures above. mma: lane L's A element i holds the bf16 number
// 1 + 8L + i (exact), B is a selector placed by fragB's table (B[k][n] =
// 1 where k = n + 8s), so D = A·B puts A's column n + 8s in D's column n,
// and each lane's D registers must hold, by fragCD's table, the numbers
// fragA's table puts there. ldmatrix: four 8x8 matrices of distinct
// numbers; each lane's register j must hold, by fragLdmatrix's table, the
// elements of matrix j (transposed for .trans).
func TestFragmentLayoutTable(t *testing.T) {
	A, B, CD, L := parseFrag(t, "A", fragA, 8), parseFrag(t, "B", fragB, 4), parseFrag(t, "C/D", fragCD, 4), parseFrag(t, "ldmatrix", fragLdmatrix, 2)
	src, err := os.ReadFile("testdata/frag_probe.cu")
	if err != nil {
		t.Fatal(err)
	}
	m, err := emu.BuildSource("frag_probe.cu", string(src))
	if errors.Is(err, emu.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	pack := func(regs []uint32, lane, elem int, v uint16) {
		r := &regs[lane*(len(regs)/32)+elem/2]
		if elem%2 == 0 {
			*r = *r&0xffff0000 | uint32(v)
		} else {
			*r = *r&0xffff | uint32(v)<<16
		}
	}
	a := make([]uint32, 32*4)
	for lane := range 32 {
		for i := range 8 {
			pack(a, lane, i, backend.F32ToBF16(float32(1+8*lane+i)))
		}
	}
	for s := range 2 {
		b := make([]uint32, 32*2)
		for k, row := range B {
			for n, c := range row {
				v := float32(0)
				if k == n+8*s {
					v = 1
				}
				pack(b, c.lane, c.elem, backend.F32ToBF16(v))
			}
		}
		d := emu.Poison(emu.F32, 32*4)
		if err := m.Launch("fleet_probe_frag_mma", emu.Dim(1), emu.Dim(32), 0, d, emu.NewU32(a), emu.NewU32(b)); err != nil {
			t.Fatal(err)
		}
		got := d.F32()
		for r, row := range CD {
			for n, c := range row {
				ac := A[r][n+8*s]
				if want := float32(1 + 8*ac.lane + ac.elem); got[4*c.lane+c.elem] != want {
					t.Errorf("mma, A columns %d-%d: lane %d's D element %d (D[%d][%d]) is %v, want A[%d][%d] = lane %d's a%d = %v",
						8*s, 8*s+7, c.lane, c.elem, r, n, got[4*c.lane+c.elem], r, n+8*s, ac.lane, ac.elem, want)
				}
			}
		}
	}
	tile := make([]uint16, 4*64)
	for i := range tile {
		tile[i] = uint16(1 + i)
	}
	for trans := range 2 {
		out := emu.Poison(emu.U32, 32*4)
		if err := m.Launch("fleet_probe_frag_ldmatrix", emu.Dim(1), emu.Dim(32), 0, out, emu.NewU16(tile), trans); err != nil {
			t.Fatal(err)
		}
		got := out.U32()
		for j := range 4 {
			for r, row := range L {
				for col, c := range row {
					want := tile[64*j+8*r+col] // the element the table puts in this cell
					if trans == 1 {
						want = tile[64*j+8*col+r]
					}
					reg := got[4*c.lane+j]
					half := uint16(reg >> (16 * c.elem))
					if half != want {
						t.Errorf("ldmatrix (trans %d): lane %d's register %d, element %d is %d, want matrix %d's (%d, %d) = %d",
							trans, c.lane, j, c.elem, half, j, r, col, want)
					}
				}
			}
		}
	}
}
