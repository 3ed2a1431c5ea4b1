// Package kcache keeps compiled kernels (cubins) on disk, so NVRTC compiles
// each kernel source once per architecture, compiler version and option set,
// not once per process.
//
// An entry's key is the SHA-256 of everything that decides the compiler's
// output (Key): the full source, the architecture, the NVRTC version and the
// options. Entries live in one folder, by default os.UserCacheDir()/fleet/kernels,
// or $FLEET_KERNEL_CACHE when set (DefaultDir).
//
// Writes are atomic: each goes to a temporary file in the same folder, is
// fsynced, then renamed over the entry's name, so any number of processes
// may compile and store the same kernel at once and a reader only ever sees
// a whole entry. Each entry starts with a header (magic, key, length and
// SHA-256 of the contents); one that is truncated, corrupt or for another key
// is treated as missing, removed, and compiled again.
//
// Typical use, in the CUDA driver:
//
//	key := kcache.Key(src, "sm_90", nv.Version(), opts)
//	cubin, hit, err := cache.Load(key, func() ([]byte, error) {
//		cubin, _, err := nv.Compile(src, name, "sm_90", opts...)
//		return cubin, err
//	})
package kcache
