// Elementwise F32 kernels. Each thread handles elements i, i+stride, ...
// (a grid-stride loop), so any grid covers any n. Memory traffic is one
// read per input and one write per output element. Launch: 1-D blocks of
// 256 threads, grid min(ceil(n/256), a few per SM).

// fleet_fill_f32: dst[i] = v.
extern "C" __global__ void fleet_fill_f32(float *__restrict__ dst, float v, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		dst[i] = v;
	}
}

// fleet_binary_f32: dst[i] = a[i] op b[i]; op is 0 add, 1 sub, 2 mul, 3 div
// (backend.BinaryOp). dst may alias a or b.
extern "C" __global__ void fleet_binary_f32(float *dst, const float *a, const float *b, int op, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float x = a[i], y = b[i], r;
		switch (op) {
		case 0: r = x + y; break;
		case 1: r = x - y; break;
		case 2: r = x * y; break;
		default: r = x / y; break;
		}
		dst[i] = r;
	}
}

// fleet_axpy_f32: dst[i] += alpha * x[i].
extern "C" __global__ void fleet_axpy_f32(float *__restrict__ dst, const float *__restrict__ x, float alpha, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		dst[i] += alpha * x[i];
	}
}

// fleet_scale_f32: dst[i] = alpha * src[i]; dst may alias src.
extern "C" __global__ void fleet_scale_f32(float *dst, const float *src, float alpha, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		dst[i] = alpha * src[i];
	}
}
