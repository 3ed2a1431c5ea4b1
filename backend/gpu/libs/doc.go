// Package libs is fleet's one library loader: it finds and opens shared
// libraries at run time, with no cgo, and calls their functions. It opens
// NVIDIA's libraries (the CUDA driver libcuda.so.1, NVRTC, cuBLAS and
// cuBLASLt, NVML and NCCL), OpenCL's ICD loader and CLBlast (each with a
// search of its own, [Library.Locate]), and the emulator's built kernels
// ([OpenLocal]). It is the one place in fleet that calls dlopen; the
// binding packages look their symbols up through it. [Codes] is the one
// table type that names a library's status codes for its errors.
//
// An NVIDIA library is searched for in this order, taking the first folder that has
// one of its file names (newest first) and loads:
//
//  1. $FLEET_CUDA_PATH (a list of folders, separated like $PATH);
//  2. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache, RUNPATH),
//     by opening the plain file name;
//  3. $CUDA_HOME/lib64 and /usr/local/cuda/lib64;
//  4. the nvidia/*/lib folders (nvidia/cu13/lib among them) of Python
//     site-packages, where pip's CUDA wheels put them: those of $VIRTUAL_ENV
//     and $CONDA_PREFIX first, then ~/.local, /usr/local and /usr;
//  5. /usr/local/nvidia/lib64 and the system's multiarch folder
//     (/usr/lib/x86_64-linux-gnu or /usr/lib/aarch64-linux-gnu).
//
// Libraries are opened with RTLD_NOW|RTLD_GLOBAL. Companion libraries that
// the main one loads by name later are opened first from the same folder:
// libnvrtc-builtins.so.<major>.<minor> for NVRTC and libcublasLt for cuBLAS.
//
// Every outcome is recorded: [Report] gives, for each library [Open] was
// asked for, the path and version found or the reason it was not, which is
// what `fleet doctor` prints. A library that is not found gives a
// [*NotFoundError] listing each place looked in and why it failed, such as
//
//	cuda: libcuda.so.1 not found (looked in: $FLEET_CUDA_PATH: not set; loader search: libcuda.so.1: cannot open shared object file: No such file or directory; ...)
//
// A library that loads but lacks a symbol still loads: [Lib.Func] returns a
// [Func] whose calls fail with a [*MissingSymbolError] naming the symbol, so
// one missing entry point disables one feature, not the library.
//
// Calls go through purego.SyscallN, which does not allocate for arguments
// that are plain values; see [Func.Call].
package libs
