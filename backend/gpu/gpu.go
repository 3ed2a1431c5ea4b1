package gpu

import (
	"errors"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// ErrNoPeer is peerCopy's error where it cannot copy from the other device.
var ErrNoPeer = errors.New("cuda: no device-to-device copy between these devices")

// ErrNoEpilogues is ltMatmul's error where the device has no cuBLASLt.
var ErrNoEpilogues = errors.New("cuda: no cuBLASLt")

// ErrRefused is matched (errors.Is) by a driver's error where its library
// refused an epilogue product before queuing anything (cuBLASLt's status):
// the runtime then does without epilogues.
var ErrRefused = errors.New("epilogue product refused")

// Ptr is a place in device memory: Block, a block a driver allocated,
// and Off, a byte offset in it. Block is the driver's own handle, which
// only the driver that made it reads: the CUDA driver's is the block's
// device address (it passes Block+Off to its kernels and libraries), the
// OpenCL driver's the buffer's cl_mem (it passes the buffer and Off). The
// runtime compares blocks and adds offsets, nothing more. Kernel launches
// take device buffers as Ptr arguments; the zero Ptr is a null pointer,
// an optional operand left out.
type Ptr struct {
	Block uint64
	Off   int
}

// Add is the place bytes further into p's block.
func (p Ptr) Add(bytes int) Ptr { return Ptr{Block: p.Block, Off: p.Off + bytes} }

// IsNil reports whether p is the null pointer.
func (p Ptr) IsNil() bool { return p == Ptr{} }

// gpu is what the backend needs from a device. Methods are called from one
// goroutine at a time, except that another device's peerCopy, on its own
// goroutine, may reach into this one (the driver's device runs every call
// under its own lock, so it allows that); an implementation that needs a
// particular OS thread arranges that itself.
type Driver interface {
	// memAlloc returns a new device block of bytes, or an error wrapping
	// backend.ErrOutOfMemory when the device has no room.
	MemAlloc(bytes int) (Ptr, error)
	MemFree(p Ptr) error
	// address is p as the device address that libraries taking raw
	// addresses (NCCL) read, or an error where the device has none
	// (OpenCL's buffers are handles).
	Address(p Ptr) (uintptr, error)
	MemInfo() (free, total uint64, err error)
	// htod, dtoh and dtod copy in stream order; htod and dtoh return when
	// the host memory is no longer needed (dtoh: when the data is there).
	HtoD(dst Ptr, src []byte) error
	DtoH(dst []byte, src Ptr) error
	DtoD(dst, src Ptr, bytes int) error
	// peerCopy copies bytes from src, a block of device from, into dst,
	// device to device, in stream order on both devices: after the work
	// queued so far on either, before the work queued later on either. It
	// returns ErrNoPeer, having done nothing, where from is not a device
	// it can copy from.
	PeerCopy(dst Ptr, from Driver, src Ptr, bytes int) error
	// hostAlloc returns page-locked host memory, which the copy engine
	// reads while the host goes on; hostFree releases it.
	HostAlloc(bytes int) ([]byte, error)
	HostFree(b []byte) error
	// htodAsync queues a copy from page-locked src on the copy stream,
	// after the compute work queued so far (dst may be a block the pool
	// just recycled), and returns at once with the copy's handle.
	HtoDAsync(dst Ptr, src []byte) (backend.Upload, error)
	// launch queues a kernel by name with its arguments, in the kernel's
	// parameter order (a zero Ptr is a null pointer).
	Launch(kernel string, grid, block [3]int, shared int, args kernels.Args[Ptr]) error
	// gemm queues one product (a batched GEMM: cuBLAS's, CLBlast's).
	Gemm(g Product) error
	// ltMatmul queues one product with its epilogue on the compute stream
	// (cublasLtMatmul), or returns ErrNoEpilogues where there is none; an error
	// matching ErrRefused where the library refused it.
	GemmEpilogue(m EpilogueProduct) error
	// sync waits for all queued work.
	Sync() error
	// onStream runs fn on the device's thread with the compute stream.
	OnStream(fn func(stream uintptr) error) error
	// onCommStream runs fn on the device's thread with the communication
	// stream, after making it wait for the compute work queued so far;
	// joinComm makes the compute stream wait for the communication work
	// queued so far and returns a probe of it (backend.CommQueue).
	OnCommStream(fn func(stream uintptr) error) error
	JoinComm() (backend.CommProbe, error)
	// beginCapture and endCapture record the work queued on the compute
	// stream into a graph (backend.Grapher).
	BeginCapture() error
	EndCapture() (backend.Graph, error)
	// mark records an event on the compute stream after the work queued
	// so far; elapsed waits for the later of two marks and returns the
	// milliseconds between them; releaseMark recycles a mark.
	Mark() (uintptr, error)
	Elapsed(from, to uintptr) (float64, error)
	ReleaseMark(m uintptr)
	SMCount() int
	// tensorCores reports whether the device multiplies bf16 on tensor
	// cores with mma.sync m16n8k16 (compute capability 8.0 on).
	TensorCores() bool
	Name() string
	Close() error
}
