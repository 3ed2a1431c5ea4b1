// Package driver binds the CUDA driver API (libcuda.so.1) through purego,
// with no cgo: devices and their attributes, the primary context, device and
// pinned host memory, synchronous and asynchronous copies, streams, events,
// modules (cubins from NVRTC) and kernel launches.
//
// Open finds the library (see package libs) and binds each function by its
// versioned name (cuMemAlloc_v2, cuEventDestroy_v2, ...). A function the
// library lacks does not stop it loading: calling it returns a
// *libs.MissingSymbolError naming the symbol.
//
// A failed call returns an *Error carrying the CUresult and the driver's
// name for it:
//
//	p, err := d.MemAlloc(n)
//	if errors.Is(err, driver.ErrOutOfMemory) { ... free cached blocks, retry ... }
//
// A CUDA context is current on an OS thread, so a device's work is issued
// from one goroutine locked to its thread (runtime.LockOSThread) after
// CtxSetCurrent(PrimaryCtxRetain(dev)).
//
// Hot calls (LaunchKernel, the Async copies and memsets, EventRecord,
// StreamWaitEvent) do not allocate, provided their host pointers are pinned
// memory or Go heap objects and kernel parameters come from a reused *Args.
package driver
