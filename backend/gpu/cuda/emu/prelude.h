// Emulation prelude: the CUDA built-ins fleet's kernels use, as C++20 for
// the CPU. Package emu compiles one translation unit per kernel file:
//
//   this prelude + common.cuh + the kernel file + generated launch wrappers
//
// Blocks run one at a time. The threads of a block meet at __syncthreads (a
// barrier that a returned thread drops out of, as exited threads do on a
// GPU) and the lanes of a warp meet at the warp operations (shuffles, votes,
// __syncwarp), which exchange values through per-lane slots. A launch runs
// in one of three schedules: parallel (each thread an OS thread, the OS
// interleaves them) or forward or reverse (one thread at a time, as fibers
// on one OS thread: the lowest, or highest, numbered runnable thread runs
// until it reaches a barrier or returns, so code that reads what another
// thread writes without a barrier in between reads stale data, every time).
//
// Shared memory is poisoned (all bytes 0xff: NaN as float, -1 as int) at the
// start of every block, so a read of a slot no thread wrote shows up.
//
// FLEET_NVRTC is deliberately not defined: code behind it is the GPU-only
// path, and its #else branch is what runs here.

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cerrno>
#include <ctime>
#include <exception>
#include <math.h>
#include <mutex>
#include <new>
#include <pthread.h>
#include <semaphore>
#include <sys/mman.h>
#include <type_traits>
#include <ucontext.h>
#include <utility>

#define FLEET_EMU 1

// ---- Declaration specifiers ------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __constant__
#define __managed__
// A block's threads are the only ones running, so one static object serves as
// the block's shared memory. The section lets the runtime find (and poison)
// every __shared__ variable of the module.
#define __shared__ __attribute__((section("fleet_emu_shared"), aligned(16))) static

// ---- Vector types and the thread geometry -----------------------------------

struct uint3 {
	unsigned int x, y, z;
};

struct dim3 {
	unsigned int x, y, z;
	constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
	constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
	constexpr operator uint3() const { return uint3{x, y, z}; }
};

struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct __align__(8) uint2 { unsigned int x, y; };
struct __align__(16) uint4 { unsigned int x, y, z, w; };
struct __align__(4) ushort2 { unsigned short x, y; };
struct __align__(8) ushort4 { unsigned short x, y, z, w; };
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }
static inline ushort2 make_ushort2(unsigned short x, unsigned short y) { return ushort2{x, y}; }
static inline ushort4 make_ushort4(unsigned short x, unsigned short y, unsigned short z, unsigned short w) { return ushort4{x, y, z, w}; }

static thread_local uint3 threadIdx;
static thread_local uint3 blockIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;
static constexpr int warpSize = 32;

// ---- The runtime --------------------------------------------------------------
//
// One launch runs at a time per module (launch_mu). Its blocks run one after
// another. Under the parallel schedule, the threads of a block are pool
// threads (one OS thread per emulated thread) that wait on their own
// semaphores at barriers. Under the serial schedules, which run one thread
// at a time anyway, the threads of a block are fibers (ucontext) on one
// runner thread: a barrier switches back to the runner, which resumes the
// next thread in the schedule's order. Both share the barrier logic below,
// under B.mu.

