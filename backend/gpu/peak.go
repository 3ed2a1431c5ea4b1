package gpu

import (
	"strings"

	"github.com/fleetml/fleet/backend"
)

// peaks are dense (no sparsity) tensor-core BF16 and plain FP32 peaks, in
// TFLOP/s, from NVIDIA's data sheets, matched by a piece of the device
// name. More specific names come first.
// The models in Specs take their figures from that table.
var peaks = []struct {
	match      string
	bf16, fp32 float64
}{
	{"H200", simPeak("h200").BF16, simPeak("h200").FP32},
	{"H100 PCIe", 756.0, 51.2},
	{"H100", simPeak("h100").BF16, simPeak("h100").FP32},
	{"A100", simPeak("a100").BF16, simPeak("a100").FP32},
	{"L40S", 362.1, 91.6},
	{"A10G", 70.0, 31.2},
	{"A10", 125.0, 31.2},
	{"RTX 4090", 165.2, 82.6},
	{"L4", 121.0, 30.3},
}

func simPeak(name string) Spec {
	for _, s := range Specs {
		if s.Name == name {
			return s
		}
	}
	panic("gpu: no spec " + name)
}

// Name is the device's name, e.g. "NVIDIA H200".
func (c *Backend) Name() string { return c.g.Name() }

// PeakTFLOPs is the device's dense peak for matrix products with operands
// in dt (BF16 on tensor cores, F32 without), from a table of common GPUs;
// ok is false for a device that is not in it.
func (c *Backend) PeakTFLOPs(dt backend.DType) (tflops float64, ok bool) {
	name := c.Name()
	for _, p := range peaks {
		if strings.Contains(name, p.match) {
			if dt == backend.BF16 {
				return p.bf16, true
			}
			return p.fp32, true
		}
	}
	return 0, false
}
