package gpu_test

import (
	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu"
	_ "github.com/fleetml/fleet/backend/gpu/cuda" // cuda:N and sim:NAME, for the tests
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/backend/gpu/opencl" // opencl:N
)

// The drivers register their kinds here, in the test binary, and give
// the package's tests what they ask of them.
func init() {
	gpu.OpenCLProbe = func() error {
		if _, err := opencl.Devices(); err != nil {
			return err
		}
		return opencl.CLBlast()
	}
	gpu.SimWindow = func(b backend.Backend, f func()) gpu.SimCounts {
		sd := sim.Of(b)
		before := sd.Counters()
		f()
		w := sd.Counters().Sub(before)
		return gpu.SimCounts{ByKernel: w.ByKernel, BytesTouched: w.BytesTouched, FLOPs: w.FLOPs, DeviceSeconds: w.DeviceSeconds}
	}
}