namespace fleet_emu {

// Launch mirrors launchDesc in module.go, field for field.
struct Launch {
	int grid[3];
	int block[3];
	long long shared_bytes;
	long long max_shared_bytes; // dynamic shared memory allowed without error
	int schedule;               // 0 parallel, 1 forward, 2 reverse
	int timeout_ms;             // 0: wait forever
	char *err;                  // message buffer for a failed launch
	long long err_cap;
};

enum Schedule { kParallel = 0, kForward = 1, kReverse = 2 };

constexpr int kMaxThreads = 1024;
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr long long kHardMaxShared = 227 * 1024; // the most any current GPU gives one block
constexpr size_t kSmemGuard = 256;                // guard bytes around dynamic shared memory
constexpr unsigned char kSmemGuardByte = 0xa5;
constexpr int kIdleExitMs = 5000;           // a pool thread idle this long exits
constexpr size_t kThreadStack = 2 << 20;    // stack of a pool thread
constexpr size_t kFiberStack = 256 << 10;   // stack of a fiber, below a guard page
constexpr size_t kGuardPage = 4096;

// Abort unwinds a thread's kernel code once the launch has failed.
struct Abort {};

enum State : unsigned char { kRunnable, kAtBlock, kAtWarp, kDone };
enum WarpOp : unsigned char { kShuffle, kVote, kSync };

// Warp holds the lanes of one warp waiting at warp operations. Lanes that
// wait with the same mask form a group; the group completes when every live
// lane of its mask waits in it. Lanes in divergent branches may so wait
// with different masks at once, as on a GPU.
struct Warp {
	unsigned live;    // lanes that exist and have not returned
	unsigned waiting; // lanes waiting at a warp operation
	unsigned mask[32];
	unsigned char op[32];
	int src[32];        // lane each shuffling lane reads
	uint64_t value[32]; // what each lane brought
	uint64_t result[32];
};

struct Block {
	std::mutex mu;
	int n;       // threads in the block
	int live;    // threads that have not returned
	int blocked; // threads waiting at a barrier
	int done;    // threads finished (returned or aborted)
	int bar_arrived, bar_count, bar_result;
	int schedule;
	bool failed;
	char err[1024];
	State state[kMaxThreads];
	bool parked[kMaxThreads]; // parallel: waiting on its semaphore for a wake
	int order[kMaxThreads];   // serial: the order of preference
	int next;                 // serial: the thread to resume next, or -1
	Warp warp[kMaxWarps];
};

struct Worker {
	std::binary_semaphore sem{0};
};

struct Fiber {
	ucontext_t ctx;
	unsigned char *stack; // kFiberStack bytes above a guard page
	bool started;
};

static std::mutex launch_mu; // one launch at a time per module
static bool broken;          // a launch timed out: its threads may still run
static Worker *workers[kMaxThreads];
static bool worker_alive[kMaxThreads];
static Fiber fibers[kMaxThreads];
static ucontext_t runner_ctx;             // the serial runner between fibers
static bool runner_alive;
static std::binary_semaphore runner_go{0}; // starts a serial block
static Block B;
static std::binary_semaphore block_done{0};

// The block being run.
static void (*cur_body)(void **);
static void **cur_args;
static dim3 cur_grid, cur_block;
static uint3 cur_block_idx;
static unsigned char *cur_smem; // dynamic shared memory (inside its guards)
static thread_local int self = -1;

extern "C" char __start_fleet_emu_shared[] __attribute__((weak));
extern "C" char __stop_fleet_emu_shared[] __attribute__((weak));

static void thread_coords(int i, unsigned *x, unsigned *y, unsigned *z) {
	*x = i % cur_block.x;
	*y = (i / cur_block.x) % cur_block.y;
	*z = i / (cur_block.x * cur_block.y);
}

// become makes the calling OS thread emulated thread i of the current block.
static void become(int i) {
	self = i;
	unsigned x, y, z;
	thread_coords(i, &x, &y, &z);
	threadIdx = uint3{x, y, z};
	blockIdx = cur_block_idx;
	blockDim = cur_block;
	gridDim = cur_grid;
}

static void wake(int i) {
	B.parked[i] = false;
	workers[i]->sem.release();
}

// failf records the first failure. Under the parallel schedule it wakes
// every parked thread so that it unwinds; the serial runner stops resuming
// fibers. Call with B.mu held.
__attribute__((format(printf, 1, 2))) static void failf(const char *fmt, ...) {
	if (!B.failed) {
		B.failed = true;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(B.err, sizeof B.err, fmt, ap);
		va_end(ap);
	}
	if (B.schedule == kParallel) {
		for (int i = 0; i < B.n; i++) {
			if (B.parked[i]) {
				wake(i);
			}
		}
	}
}

// pick_next returns the runnable thread a serial schedule runs next, or -1.
static int pick_next() {
	for (int k = 0; k < B.n; k++) {
		int i = B.order[k];
		if (B.state[i] == kRunnable) {
			return i;
		}
	}
	return -1;
}

static void release_waiter(int i) {
	B.state[i] = kRunnable;
	B.blocked--;
	if (B.schedule == kParallel && i != self) {
		wake(i);
	}
}

static void complete_block_barrier() {
	B.bar_result = B.bar_count;
	B.bar_arrived = 0;
	B.bar_count = 0;
	for (int i = 0; i < B.n; i++) {
		if (B.state[i] == kAtBlock) {
			release_waiter(i);
		}
	}
}

// group returns the lanes of W waiting with mask m.
static unsigned group(const Warp &W, unsigned m) {
	unsigned g = 0;
	for (int l = 0; l < 32; l++) {
		if ((W.waiting >> l & 1) && W.mask[l] == m) {
			g |= 1u << l;
		}
	}
	return g;
}

// try_complete_warp completes the group of lanes of warp w waiting with
// mask m if every live lane of m is in it.
static void try_complete_warp(int w, unsigned m) {
	Warp &W = B.warp[w];
	unsigned g = group(W, m);
	if (g == 0 || (g & W.live & m) != (W.live & m)) {
		return;
	}
	unsigned votes = 0;
	for (int l = 0; l < 32; l++) {
		if ((g >> l & 1) && W.op[l] == kVote && W.value[l] != 0) {
			votes |= 1u << l;
		}
	}
	for (int l = 0; l < 32; l++) {
		if (!(g >> l & 1)) {
			continue;
		}
		switch (W.op[l]) {
		case kShuffle: {
			int s = W.src[l];
			// A lane outside the group (returned, absent from the mask,
			// beyond the block, or elsewhere) gives garbage on a GPU:
			// poison.
			W.result[l] = (s >= 0 && s < 32 && (g >> s & 1)) ? W.value[s] : ~uint64_t(0);
			break;
		}
		case kVote:
			W.result[l] = uint64_t(votes) | uint64_t(g) << 32;
			break;
		default:
			W.result[l] = 0;
		}
		release_waiter(w * 32 + l);
	}
	W.waiting &= ~g;
}

// try_complete_warp_all tries every group of warp w (after a lane returned).
static void try_complete_warp_all(int w) {
	Warp &W = B.warp[w];
	for (int l = 0; l < 32; l++) {
		if (W.waiting >> l & 1) {
			try_complete_warp(w, W.mask[l]);
		}
	}
}

static void deadlock() {
	int at_block = 0, first_block = -1, at_warp = 0, first_warp = -1;
	for (int i = 0; i < B.n; i++) {
		if (B.state[i] == kAtBlock) {
			at_block++;
			if (first_block < 0) {
				first_block = i;
			}
		} else if (B.state[i] == kAtWarp) {
			at_warp++;
			if (first_warp < 0) {
				first_warp = i;
			}
		}
	}
	char what[256];
	if (first_warp >= 0) {
		const Warp &W = B.warp[first_warp / 32];
		unsigned m = W.mask[first_warp % 32];
		unsigned x, y, z;
		thread_coords(first_warp, &x, &y, &z);
		snprintf(what, sizeof what,
			"%d at warp operations (in warp %d, lanes 0x%08x wait with mask 0x%08x for lanes 0x%08x; first thread (%u,%u,%u))",
			at_warp, first_warp / 32, group(W, m), m, m & W.live & ~group(W, m), x, y, z);
	} else {
		snprintf(what, sizeof what, "none at warp operations");
	}
	unsigned x = 0, y = 0, z = 0;
	if (first_block >= 0) {
		thread_coords(first_block, &x, &y, &z);
	}
	failf("deadlock in block (%u,%u,%u): of %d live threads, %d wait at __syncthreads (first (%u,%u,%u)) and %s",
		cur_block_idx.x, cur_block_idx.y, cur_block_idx.z, B.live, at_block, x, y, z, what);
}

// wait_turn returns when this thread may run on. Call with B.mu held, after
// any change of state.
static void wait_turn(std::unique_lock<std::mutex> &lk) {
	if (B.failed) {
		throw Abort{};
	}
	if (B.schedule == kParallel) {
		if (B.state[self] != kRunnable) {
			B.parked[self] = true;
			lk.unlock();
			workers[self]->sem.acquire();
			lk.lock();
		}
	} else {
		B.next = pick_next(); // >= 0: a deadlock would have failed the launch
		if (B.next != self) {
			int me = self;
			lk.unlock();
			swapcontext(&fibers[me].ctx, &runner_ctx);
			lk.lock();
		}
	}
	if (B.failed) {
		throw Abort{};
	}
}

__attribute__((noipa)) static int block_barrier(int pred) {
	std::unique_lock<std::mutex> lk(B.mu);
	if (B.failed) {
		throw Abort{};
	}
	B.state[self] = kAtBlock;
	B.blocked++;
	B.bar_arrived++;
	if (pred) {
		B.bar_count++;
	}
	if (B.bar_arrived == B.live) {
		complete_block_barrier();
	} else if (B.blocked == B.live) {
		deadlock();
	}
	wait_turn(lk);
	return B.bar_result;
}

__attribute__((noipa)) static uint64_t warp_op(const char *what, unsigned mask, WarpOp op, int src, uint64_t value) {
	std::unique_lock<std::mutex> lk(B.mu);
	if (B.failed) {
		throw Abort{};
	}
	int lane = self % 32;
	Warp &W = B.warp[self / 32];
	if (!(mask >> lane & 1)) {
		unsigned x, y, z;
		thread_coords(self, &x, &y, &z);
		failf("%s in block (%u,%u,%u): thread (%u,%u,%u), lane %d, is not in its mask 0x%08x",
			what, cur_block_idx.x, cur_block_idx.y, cur_block_idx.z, x, y, z, lane, mask);
		throw Abort{};
	}
	W.waiting |= 1u << lane;
	W.mask[lane] = mask;
	W.op[lane] = op;
	W.src[lane] = src;
	W.value[lane] = value;
	B.state[self] = kAtWarp;
	B.blocked++;
	try_complete_warp(self / 32, mask);
	if (B.state[self] != kRunnable && B.blocked == B.live) {
		deadlock();
	}
	wait_turn(lk);
	return W.result[lane];
}

// thread_exit drops a returned (or aborted) thread out of the block's
// barriers, which may complete them. It returns whether this was the
// block's last thread.
static bool thread_exit() {
	std::lock_guard<std::mutex> lk(B.mu);
	B.state[self] = kDone;
	B.live--;
	int w = self / 32;
	B.warp[w].live &= ~(1u << (self % 32));
	if (!B.failed) {
		if (B.bar_arrived > 0 && B.bar_arrived == B.live) {
			complete_block_barrier();
		}
		try_complete_warp_all(w);
		if (B.live > 0 && B.blocked == B.live) {
			deadlock();
		}
	}
	if (B.schedule != kParallel) {
		B.next = B.failed ? -1 : pick_next();
	}
	return ++B.done == B.n;
}

// run_kernel runs the kernel as the current emulated thread, then drops it
// out of the block.
static bool run_kernel() {
	bool failed;
	{
		std::lock_guard<std::mutex> lk(B.mu);
		failed = B.failed;
	}
	if (!failed) {
		try {
			cur_body(cur_args);
		} catch (Abort &) {
		} catch (std::exception &e) {
			std::lock_guard<std::mutex> lk(B.mu);
			failf("thread (%u,%u,%u) of block (%u,%u,%u) threw: %s", threadIdx.x, threadIdx.y, threadIdx.z,
				cur_block_idx.x, cur_block_idx.y, cur_block_idx.z, e.what());
		} catch (...) {
			std::lock_guard<std::mutex> lk(B.mu);
			failf("thread (%u,%u,%u) of block (%u,%u,%u) threw an exception", threadIdx.x, threadIdx.y, threadIdx.z,
				cur_block_idx.x, cur_block_idx.y, cur_block_idx.z);
		}
	}
	return thread_exit();
}

static void *worker_main(void *arg) {
	int i = (int)(intptr_t)arg;
	Worker *w = workers[i];
	for (;;) {
		if (!w->sem.try_acquire_for(std::chrono::milliseconds(kIdleExitMs))) {
			// Idle: leave the pool, unless a launch is about to wake us.
			// Launches wake workers only while holding launch_mu.
			if (!launch_mu.try_lock()) {
				continue;
			}
			if (!w->sem.try_acquire()) {
				worker_alive[i] = false;
				launch_mu.unlock();
				return nullptr;
			}
			launch_mu.unlock();
		}
		become(i);
		if (run_kernel()) {
			block_done.release();
		}
	}
}

static void fiber_main() {
	run_kernel(); // the runner sees B.next
}

// run_serial_block runs the current block's threads as fibers, one at a
// time, in the schedule's order: each runs until it waits or returns, and
// sets B.next to the thread to resume.
static void run_serial_block() {
	int next;
	{
		std::lock_guard<std::mutex> lk(B.mu);
		B.next = B.failed ? -1 : B.order[0];
		next = B.next;
	}
	for (int i = 0; i < B.n; i++) {
		fibers[i].started = false;
	}
	while (next >= 0) {
		Fiber &f = fibers[next];
		become(next);
		if (!f.started) {
			getcontext(&f.ctx);
			f.ctx.uc_stack.ss_sp = f.stack;
			f.ctx.uc_stack.ss_size = kFiberStack;
			f.ctx.uc_link = &runner_ctx;
			makecontext(&f.ctx, fiber_main, 0);
			f.started = true;
		}
		swapcontext(&runner_ctx, &f.ctx);
		std::lock_guard<std::mutex> lk(B.mu);
		next = B.failed ? -1 : B.next;
	}
	// Fibers left waiting when the block failed are abandoned: they hold
	// no lock, and the next block starts them afresh.
}

static void *runner_main(void *) {
	for (;;) {
		runner_go.acquire();
		run_serial_block();
		block_done.release();
	}
}

static bool start_thread(void *(*fn)(void *), void *arg, char *err, size_t cap) {
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, kThreadStack);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t th;
	int rc = pthread_create(&th, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	if (rc != 0) {
		snprintf(err, cap, "cannot start a thread: %s", strerror(rc));
		return false;
	}
	return true;
}

// ensure_threads makes ready what a block of n threads under schedule
// needs: pool threads 0..n-1, or the runner and n fiber stacks. Call with
// launch_mu held.
static bool ensure_threads(int schedule, int n, char *err, size_t cap) {
	if (schedule == kParallel) {
		for (int i = 0; i < n; i++) {
			if (worker_alive[i]) {
				continue;
			}
			if (!workers[i]) {
				workers[i] = new Worker;
			}
			if (!start_thread(worker_main, (void *)(intptr_t)i, err, cap)) {
				return false;
			}
			worker_alive[i] = true;
		}
		return true;
	}
	for (int i = 0; i < n; i++) {
		if (fibers[i].stack) {
			continue;
		}
		void *p = mmap(nullptr, kGuardPage + kFiberStack, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
		if (p == MAP_FAILED) {
			snprintf(err, cap, "cannot map a fiber stack: %s", strerror(errno));
			return false;
		}
		mprotect(p, kGuardPage, PROT_NONE); // a stack overflow faults
		fibers[i].stack = (unsigned char *)p + kGuardPage;
	}
	if (!runner_alive) {
		if (!start_thread(runner_main, nullptr, err, cap)) {
			return false;
		}
		runner_alive = true;
	}
	return true;
}

__attribute__((format(printf, 2, 3))) static int launch_error(const Launch *l, const char *fmt, ...) {
	if (l->err && l->err_cap > 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(l->err, (size_t)l->err_cap, fmt, ap);
		va_end(ap);
	}
	return 1;
}

static void *dynamic_shared() { return cur_smem; }

static int launch(const Launch *l, void **args, void (*body)(void **), const char *name) {
	std::lock_guard<std::mutex> guard(launch_mu);
	if (broken) {
		return launch_error(l, "%s: a previous launch of this module timed out; the module is unusable", name);
	}
	const int *g = l->grid, *b = l->block;
	if (b[0] < 1 || b[1] < 1 || b[2] < 1 || g[0] < 1 || g[1] < 1 || g[2] < 1) {
		return launch_error(l, "%s: grid (%d,%d,%d) and block (%d,%d,%d) must be at least 1 in every dimension",
			name, g[0], g[1], g[2], b[0], b[1], b[2]);
	}
	if (b[0] > 1024 || b[1] > 1024 || b[2] > 64) {
		return launch_error(l, "%s: block (%d,%d,%d) exceeds (1024,1024,64)", name, b[0], b[1], b[2]);
	}
	long long n = (long long)b[0] * b[1] * b[2];
	if (n > kMaxThreads) {
		return launch_error(l, "%s: block (%d,%d,%d) has %lld threads; the most is %d", name, b[0], b[1], b[2], n, kMaxThreads);
	}
	if (g[1] > 65535 || g[2] > 65535) {
		return launch_error(l, "%s: grid (%d,%d,%d) exceeds 65535 in y or z", name, g[0], g[1], g[2]);
	}
	if (l->shared_bytes < 0) {
		return launch_error(l, "%s: negative shared memory size %lld", name, l->shared_bytes);
	}
	if (l->shared_bytes > l->max_shared_bytes) {
		return launch_error(l, "%s: %lld bytes of dynamic shared memory, over the %lld allowed "
			"(above 48 KiB a kernel must opt in, as with cuFuncSetAttribute)", name, l->shared_bytes, l->max_shared_bytes);
	}
	if (l->shared_bytes > kHardMaxShared) {
		return launch_error(l, "%s: %lld bytes of dynamic shared memory; no GPU gives a block more than %lld",
			name, l->shared_bytes, kHardMaxShared);
	}
	if (l->schedule < kParallel || l->schedule > kReverse) {
		return launch_error(l, "%s: unknown schedule %d", name, l->schedule);
	}
	char err[256];
	if (!ensure_threads(l->schedule, (int)n, err, sizeof err)) {
		return launch_error(l, "%s: %s", name, err);
	}

	size_t smem_size = (size_t)l->shared_bytes;
	unsigned char *smem_all = (unsigned char *)malloc(smem_size + 2 * kSmemGuard);
	if (!smem_all) {
		return launch_error(l, "%s: out of memory for %zu bytes of shared memory", name, smem_size);
	}
	cur_body = body;
	cur_args = args;
	cur_grid = dim3(g[0], g[1], g[2]);
	cur_block = dim3(b[0], b[1], b[2]);
	cur_smem = smem_all + kSmemGuard;
	size_t static_size = __stop_fleet_emu_shared - __start_fleet_emu_shared;
	int rc = 0;

	for (int bz = 0; bz < g[2] && rc == 0; bz++) {
		for (int by = 0; by < g[1] && rc == 0; by++) {
			for (int bx = 0; bx < g[0] && rc == 0; bx++) {
				cur_block_idx = uint3{(unsigned)bx, (unsigned)by, (unsigned)bz};
				if (static_size) {
					memset(__start_fleet_emu_shared, 0xff, static_size);
				}
				memset(smem_all, kSmemGuardByte, kSmemGuard);
				memset(cur_smem, 0xff, smem_size);
				memset(cur_smem + smem_size, kSmemGuardByte, kSmemGuard);
				{
					std::lock_guard<std::mutex> lk(B.mu);
					B.n = (int)n;
					B.live = (int)n;
					B.blocked = 0;
					B.done = 0;
					B.bar_arrived = B.bar_count = B.bar_result = 0;
					B.schedule = l->schedule;
					B.failed = false;
					B.err[0] = 0;
					for (int i = 0; i < n; i++) {
						B.state[i] = kRunnable;
						B.parked[i] = true;
						B.order[i] = l->schedule == kReverse ? (int)n - 1 - i : i;
					}
					for (int w = 0; w < (n + 31) / 32; w++) {
						Warp &W = B.warp[w];
						int lanes = (int)n - w * 32 < 32 ? (int)n - w * 32 : 32;
						W.live = lanes == 32 ? ~0u : (1u << lanes) - 1;
						W.waiting = 0;
					}
					if (l->schedule == kParallel) {
						for (int i = 0; i < n; i++) {
							wake(i);
						}
					} else {
						runner_go.release();
					}
				}
				if (l->timeout_ms > 0) {
					if (!block_done.try_acquire_for(std::chrono::milliseconds(l->timeout_ms))) {
						std::lock_guard<std::mutex> lk(B.mu);
						broken = true;
						failf("block (%d,%d,%d) did not finish within %d ms (an endless loop, or a thread spinning on another)",
							bx, by, bz, l->timeout_ms);
						// The threads may still run: leave the shared
						// memory to them.
						return launch_error(l, "%s: %s", name, B.err);
					}
				} else {
					block_done.acquire();
				}
				std::lock_guard<std::mutex> lk(B.mu);
				if (B.failed) {
					rc = launch_error(l, "%s: %s", name, B.err);
					break;
				}
				for (size_t k = 0; k < kSmemGuard; k++) {
					if (smem_all[kSmemGuard - 1 - k] != kSmemGuardByte) {
						rc = launch_error(l, "%s: block (%d,%d,%d) wrote dynamic shared memory out of bounds, %zu bytes before its start "
							"(%lld bytes were requested)", name, bx, by, bz, k + 1, l->shared_bytes);
						break;
					}
					if (cur_smem[smem_size + k] != kSmemGuardByte) {
						rc = launch_error(l, "%s: block (%d,%d,%d) wrote dynamic shared memory out of bounds at byte %zu "
							"(%lld bytes were requested)", name, bx, by, bz, smem_size + k, l->shared_bytes);
						break;
					}
				}
			}
		}
	}
	free(smem_all);
	cur_smem = nullptr;
	return rc;
}

// trap fails the launch from inside a kernel (__trap, a bad warp width).
__attribute__((format(printf, 1, 2))) static void trap(const char *fmt, ...) {
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	std::lock_guard<std::mutex> lk(B.mu);
	unsigned x, y, z;
	thread_coords(self, &x, &y, &z);
	failf("thread (%u,%u,%u) of block (%u,%u,%u): %s", x, y, z, cur_block_idx.x, cur_block_idx.y, cur_block_idx.z, msg);
	throw Abort{};
}

static inline int lane_id() { return self % 32; }

template <class T> static inline uint64_t to_bits(T v) {
	static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "warp shuffles move values of at most 8 bytes");
	uint64_t u = 0;
	memcpy(&u, &v, sizeof v);
	return u;
}

template <class T> static inline T from_bits(uint64_t u) {
	T v;
	memcpy(&v, &u, sizeof v);
	return v;
}

// shuffle follows PTX shfl.sync: segments of width lanes; a source outside
// the segment's bounds gives the lane its own value.
enum ShuffleMode { kIdx, kUp, kDown, kBfly };

template <class T> static T shuffle(const char *what, unsigned mask, T v, int b, int width, ShuffleMode mode) {
	if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
		trap("%s: width %d is not a power of two from 1 to 32", what, width);
	}
	int lane = lane_id();
	int seg = ~(width - 1) & 31; // lane bits that pick the segment
	int bval = b & 31;
	int min_lane = lane & seg;
	int max_lane = min_lane | (31 & ~seg);
	int j = lane;
	bool ok = true;
	switch (mode) {
	case kIdx:
		j = min_lane | (bval & ~seg);
		break;
	case kUp:
		j = lane - bval;
		ok = j >= min_lane;
		break;
	case kDown:
		j = lane + bval;
		ok = j <= max_lane;
		break;
	case kBfly:
		j = lane ^ bval;
		ok = j <= max_lane;
		break;
	}
	if (!ok) {
		j = lane;
	}
	return from_bits<T>(warp_op(what, mask, kShuffle, j, to_bits(v)));
}

