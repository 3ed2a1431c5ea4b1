// A stand-in for libcublasLt, built by the tests with the system's C
// compiler, so that cublasLtMatmul (16 arguments) and its descriptor calls
// are checked on machines with no GPU. "Device" pointers are host memory;
// only CUDA_R_32F with COMPUTE_32F is computed (column-major), with the
// DEFAULT, BIAS, GELU(_AUX)(_BIAS) and DGELU(_BGRAD) epilogues.
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef int cublasStatus_t;
static long long last[8];
long long fake_get(int i) { return last[i]; }

typedef struct { int compute, scale, ta, tb; unsigned epi; float *bias, *aux; long long auxld; } desc_t;
typedef struct { int type; unsigned long long rows, cols; long long ld, stride; int batch; } layout_t;
typedef struct { unsigned long long ws; } pref_t;

cublasStatus_t cublasLtCreate(void **h) { *h = (void *)0x17; return 0; }
cublasStatus_t cublasLtDestroy(void *h) { return h == (void *)0x17 ? 0 : 1; }
size_t cublasLtGetVersion(void) { return 120805; }

cublasStatus_t cublasLtMatmulDescCreate(desc_t **d, int compute, int scale) {
	*d = calloc(1, sizeof(desc_t));
	(*d)->compute = compute; (*d)->scale = scale; (*d)->epi = 1;
	return 0;
}
cublasStatus_t cublasLtMatmulDescDestroy(desc_t *d) { free(d); return 0; }
cublasStatus_t cublasLtMatmulDescSetAttribute(desc_t *d, int attr, const void *buf, size_t n) {
	switch (attr) {
	case 3: if (n != 4) return 7; memcpy(&d->ta, buf, 4); return 0;
	case 4: if (n != 4) return 7; memcpy(&d->tb, buf, 4); return 0;
	case 7: if (n != 4) return 7; memcpy(&d->epi, buf, 4); return 0;
	case 8: if (n != 8) return 7; memcpy(&d->bias, buf, 8); return 0;
	case 11: if (n != 8) return 7; memcpy(&d->aux, buf, 8); return 0;
	case 12: if (n != 8) return 7; memcpy(&d->auxld, buf, 8); return 0;
	}
	return 7; // INVALID_VALUE
}

cublasStatus_t cublasLtMatrixLayoutCreate(layout_t **l, int type, unsigned long long rows, unsigned long long cols, long long ld) {
	*l = calloc(1, sizeof(layout_t));
	(*l)->type = type; (*l)->rows = rows; (*l)->cols = cols; (*l)->ld = ld; (*l)->batch = 1;
	return ld < (long long)rows ? 7 : 0;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(layout_t *l) { free(l); return 0; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(layout_t *l, int attr, const void *buf, size_t n) {
	if (attr == 5 && n == 4) { memcpy(&l->batch, buf, 4); return 0; }
	if (attr == 6 && n == 8) { memcpy(&l->stride, buf, 8); return 0; }
	return 7;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(pref_t **p) { *p = calloc(1, sizeof(pref_t)); return 0; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(pref_t *p) { free(p); return 0; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(pref_t *p, int attr, const void *buf, size_t n) {
	if (attr != 1 || n != 8) return 7;
	memcpy(&p->ws, buf, 8);
	return 0;
}

// The heuristic offers one algorithm (its first word 42) for F32 with
// COMPUTE_32F, and none for anything else.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(void *h, desc_t *d, layout_t *a, layout_t *b, layout_t *c, layout_t *dd,
                                              pref_t *p, int requested, unsigned char *results, int *count) {
	if (h != (void *)0x17 || requested < 1) return 7;
	last[0] = (long long)p->ws;
	memset(results, 0, 96);
	*count = 0;
	if (a->type != 0 || b->type != 0 || c->type != 0 || dd->type != 0 || d->compute != 68) return 0;
	unsigned long long algo = 42;
	memcpy(results, &algo, 8);
	*count = 1;
	return 0;
}

static float gelu(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x))); }
static float dgelu(float x) {
	float u = 0.7978845608f * (x + 0.044715f * x * x * x), t = tanhf(u);
	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

cublasStatus_t cublasLtMatmul(void *h, desc_t *d, const float *alpha, const float *A, layout_t *la, const float *B, layout_t *lb,
                              const float *beta, const float *C, layout_t *lc, float *D, layout_t *ld, const unsigned long long *algo,
                              void *ws, size_t wsSize, void *stream) {
	if (h != (void *)0x17 || algo[0] != 42) return 7;
	last[1] = (long long)stream; last[2] = (long long)ws; last[3] = (long long)wsSize; last[4] = d->epi;
	unsigned e = d->epi;
	if (e != 1 && e != 4 && e != 32 && e != 36 && e != 160 && e != 164 && e != 192 && e != 208) return 15; // NOT_SUPPORTED
	long long m = lc->rows, n = lc->cols, k = d->ta ? la->rows : la->cols;
	for (int bt = 0; bt < lc->batch; bt++) {
		const float *Ab = A + bt * la->stride, *Bb = B + bt * lb->stride, *Cb = C + bt * lc->stride;
		float *Db = D + bt * ld->stride;
		for (long long j = 0; j < n; j++)
			for (long long i = 0; i < m; i++) {
				float acc = 0;
				for (long long p = 0; p < k; p++) {
					float a = d->ta ? Ab[p + i * la->ld] : Ab[i + p * la->ld];
					float x = d->tb ? Bb[j + p * lb->ld] : Bb[p + j * lb->ld];
					acc += a * x;
				}
				float v = *alpha * acc + (*beta == 0 ? 0 : *beta * Cb[i + j * lc->ld]);
				if ((e & 4) && !(e & 64)) v += d->bias[i];
				if (e & 32) {
					if (e & 128) d->aux[i + j * d->auxld] = v;
					v = gelu(v);
				} else if (e & 64) {
					v *= dgelu(d->aux[i + j * d->auxld]);
				}
				Db[i + j * ld->ld] = v;
			}
		if (e == 208) // the bias gradient: D summed over its columns
			for (long long i = 0; i < m; i++) {
				float s = 0;
				for (long long j = 0; j < n; j++) s += Db[i + j * ld->ld];
				d->bias[i] = s;
			}
	}
	return 0;
}
