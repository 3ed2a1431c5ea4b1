// A stand-in for libcuda.so.1, built by the tests with the system's C
// compiler, so that the bindings' calls (argument order, out-parameters,
// error codes, 11-argument launches) are checked on machines with no GPU.
// "Device memory" is host memory from malloc; cuLaunchKernel runs
// fleet_fill_f32 on the CPU. cuMemsetD8Async and cuEventElapsedTime (v1) are
// left out on purpose.
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static long long last[16]; // what the last calls saw, read back by fake_get

long long fake_get(int i) { return last[i]; }

CUresult cuInit(unsigned flags) { return flags == 0 ? 0 : 1; }
CUresult cuDriverGetVersion(int *v) { *v = 12080; return 0; }
CUresult cuGetErrorName(CUresult r, const char **s) {
	switch (r) {
	case 2: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
	case 101: *s = "CUDA_ERROR_INVALID_DEVICE"; return 0;
	case 500: *s = "CUDA_ERROR_NOT_FOUND"; return 0;
	}
	return 1;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
	if (r == 2) { *s = "out of memory"; return 0; }
	return 1;
}
CUresult cuDeviceGetCount(int *n) { *n = 1; return 0; }
CUresult cuDeviceGet(int *d, int ordinal) { if (ordinal != 0) return 101; *d = 0; return 0; }
CUresult cuDeviceGetName(char *buf, int len, int dev) {
	if (dev != 0) return 101;
	strncpy(buf, "Fake GPU", len);
	return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
	if (dev != 0) return 101;
	switch (attr) {
	case 75: *v = 9; break;
	case 76: *v = 0; break;
	case 16: *v = 132; break;
	case 97: *v = 232448; break;
	default: *v = 1000 + attr;
	}
	return 0;
}
CUresult cuDeviceTotalMem_v2(size_t *b, int dev) { *b = (size_t)141 << 30; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)0x1234; return 0; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { last[0] = dev + 100; return 0; }
CUresult cuCtxSetCurrent(void *ctx) { return ctx == (void *)0x1234 ? 0 : 201; }
CUresult cuCtxSynchronize(void) { return 0; }

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
	if (n > ((size_t)1 << 40)) return 2;
	*p = (CUdeviceptr)malloc(n);
	return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)p); return 0; }
CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { *f = 100; *t = 200; return 0; }
CUresult cuMemHostAlloc(void **p, size_t n, unsigned flags) { last[1] = flags; *p = malloc(n); return 0; }
CUresult cuMemFreeHost(void *p) { free(p); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { memcpy((void *)d, s, n); return 0; }
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)s, n); return 0; }
CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { memcpy((void *)d, (void *)s, n); return 0; }
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, void *st) { last[2] = (long long)st; memcpy((void *)d, s, n); return 0; }
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *st) { last[2] = (long long)st; memcpy(d, (void *)s, n); return 0; }
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, void *st) { last[2] = (long long)st; memcpy((void *)d, (void *)s, n); return 0; }
CUresult cuMemcpyPeerAsync(CUdeviceptr d, void *dc, CUdeviceptr s, void *sc, size_t n, void *st) { last[2] = (long long)st; last[3] = (long long)dc; last[4] = (long long)sc; memcpy((void *)d, (void *)s, n); return 0; }
CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) { for (size_t i = 0; i < n; i++) ((unsigned *)d)[i] = v; return 0; }
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { memset((void *)d, v, n); return 0; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *st) { last[2] = (long long)st; return cuMemsetD32_v2(d, v, n); }

CUresult cuStreamCreate(void **s, unsigned flags) { *s = (void *)(0x5000 + (long long)flags); return 0; }
CUresult cuStreamDestroy_v2(void *s) { return 0; }
CUresult cuStreamSynchronize(void *s) { last[2] = (long long)s; return 0; }
CUresult cuStreamWaitEvent(void *s, void *e, unsigned flags) { last[2] = (long long)s; last[3] = (long long)e; last[4] = flags; return 0; }
CUresult cuEventCreate(void **e, unsigned flags) { *e = (void *)(0x6000 + (long long)flags); return 0; }
CUresult cuEventRecord(void *e, void *s) { last[2] = (long long)s; last[3] = (long long)e; return 0; }
CUresult cuEventSynchronize(void *e) { return 0; }
static int queries;
CUresult cuEventQuery(void *e) { return queries++ == 0 ? 600 : 0; }
CUresult cuEventElapsedTime_v2(float *ms, void *a, void *b) { *ms = 1.5f; last[3] = (long long)b - (long long)a; return 0; }
CUresult cuEventDestroy_v2(void *e) { return 0; }

CUresult cuModuleLoadData(void **m, const void *image) {
	const char *p = image;
	if (memcmp(p, "\x7f" "ELF", 4) != 0 && strlen(p) > 1 << 20) return 200;
	*m = (void *)0x7000;
	return 0;
}
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
	if (m != (void *)0x7000 || strcmp(name, "fleet_fill_f32") != 0) return 500;
	*f = (void *)0x8000;
	return 0;
}
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuFuncSetAttribute(void *f, int attr, int v) { last[5] = attr; last[6] = v; return 0; }

// Stream capture: fills queued on the capturing stream are recorded (up
// to 16) instead of run; a launch of the graph runs them.
static void *capturing;
static struct { float *dst; float v; long long n; } nodes[16];
static int nnodes;

// fleet_fill_f32(float *dst, float v, long long n), run on the CPU.
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
	if (f != (void *)0x8000) return 400;
	last[7] = gx; last[8] = gy; last[9] = gz; last[10] = bx; last[11] = by; last[12] = bz;
	last[13] = shared; last[2] = (long long)stream; last[14] = (long long)extra;
	float *dst = *(float **)params[0];
	float v = *(float *)params[1];
	long long n = *(long long *)params[2];
	if (capturing != 0 && stream == capturing) {
		if (nnodes == 16) return 2;
		nodes[nnodes].dst = dst; nodes[nnodes].v = v; nodes[nnodes].n = n; nnodes++;
		return 0;
	}
	for (long long i = 0; i < n; i++) dst[i] = v;
	return 0;
}

CUresult cuStreamBeginCapture_v2(void *s, int mode) {
	if (capturing != 0) return 900; // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
	capturing = s; nnodes = 0; last[15] = mode;
	return 0;
}
CUresult cuStreamEndCapture(void *s, void **g) {
	if (capturing != s) return 901;
	capturing = 0; *g = (void *)(0xa000 + (long long)nnodes);
	return 0;
}
CUresult cuGraphInstantiateWithFlags(void **e, void *g, unsigned long long flags) { *e = (void *)((long long)g + 0x1000); return 0; }
CUresult cuGraphLaunch(void *e, void *s) {
	last[2] = (long long)s;
	for (int k = 0; k < nnodes; k++)
		for (long long i = 0; i < nodes[k].n; i++) nodes[k].dst[i] = nodes[k].v;
	return 0;
}
CUresult cuGraphExecDestroy(void *e) { return 0; }
CUresult cuGraphDestroy(void *g) { return 0; }