static inline uint64_t vote(const char *what, unsigned mask, int pred) {
	return warp_op(what, mask, kVote, 0, pred != 0);
}

static inline long long clock_ns() {
	return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace fleet_emu

// ---- Synchronisation and warp operations -------------------------------------

#define FLEET_DYNAMIC_SHARED(T, name) T *name = reinterpret_cast<T *>(fleet_emu::dynamic_shared())

static inline void __syncthreads() { fleet_emu::block_barrier(0); }
static inline int __syncthreads_count(int pred) { return fleet_emu::block_barrier(pred); }
static inline int __syncthreads_and(int pred) { return fleet_emu::block_barrier(!pred) == 0; }
static inline int __syncthreads_or(int pred) { return fleet_emu::block_barrier(pred) != 0; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { fleet_emu::warp_op("__syncwarp", mask, fleet_emu::kSync, 0, 0); }
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
static inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <class T> static inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = warpSize) {
	return fleet_emu::shuffle("__shfl_sync", mask, var, srcLane, width, fleet_emu::kIdx);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T var, unsigned int delta, int width = warpSize) {
	return fleet_emu::shuffle("__shfl_up_sync", mask, var, (int)delta, width, fleet_emu::kUp);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T var, unsigned int delta, int width = warpSize) {
	return fleet_emu::shuffle("__shfl_down_sync", mask, var, (int)delta, width, fleet_emu::kDown);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = warpSize) {
	return fleet_emu::shuffle("__shfl_xor_sync", mask, var, laneMask, width, fleet_emu::kBfly);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return (unsigned)fleet_emu::vote("__ballot_sync", mask, pred); }
static inline int __any_sync(unsigned mask, int pred) { return (unsigned)fleet_emu::vote("__any_sync", mask, pred) != 0; }
static inline int __all_sync(unsigned mask, int pred) {
	uint64_t r = fleet_emu::vote("__all_sync", mask, pred);
	return (unsigned)r == (unsigned)(r >> 32);
}
// __activemask: the lanes of the warp that have not returned (the emulator
// does not track divergence within a warp).
static inline unsigned __activemask() {
	std::lock_guard<std::mutex> lk(fleet_emu::B.mu);
	return fleet_emu::B.warp[fleet_emu::self / 32].live;
}
static inline unsigned __lanemask_lt() { return (1u << fleet_emu::lane_id()) - 1; }

#define __trap() fleet_emu::trap("__trap()")

// ---- Atomics ------------------------------------------------------------------

#define FLEET_EMU_ATOMIC(name, T, expr) \
	static inline T name(T *p, T v) { return std::atomic_ref<T>(*p).expr; }
FLEET_EMU_ATOMIC(atomicAdd, float, fetch_add(v))
FLEET_EMU_ATOMIC(atomicAdd, double, fetch_add(v))
FLEET_EMU_ATOMIC(atomicAdd, int, fetch_add(v))
FLEET_EMU_ATOMIC(atomicAdd, unsigned int, fetch_add(v))
FLEET_EMU_ATOMIC(atomicAdd, unsigned long long, fetch_add(v))
FLEET_EMU_ATOMIC(atomicSub, int, fetch_sub(v))
FLEET_EMU_ATOMIC(atomicSub, unsigned int, fetch_sub(v))
FLEET_EMU_ATOMIC(atomicExch, float, exchange(v))
FLEET_EMU_ATOMIC(atomicExch, int, exchange(v))
FLEET_EMU_ATOMIC(atomicExch, unsigned int, exchange(v))
FLEET_EMU_ATOMIC(atomicExch, unsigned long long, exchange(v))
FLEET_EMU_ATOMIC(atomicAnd, int, fetch_and(v))
FLEET_EMU_ATOMIC(atomicAnd, unsigned int, fetch_and(v))
FLEET_EMU_ATOMIC(atomicAnd, unsigned long long, fetch_and(v))
FLEET_EMU_ATOMIC(atomicOr, int, fetch_or(v))
FLEET_EMU_ATOMIC(atomicOr, unsigned int, fetch_or(v))
FLEET_EMU_ATOMIC(atomicOr, unsigned long long, fetch_or(v))
FLEET_EMU_ATOMIC(atomicXor, int, fetch_xor(v))
FLEET_EMU_ATOMIC(atomicXor, unsigned int, fetch_xor(v))
FLEET_EMU_ATOMIC(atomicXor, unsigned long long, fetch_xor(v))
#undef FLEET_EMU_ATOMIC

namespace fleet_emu {
template <class T, class F> static inline T atomic_update(T *p, F f) {
	std::atomic_ref<T> a(*p);
	T old = a.load();
	while (!a.compare_exchange_weak(old, f(old))) {
	}
	return old;
}
} // namespace fleet_emu

#define FLEET_EMU_MINMAX(T)                                                                              \
	static inline T atomicMax(T *p, T v) {                                                             \
		return fleet_emu::atomic_update(p, [v](T o) { return o < v ? v : o; });                       \
	}                                                                                                  \
	static inline T atomicMin(T *p, T v) {                                                             \
		return fleet_emu::atomic_update(p, [v](T o) { return v < o ? v : o; });                       \
	}                                                                                                  \
	static inline T atomicCAS(T *p, T compare, T v) {                                                  \
		std::atomic_ref<T>(*p).compare_exchange_strong(compare, v);                                    \
		return compare;                                                                                \
	}
FLEET_EMU_MINMAX(int)
FLEET_EMU_MINMAX(unsigned int)
FLEET_EMU_MINMAX(long long)
FLEET_EMU_MINMAX(unsigned long long)
#undef FLEET_EMU_MINMAX
static inline unsigned short atomicCAS(unsigned short *p, unsigned short compare, unsigned short v) {
	std::atomic_ref<unsigned short>(*p).compare_exchange_strong(compare, v);
	return compare;
}
static inline unsigned int atomicInc(unsigned int *p, unsigned int v) {
	return fleet_emu::atomic_update(p, [v](unsigned int o) { return o >= v ? 0u : o + 1; });
}
static inline unsigned int atomicDec(unsigned int *p, unsigned int v) {
	return fleet_emu::atomic_update(p, [v](unsigned int o) { return (o == 0 || o > v) ? v : o - 1; });
}
#define atomicAdd_block atomicAdd
#define atomicAdd_system atomicAdd
#define atomicMax_block atomicMax
#define atomicExch_block atomicExch
#define atomicCAS_block atomicCAS

// ---- Math and bit intrinsics -----------------------------------------------------
// glibc declares __expf and friends itself, so the double-underscore CUDA
// names are macros onto fleet_emu_ functions. Fast-math intrinsics are the
// exact functions here; tests compare with a tolerance.

template <class A, class B> static inline std::common_type_t<A, B> min(A a, B b) {
	using C = std::common_type_t<A, B>;
	return (C)b < (C)a ? (C)b : (C)a;
}
template <class A, class B> static inline std::common_type_t<A, B> max(A a, B b) {
	using C = std::common_type_t<A, B>;
	return (C)a < (C)b ? (C)b : (C)a;
}

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float fleet_emu_saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x != x ? 0.0f : x)); }
static inline float fleet_emu_fdividef(float a, float b) { return a / b; }
static inline float fleet_emu_expf(float x) { return expf(x); }
static inline float fleet_emu_exp10f(float x) { return powf(10.0f, x); }
static inline float fleet_emu_logf(float x) { return logf(x); }
static inline float fleet_emu_log2f(float x) { return log2f(x); }
static inline float fleet_emu_log10f(float x) { return log10f(x); }
static inline float fleet_emu_powf(float x, float y) { return powf(x, y); }
static inline float fleet_emu_sinf(float x) { return sinf(x); }
static inline float fleet_emu_cosf(float x) { return cosf(x); }
static inline float fleet_emu_tanf(float x) { return tanf(x); }
static inline void fleet_emu_sincosf(float x, float *s, float *c) { *s = sinf(x); *c = cosf(x); }
static inline float fleet_emu_fadd(float a, float b) { return a + b; }
static inline float fleet_emu_fsub(float a, float b) { return a - b; }
static inline float fleet_emu_fmul(float a, float b) { return a * b; }
static inline float fleet_emu_fdiv(float a, float b) { return a / b; }
static inline float fleet_emu_frcp(float a) { return 1.0f / a; }
static inline float fleet_emu_fsqrt(float a) { return sqrtf(a); }
static inline float fleet_emu_fmaf(float a, float b, float c) { return fmaf(a, b, c); }
#define __saturatef fleet_emu_saturatef
#define __fdividef fleet_emu_fdividef
#define __expf fleet_emu_expf
#define __exp10f fleet_emu_exp10f
#define __logf fleet_emu_logf
#define __log2f fleet_emu_log2f
#define __log10f fleet_emu_log10f
#define __powf fleet_emu_powf
#define __sinf fleet_emu_sinf
#define __cosf fleet_emu_cosf
#define __tanf fleet_emu_tanf
#define __sincosf fleet_emu_sincosf
#define __fadd_rn fleet_emu_fadd
#define __fsub_rn fleet_emu_fsub
#define __fmul_rn fleet_emu_fmul
static inline double fleet_emu_dmul(double a, double b) { return a * b; }
#define __dmul_rn fleet_emu_dmul
#define __fdiv_rn fleet_emu_fdiv
#define __frcp_rn fleet_emu_frcp
#define __fsqrt_rn fleet_emu_fsqrt
#define __fmaf_rn fleet_emu_fmaf
#define __frsqrt_rn rsqrtf

