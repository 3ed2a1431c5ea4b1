package cuda

import (
	"testing"

	"github.com/fleetml/fleet/tensor"
)

// EmulatedDevice registers, for the test, cuda:n as a fake device whose
// kernels run in the emulator: for tests outside the package (those that
// drive the trainer, which imports this package).
func EmulatedDevice(t *testing.T, n int) tensor.Device { return emulatedDevice(t, n) }
