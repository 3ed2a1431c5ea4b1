// Package emu runs fleet's CUDA C kernels on the CPU, unchanged, so that
// `go test` checks every kernel against its Go reference on machines with no
// GPU. It is a test-support package: kernel tests of any package import it.
//
// # How it works
//
// Build compiles one kernel file as C++20 with g++, into a shared object
// that the process opens through purego (no cgo: CGO_ENABLED=0 works). The
// translation unit is
//
//	prelude.h + kernels.Common() + the kernel file + generated launchers
//
// (kernels being package backend/gpu/cuda/kernels, the CUDA C sources)
//
// prelude.h defines the CUDA built-ins the kernels use: the declaration
// specifiers (__global__, __device__, __shared__, __align__, ...), the
// thread geometry (threadIdx, blockIdx, blockDim and gridDim, per emulated
// thread), __syncthreads and its _count/_and/_or forms, the warp operations
// (__shfl_sync, __shfl_up_sync, __shfl_down_sync, __shfl_xor_sync,
// __ballot_sync, __any_sync, __all_sync, __syncwarp), atomics,
// FLEET_DYNAMIC_SHARED, __trap, and the math and bit intrinsics. It defines
// FLEET_EMU, never FLEET_NVRTC, so GPU-only code takes its plain fallback.
// For each `extern "C" __global__` kernel, Build parses the parameters and
// generates fleet_emu_launch_<kernel>, which unpacks the arguments as
// cuLaunchKernel does (args[i] points at argument i); a static_assert checks
// the parsed types against the compiler's.
//
// A launch runs its blocks one at a time, in order. __syncthreads is a
// barrier over the block's
// threads that a returned thread drops out of, as exited threads do on a
// GPU. Warp operations are barriers over the lanes of the mask, which
// exchange values through per-lane slots; lanes that wait with different
// masks (in divergent branches) wait apart. A lane that reads from a lane
// that is not with it (returned, outside the mask, past the end of the
// block) gets poison (all bits set: NaN as a float). When every live thread
// waits and none can go on, the launch fails with "deadlock" and says who
// waits where, instead of hanging; a launch that runs past its timeout
// fails too.
//
// Each launch runs under the module's Schedule. Under Parallel each of a
// block's threads is an OS thread (from a pool) and the OS interleaves
// them. Forward and Reverse run one thread at a time, lowest (or highest)
// numbered first, each until it reaches a barrier or warp operation or
// returns; as only one runs at a time they are fibers (ucontext) on one OS
// thread, which makes a barrier cost about a microsecond instead of a
// context switch per thread. Under Forward, a thread that reads without a
// barrier what a higher-numbered thread writes reads stale data every time;
// Reverse does the same for lower-numbered writers. Kernel cases run under
// all three.
//
// Shared memory, static (__shared__) and dynamic (FLEET_DYNAMIC_SHARED), is
// set to poison at the start of every block, so a read of a slot that no
// thread of the block wrote shows up as NaN. Dynamic shared memory has
// guards: writing past it fails the launch. A launch fails, as on a GPU,
// for a block over 1024 threads (or over 1024×1024×64), an empty grid or
// block, or more than 48 KiB of dynamic shared memory unless the kernel
// opted in with SetMaxDynamicShared.
//
// Buffers stand in for device memory. Each lies in its own memory mapping,
// between guard regions that hold a canary pattern: a signalling NaN for
// F32 (0x7fbadbad) and a NaN for U16 (0x7fba, as bf16 and as fp16). After
// each launch the guards of the launch's buffers are checked: a changed
// guard is an out-of-bounds write, reported as a *BoundsError naming the
// kernel, the parameter, the side and the offset. An out-of-bounds read
// reads the canary, which poisons a float result so that the comparison
// with the reference fails. Poison makes an output buffer filled with the
// canary, so an element the kernel fails to write fails the comparison too.
//
// Built modules are cached in the user's cache folder (fleet/emu), keyed by
// a hash of the translation unit and the compiler, and in memory for the
// life of the process: a rebuild costs a second or two per file, a cached
// one nothing. Where g++ (11 or later, building for this architecture) or
// Linux is missing, Build returns an error wrapping ErrUnavailable, and
// MustBuild skips the test saying why.
//
// # A kernel test
//
//	func testScaleF32(t *testing.T, m *emu.Module) {
//		src, alpha := emu.RandF32(rng, 1000), float32(0.5)
//		dst := emu.Poison(emu.F32, len(src))
//		err := m.Launch("fleet_scale_f32", emu.Dim(4), emu.Dim(256), 0,
//			dst, emu.NewF32(src), alpha, int64(len(src)))
//		if err != nil {
//			t.Fatal(err)
//		}
//		if err := emu.AllClose(dst.F32(), scaleRef(src, alpha), 1e-6, 0); err != nil {
//			t.Error(err)
//		}
//	}
//
// Launch matches each argument to the kernel's parameter: a *Buffer whose
// element type is the pointee's (F32 for float*, U16 for unsigned short*,
// I32 for int*, U32, I64, U8; any for void*) or nil; a View, a byte offset
// into a buffer (Buffer.At), as a device backend's pointer arithmetic makes
// (a view of a U8 buffer, raw device memory, fits any pointer type at an
// offset aligned for it; the guards checked are the whole buffer's); int32, uint32, int64,
// uint64, float32 or float64 for int, unsigned int, long long, unsigned long
// long, float or double; or a Go int for any integer parameter it fits.
// A mismatch is an error naming the parameter.
//
// # Adding the cases of a kernel file
//
// Every kernel in backend/gpu/cuda/kernels must have a case. The kernel
// tests keep the registries: an emu.Cases maps kernel names to cases, and
// Cases.Run, given kernel files, fails listing each kernel of those files
// without a case (and each case without a kernel), builds each file, and
// runs every case under every schedule. The tests of the op functions
// (package backend/gpu/kernels) call Run over all of the CUDA kernels'
// files (backend/gpu/cuda/kernels' Files) between their registries, so a new file
// or kernel without a case fails there. To add a file's cases, write one
// Case per kernel in a test file of its own and register them with the
// registry whose Run covers the file, in an init function or a function
// the test calls:
//
//	func init() {
//		opCases.Add(map[string]emu.Case{
//			"fleet_layernorm_f32": testLayerNormF32,
//			...
//		})
//	}
//
// A Case gets the module already built and set to a schedule, and runs
// once per schedule, so it must make its own buffers. Use random inputs
// that are never zero (RandF32), odd sizes and sizes that are not a
// multiple of the block, size 1 and size 0 where the kernel allows it, more
// than one grid size, Poison for outputs, and a plain Go reference;
// elementwise_test.go in this package is a small model.
//
// # Limits
//
//   - Floating point is the CPU's: no fused multiply-add unless the code
//     calls fmaf, and the fast intrinsics (__expf, __logf, ...) are the
//     exact functions. Compare with a tolerance that also fits a GPU.
//   - A race between threads that both read-modify-write one location
//     without atomics (a lost update) is rarely seen: the serial schedules
//     run each thread's update whole, and the parallel one only sometimes
//     interleaves them.
//   - A warp is not a lockstep unit: code that relies on implicit warp
//     synchronism (no __syncwarp, pre-Volta style) may pass here and fail on
//     a GPU, or the reverse. __activemask is the warp's live lanes.
//   - Out-of-bounds accesses to shared memory other than writes past
//     dynamic shared memory go unseen, and an out-of-bounds read whose
//     value only meets fmaxf or fminf (which drop a NaN) or an integer is
//     not poisoned.
//   - Speed: a thread start or barrier costs about 1 µs per thread under
//     the serial schedules and 3 µs under Parallel (go test -bench .
//     measures it). Keep shapes small: a few blocks of up to 256 threads, a
//     few thousand elements.
//   - A fiber has 256 KiB of stack (a pool thread 2 MiB); a kernel with
//     larger local arrays faults on the guard page.
package emu
