package fleet

import (
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/tensor"
)

// With no CUDA backend registered (this build has none yet), the default
// device is the CPU, and asking for cuda explicitly says why it cannot.
func TestDefaultDevice(t *testing.T) {
	if got := DefaultDevice(); got != tensor.CPU {
		t.Fatalf("DefaultDevice() = %v, want cpu", got)
	}
	_, err := backend.Resolve("cuda:0")
	if err == nil || !strings.Contains(err.Error(), "cuda") {
		t.Fatalf("Resolve(cuda:0) error %v", err)
	}
	if _, err := backend.Resolve("tpu"); err == nil {
		t.Fatal("Resolve(tpu) succeeded")
	}
}
