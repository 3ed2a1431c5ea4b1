package kernels

import (
	"testing"

	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

// TestEveryKernelHasAFLOPsFormula holds every kernel of the embedded
// sources to a FLOPs formula, or to the list of kernels that do none, so
// that a new kernel cannot leave the simulated GPU pricing it at zero
// work by accident.
func TestEveryKernelHasAFLOPsFormula(t *testing.T) {
	n := 0
	for _, f := range cudakernels.Files() {
		sigs, err := cudakernels.ParseSignatures(f.Source)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sigs {
			n++
			mover := MovesData(s.Name)
			fl := FLOPs(s.Name, func(string) float64 { return 8 })
			switch {
			case mover && fl != 0:
				t.Errorf("%s moves data but has %g FLOPs", s.Name, fl)
			case !mover && fl <= 0:
				t.Errorf("%s has no FLOPs formula (add one to FLOPs, beside its launcher)", s.Name)
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d kernels found", n)
	}
	// A formula reads the launch's own arguments.
	args := map[string]float64{"B": 2, "T": 4, "C": 8, "H": 2}
	if got, want := FLOPs("fleet_attention_fwd_bf16", func(p string) float64 { return args[p] }), 2*2*10*(4*4+5.0); got != want {
		t.Errorf("attention forward, B 2 T 4 C 8 H 2: %g FLOPs, want %g", got, want)
	}
	// The tensor-core kernels count their padded head: hd 4 runs at 32.
	if got, want := FLOPs("fleet_attention_fwd_mma32_bf16", func(p string) float64 { return args[p] }), 2*2*10*(4*32+5.0); got != want {
		t.Errorf("tensor-core attention forward, B 2 T 4 C 8 H 2: %g FLOPs, want %g", got, want)
	}
	if got, want := FLOPs("fleet_attention_fwd_mma128f16_f32", func(p string) float64 { return args[p] }), 2*2*10*(4*128+5.0); got != want {
		t.Errorf("f16 tensor-core attention forward, B 2 T 4 C 8 H 2: %g FLOPs, want %g", got, want)
	}
	if !TensorCoreKernel("fleet_attention_bwd_dq_mma64_bf16") || TensorCoreKernel("fleet_attention_bwd_dq_bf16") {
		t.Errorf("TensorCoreKernel: only the _mma kernels are")
	}
	if got := FLOPs("fleet_axpy_f32", func(p string) float64 { return map[string]float64{"n": 100}[p] }); got != 200 {
		t.Errorf("axpy of 100: %g FLOPs, want 200", got)
	}
}
