package gpu

// Spec is one GPU model's data-sheet figures.
type Spec struct {
	Name string // as --device sim:NAME names it: "h200"
	Desc string // the device name the driver reports: "NVIDIA H200"
	// Dense (no sparsity) peaks in TFLOP/s: BF16 (and F16) and TF32 on
	// tensor cores, FP32 on CUDA cores.
	BF16, TF32, FP32 float64
	HBM              float64 // memory bandwidth, bytes/s
	PCIe             float64 // host link bandwidth each way, bytes/s
	// Memory is the total the driver reports, in bytes: the data sheets'
	// 141 GB (H200) and 80 GB are what nvidia-smi shows as 143771 MiB,
	// 81559 MiB (H100 HBM3) and 81920 MiB (A100).
	Memory       int64
	SMs          int
	Major, Minor int // compute capability
}

// Specs is the one table of data-sheet figures: the simulated devices
// (package sim), in the order of their --device index (sim:h200 is sim:0),
// and the peaks the runtime quotes MFU against for real devices of these
// models.
var Specs = []Spec{
	{Name: "h200", Desc: "NVIDIA H200", BF16: 989, TF32: 494, FP32: 67, HBM: 4.8e12, PCIe: 64e9, Memory: 143771 << 20, SMs: 132, Major: 9, Minor: 0},
	{Name: "h100", Desc: "NVIDIA H100 80GB HBM3", BF16: 989, TF32: 494, FP32: 67, HBM: 3.35e12, PCIe: 64e9, Memory: 81559 << 20, SMs: 132, Major: 9, Minor: 0},
	{Name: "a100", Desc: "NVIDIA A100-SXM4-80GB", BF16: 312, TF32: 156, FP32: 19.5, HBM: 2.039e12, PCIe: 32e9, Memory: 81920 << 20, SMs: 108, Major: 8, Minor: 0},
}
