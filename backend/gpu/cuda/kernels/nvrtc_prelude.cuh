// Prelude for NVRTC builds: fleet's kernels include no CUDA headers.
#define FLEET_NVRTC 1
#define FLEET_DYNAMIC_SHARED(T, name) \
	extern __shared__ __align__(16) unsigned char fleet_dynamic_smem_[]; \
	T *name = reinterpret_cast<T *>(fleet_dynamic_smem_)
