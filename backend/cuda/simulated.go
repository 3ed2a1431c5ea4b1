package cuda

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cuda/cublas"
	"github.com/fleetml/fleet/backend/cuda/driver"
	"github.com/fleetml/fleet/backend/cuda/nvrtc"
	"github.com/fleetml/fleet/backend/cuda/sim"
)

func init() {
	backend.RegisterNamed("sim", sim.Names(), func(index int) (backend.Backend, error) {
		if index < 0 || index >= len(sim.Specs) {
			return nil, fmt.Errorf("sim: no GPU model %d", index)
		}
		return OpenSimulated(sim.Specs[index])
	})
}

// OpenSimulated opens a simulated GPU of the given model: this backend's
// own code over the sim package's stand-ins for the driver, NVRTC and
// cuBLAS, which execute nothing and record everything (see package sim).
// Kernels are "compiled" in memory: nothing is written to the kernel
// cache.
func OpenSimulated(spec sim.Spec) (*CUDA, error) {
	dev := sim.New(spec)
	d := driver.Load(dev.Driver())
	if err := d.Init(); err != nil {
		return nil, err
	}
	nv, err := nvrtc.Load(dev.NVRTC())
	if err != nil {
		return nil, err
	}
	g, err := startDriverGPU(d, nv, cublas.Load(dev.CUBLAS()), cublas.LoadLt(dev.CUBLASLt()), 0, nil)
	if err != nil {
		return nil, err
	}
	index := 0
	for i, s := range sim.Specs {
		if s.Name == spec.Name {
			index = i
		}
	}
	c := newCUDA(backend.Device{Kind: "sim", Index: index}, g)
	c.sim = dev
	return c, nil
}

// Sim is the simulated device behind c, or nil for a real GPU.
func (c *CUDA) Sim() *sim.Device { return c.sim }

// RoundsOperands implements backend.OperandRounder: cuBLAS rounds F32
// operands in its fast compute modes (see MatMul).
func (c *CUDA) RoundsOperands() bool { return true }

// Simulated implements backend.Simulated.
func (c *CUDA) Simulated() bool { return c.sim != nil }