static inline unsigned int fleet_emu_float_as_uint(float x) { return std::bit_cast<unsigned int>(x); }
static inline float fleet_emu_uint_as_float(unsigned int x) { return std::bit_cast<float>(x); }
static inline int fleet_emu_float_as_int(float x) { return std::bit_cast<int>(x); }
static inline float fleet_emu_int_as_float(int x) { return std::bit_cast<float>(x); }
static inline long long fleet_emu_double_as_longlong(double x) { return std::bit_cast<long long>(x); }
static inline double fleet_emu_longlong_as_double(long long x) { return std::bit_cast<double>(x); }
static inline int fleet_emu_float2int_rn(float x) { return (int)nearbyintf(x); }
static inline int fleet_emu_float2int_rz(float x) { return (int)x; }
static inline int fleet_emu_float2int_rd(float x) { return (int)floorf(x); }
static inline int fleet_emu_float2int_ru(float x) { return (int)ceilf(x); }
static inline unsigned fleet_emu_float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
static inline float fleet_emu_int2float_rn(int x) { return (float)x; }
static inline float fleet_emu_uint2float_rn(unsigned x) { return (float)x; }
#define __float_as_uint fleet_emu_float_as_uint
#define __uint_as_float fleet_emu_uint_as_float
#define __float_as_int fleet_emu_float_as_int
#define __int_as_float fleet_emu_int_as_float
#define __double_as_longlong fleet_emu_double_as_longlong
#define __longlong_as_double fleet_emu_longlong_as_double
#define __float2int_rn fleet_emu_float2int_rn
#define __float2int_rz fleet_emu_float2int_rz
#define __float2int_rd fleet_emu_float2int_rd
#define __float2int_ru fleet_emu_float2int_ru
#define __float2uint_rn fleet_emu_float2uint_rn
#define __int2float_rn fleet_emu_int2float_rn
#define __uint2float_rn fleet_emu_uint2float_rn

