// Package fleet trains GPT-style language models in Go, on NVIDIA GPUs
// and on CPUs. This root package holds the entry points a user needs
// first; the work is done in the packages below it (tensor, nn, model,
// optim, data, train, checkpoint, backend).
package fleet

import (
	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/gpu/cuda"   // registers cuda:N and sim:NAME
	_ "github.com/fleetml/fleet/backend/gpu/opencl" // registers opencl:N
	"github.com/fleetml/fleet/tensor"
)

// DefaultDevice returns cuda:0 when a CUDA backend is registered and
// opens, and the CPU otherwise.
func DefaultDevice() tensor.Device {
	d, _ := backend.Resolve("auto")
	return d
}
