package gpu

import (
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/tensor"
)

// EmulatedDevice registers, for the test, cuda:n as a fake device whose
// kernels run in the emulator: for tests outside the package (those that
// drive the trainer, which imports this package).
func EmulatedDevice(t *testing.T, n int) tensor.Device { return emulatedDevice(t, n) }

// RealDevice is cuda:0 where there is a GPU; the test skips otherwise.
func RealDevice(t *testing.T) tensor.Device { return realDevice(t) }

// The drivers' hooks, which drivers_test.go (package gpu_test, free to
// import the drivers) sets: the tests of this package reach the drivers
// through the registry, and these.
var (
	// OpenCLProbe reports why there is no OpenCL device or no CLBlast.
	OpenCLProbe func() error
	// SimWindow runs f and returns what the simulated device behind b
	// counted meanwhile.
	SimWindow func(b backend.Backend, f func()) SimCounts
)

// SimCounts is what a simulated device counted (sim.Counters).
type SimCounts struct {
	ByKernel                           map[string]int64
	BytesTouched, FLOPs, DeviceSeconds float64
}
