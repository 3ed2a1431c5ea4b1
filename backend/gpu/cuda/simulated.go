package cuda

import (
	"fmt"

	"github.com/fleetml/fleet/backend/gpu"
	"github.com/fleetml/fleet/backend/gpu/cuda/cublas"
	"github.com/fleetml/fleet/backend/gpu/cuda/driver"
	"github.com/fleetml/fleet/backend/gpu/cuda/nvrtc"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
)

// The simulated GPUs (sim:h200, sim:h100, sim:a100) are this driver over
// the sim package's stand-ins for NVIDIA's libraries.
func init() {
	gpu.RegisterNamed("sim", sim.Names(), func(index int) (gpu.Driver, error) {
		if index < 0 || index >= len(sim.Specs) {
			return nil, fmt.Errorf("sim: no GPU model %d", index)
		}
		return openSimulated(sim.Specs[index])
	})
}

// openSimulated opens a simulated GPU of the given model: this driver's
// own code over the sim package's stand-ins for the driver, NVRTC and
// cuBLAS, which execute nothing and record everything (see package sim).
// Kernels are "compiled" in memory: nothing is written to the kernel
// cache.
func openSimulated(spec sim.Spec) (*driverGPU, error) {
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
	g.sim = dev
	return g, nil
}

// Sim is the simulated device behind g, or nil for a real GPU (sim.Of
// finds it from a backend).
func (g *driverGPU) Sim() *sim.Device { return g.sim }

// Simulated reports whether g is a simulated GPU (the runtime's
// backend.Simulated asks it).
func (g *driverGPU) Simulated() bool { return g.sim != nil }