static inline int fleet_emu_popc(unsigned x) { return __builtin_popcount(x); }
static inline int fleet_emu_popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int fleet_emu_clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int fleet_emu_clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline int fleet_emu_ffs(int x) { return __builtin_ffs(x); }
static inline int fleet_emu_ffsll(long long x) { return __builtin_ffsll(x); }
static inline unsigned fleet_emu_brev(unsigned x) {
	unsigned r = 0;
	for (int i = 0; i < 32; i++) {
		r |= ((x >> i) & 1u) << (31 - i);
	}
	return r;
}
#define __popc fleet_emu_popc
#define __popcll fleet_emu_popcll
#define __clz fleet_emu_clz
#define __clzll fleet_emu_clzll
#define __ffs fleet_emu_ffs
#define __ffsll fleet_emu_ffsll
#define __brev fleet_emu_brev

template <class T> static inline T fleet_emu_ldg(const T *p) { return *p; }
#define __ldg fleet_emu_ldg

static inline long long clock64() { return fleet_emu::clock_ns(); }
static inline void fleet_emu_nanosleep(unsigned ns) {
	struct timespec ts = {0, (long)ns};
	nanosleep(&ts, nullptr);
}
#define __nanosleep fleet_emu_nanosleep

// ---- Launch wrapper support ------------------------------------------------------

namespace fleet_emu {
// Params maps a kernel's type onto its parameter types without const on the
// pointee or the parameter, so a static_assert can check the signature the
// Go side parsed against the one the compiler sees.
template <class T> struct strip_param { using type = std::remove_cv_t<T>; };
template <class T> struct strip_param<T *> { using type = std::remove_cv_t<T> *; };
template <class F> struct params;
template <class... P> struct params<void(P...)> { using type = void(typename strip_param<std::remove_cv_t<P>>::type...); };
template <class F> using params_t = typename params<F>::type;
} // namespace fleet_emu
