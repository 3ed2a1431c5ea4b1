/*
 * A stand-in for libnvidia-ml.so.1, built by the tests with the system's C
 * compiler, so that the Go binding's calls, argument passing and struct
 * layouts are checked against a real C compiler's on machines without a
 * GPU. The structs are declared as nvml.h declares them.
 *
 * Environment:
 *   FAKE_NVML_INIT   the code nvmlInit_v2 returns (default 0)
 *   FAKE_NVML_COUNT  the number of GPUs (default 2)
 *   FAKE_NVML_PROCS  the number of compute processes on each GPU (default 3)
 *   FAKE_NVML_GROW   processes that appear between the size query and the
 *                    fill, once (default 0)
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t is 24 bytes");

static int env(const char *name, int def) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : def;
}

static int inits;
static int grown;

/* Handles are small integers offset from a base, checked on every call. */
#define HANDLE_BASE 0x5000
static int dev(nvmlDevice_t d) {
    long i = (long)d - HANDLE_BASE;
    if (i < 0 || i >= env("FAKE_NVML_COUNT", 2)) return -1;
    return (int)i;
}

int nvmlInit_v2(void) {
    int r = env("FAKE_NVML_INIT", 0);
    if (r == 0) inits++;
    return r;
}

int nvmlShutdown(void) {
    if (inits == 0) return 1; /* NVML_ERROR_UNINITIALIZED */
    inits--;
    return 0;
}

const char *nvmlErrorString(int r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 18: return "Driver/library version mismatch";
    }
    return "Unknown Error";
}

#define NEED_INIT if (inits == 0) return 1
#define NEED_DEV(d) NEED_INIT; int i = dev(d); if (i < 0) return 2

int nvmlSystemGetDriverVersion(char *buf, unsigned int n) {
    NEED_INIT;
    if (n < 80) return 7;
    snprintf(buf, n, "%s", "999.12.34");
    return 0;
}

int nvmlDeviceGetCount_v2(unsigned int *n) {
    NEED_INIT;
    *n = env("FAKE_NVML_COUNT", 2);
    return 0;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *d) {
    NEED_INIT;
    if ((int)index >= env("FAKE_NVML_COUNT", 2)) return 2;
    *d = (nvmlDevice_t)(long)(HANDLE_BASE + index);
    return 0;
}

int nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int n) {
    NEED_DEV(d);
    if (n < 96) return 7;
    snprintf(buf, n, "Fake GPU %d", i);
    return 0;
}

int nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int n) {
    NEED_DEV(d);
    snprintf(buf, n, "GPU-00000000-0000-0000-0000-%012d", i);
    return 0;
}

int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
    NEED_DEV(d);
    u->gpu = 37 + i;
    u->memory = 12 + i;
    return 0;
}

int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
    NEED_DEV(d);
    m->total = 80ULL << 30;
    m->used = (unsigned long long)(i + 1) << 30 | 4321;
    m->free = m->total - m->used;
    return 0;
}

int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned int *t) {
    NEED_DEV(d);
    if (sensor != 0) return 2;
    *t = 41 + i;
    return 0;
}

int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) {
    NEED_DEV(d);
    *mw = 123456 + i;
    return 0;
}

int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) {
    NEED_DEV(d);
    if (i == 1) return 3; /* NVML_ERROR_NOT_SUPPORTED on the second GPU */
    *mw = 700000;
    return 0;
}

int nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *mhz) {
    NEED_DEV(d);
    switch (type) {
    case 1: *mhz = 1980 - i; return 0; /* SM */
    case 2: *mhz = 2619 + i; return 0; /* memory */
    }
    return 2;
}

static void fill(nvmlProcessInfo_t *p, int dev, int k) {
    p->pid = 1000 * (dev + 1) + k;
    p->usedGpuMemory = k == 1 ? ~0ULL : ((unsigned long long)(k + 1) << 28) + 17;
    p->gpuInstanceId = 0xFFFFFFFF;
    p->computeInstanceId = 0xFFFFFFF0u + k;
}

int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count, nvmlProcessInfo_t *infos) {
    NEED_DEV(d);
    int n = env("FAKE_NVML_PROCS", 3);
    if (n == 0) {
        *count = 0;
        return 0;
    }
    if (infos == NULL || *count < (unsigned)n) {
        *count = n;
        return 7;
    }
    if (!grown && env("FAKE_NVML_GROW", 0) > 0) {
        /* New processes since the caller asked for the size. */
        grown = 1;
        *count = n + env("FAKE_NVML_GROW", 0);
        return 7;
    }
    for (int k = 0; k < n; k++) fill(&infos[k], i, k);
    *count = n;
    return 0;
}
