// Package nvrtc binds NVIDIA's runtime compiler (libnvrtc) through purego,
// with no cgo, to turn fleet's CUDA C kernels into cubins at run time:
//
//	cubin, log, err := nvrtc.Compile(src, "elementwise.cu", "sm_90", nvrtc.KernelOptions...)
//
// A real architecture (sm_XY) gives a cubin, which loads on a driver of any
// version that knows the device; a virtual one (compute_XY) gives PTX, which
// an older driver than the compiler may refuse. Any NVRTC from 11.2 (Debian's
// libnvrtc11.2, NVRTC 11.8) to 13.x works: fleet's kernels include no CUDA
// headers, so NVRTC needs no include path.
//
// NVRTC opens libnvrtc-builtins.so.<major>.<minor> by name when it compiles;
// package libs loads it from beside libnvrtc first.
package nvrtc
