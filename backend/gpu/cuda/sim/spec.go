// Package sim is a simulated NVIDIA GPU: stand-ins, written in Go, for the
// CUDA driver, NVRTC, cuBLAS and cuBLASLt, which the CUDA driver loads as it loads
// the real libraries and drives with its own code (its allocator, its
// launcher, its cuBLAS calls, copies and events). They execute nothing and
// hold no data: device memory is address ranges, and what a copy brings
// back to the host is zeros. They keep the device's memory accounts
// (allocations against the model's capacity, so that out of memory comes
// where it would) and record every unit of work, every host wait and
// every copy, so that what a training step asks of a GPU is counted
// exactly, and its time estimated, on a machine without one. PyTorch's
// meta device and FakeTensor mode rest on the same idea.
package sim

import (
	"fmt"
	"strings"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu"
)

// Spec is one GPU model's data-sheet figures (the runtime's table, which
// also gives the peaks MFU is quoted against).
type Spec = gpu.Spec

// Specs is the simulated devices, in the order of their --device index
// (sim:h200 is sim:0): the runtime's one table of data-sheet figures.
var Specs = gpu.Specs

// Names lists the simulated models, in index order.
func Names() []string {
	n := make([]string, len(Specs))
	for i, s := range Specs {
		n[i] = s.Name
	}
	return n
}

// Lookup returns the spec of a model by name ("h200", any case).
func Lookup(name string) (Spec, error) {
	for _, s := range Specs {
		if strings.EqualFold(s.Name, name) {
			return s, nil
		}
	}
	return Spec{}, fmt.Errorf("sim: no GPU model %q (want %s)", name, strings.Join(Names(), ", "))
}

// The cost model's constants: the share of peak bandwidth and of peak
// FLOP/s a launch reaches, and what each launch costs on its own. The
// model stays fixed; a change to a constant cites its source here.
const (
	BandwidthEfficiency = 0.85
	// TensorCoreEfficiency is the share of the tensor cores' peak that
	// cuBLAS's and cuBLASLt's products reach (and that a wgmma kernel
	// would: FlashAttention-3 reaches 75% of an H100's BF16 peak, Shah et
	// al., "FlashAttention-3", 2024, arXiv:2407.08608, abstract: up to
	// 740 TFLOP/s).
	TensorCoreEfficiency = 0.75
	// MMAEfficiency is the share of the tensor cores' peak that fleet's
	// own mma.sync kernels (attention_mma.cu: kernels.TensorCoreKernel)
	// are priced at. FlashAttention-2, a tuned mma.sync kernel, reaches
	// up to 335 TFLOP/s on an H100 SXM5 (34% of its 989; Dao,
	// "FlashAttention-2", 2023, arXiv:2307.08691, its H100 benchmark) and
	// 50-73% of an A100's peak (same paper, abstract); FlashAttention-3's paper puts
	// FlashAttention-2 at 35% of an H100 (its abstract). 0.40 is within
	// that range and no kinder than the tuned kernel on the GPU that
	// matters here.
	MMAEfficiency      = 0.40
	CUDACoreEfficiency = 0.5 // other kernels, of the FP32 peak
	LaunchSeconds      = 1e-6
)

// ContextBytes is the device memory the simulated context holds from its
// first retain to its last release, and which cuMemGetInfo reports as
// used: on a real GPU, the CUDA context (its stacks, its loaded modules),
// cuBLAS's own workspaces and NCCL's buffers take memory the allocator
// never sees. NVIDIA documents no figure; a CUDA 12 context alone commonly
// shows a few hundred MiB in nvidia-smi. 1 GiB keeps --batch-size auto on
// a simulated GPU from planning into memory a real one does not give.
const ContextBytes = 1 << 30

// The collectives' bandwidth model: NCCL's bus bandwidth among the GPUs of
// one node (NVLink and NVSwitch, H100/H200 class) and across nodes
// (InfiniBand or RoCE, 400 Gb/s per GPU). A ring all-reduce of B bytes over
// n ranks moves 2(n-1)/n·B through each rank's link.
const (
	NodeGPUs          = 8
	IntraNodeBusBytes = 450e9
	InterNodeBusBytes = 45e9
)

// BusBandwidth is the bus bandwidth a collective over world ranks gets:
// within a node up to NodeGPUs ranks, across nodes beyond.
func BusBandwidth(world int) float64 {
	if world <= NodeGPUs {
		return IntraNodeBusBytes
	}
	return InterNodeBusBytes
}

// CommModel says in words which bandwidth a world of ranks gets.
func CommModel(world int) string {
	if world <= NodeGPUs {
		return fmt.Sprintf("ring collectives among %d GPUs of one node, bus bandwidth %.0f GB/s (NVLink)", world, IntraNodeBusBytes/1e9)
	}
	return fmt.Sprintf("ring collectives among %d GPUs across nodes, bus bandwidth %.0f GB/s (the network)", world, InterNodeBusBytes/1e9)
}

// Of returns the simulated device behind a backend (sim:NAME), or nil
// where b is not one.
func Of(b backend.Backend) *Device {
	d, ok := b.(interface{ Driver() gpu.Driver })
	if !ok {
		return nil
	}
	if s, ok := d.Driver().(interface{ Sim() *Device }); ok {
		return s.Sim()
	}
	return nil
}
