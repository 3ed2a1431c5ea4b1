package cuda

import (
	"testing"

	"github.com/fleetml/fleet/tensor"
)

// EmulatedDevice registers, for the test, cuda:n as a fake device whose
// kernels run in the emulator: for tests outside the package (those that
// drive the trainer, which imports this package).
func EmulatedDevice(t *testing.T, n int) tensor.Device { return emulatedDevice(t, n) }

// RealDevice is cuda:0 where there is a GPU; the test skips otherwise.
func RealDevice(t *testing.T) tensor.Device { return realDevice(t) }
