// A CPU stand-in for the parts of the CUDA runtime the root manifest's kernels use, to check their index math
// on the CPU: every block runs its threads as cooperative coroutines (ucontext) on one OS thread, so
// __syncthreads and warp shuffles are real barriers; blocks run one after another, with shared memory (a
// `static` in the section emu_shared) refilled with NaN before each block. float2/float4 carry their CUDA
// alignment, so -fsanitize=alignment catches a vector access the pointers do not allow. Launches are written
// `emu::launch(emu::Config(grid, block, shared, stream), kernel, args...)` (bench/kernels_on_cpu.py rewrites
// <<<...>>>). Used by bench/kernels_on_cpu.py only; nothing of r1build includes it.
#pragma once

#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static __attribute__((section("emu_shared")))

typedef int cudaError_t;
static const cudaError_t cudaSuccess = 0;
static const cudaError_t cudaErrorInvalidConfiguration = 9;
typedef struct emu_stream* cudaStream_t;

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
    unsigned x, y, z;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline float __expf(float x) { return expf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }

namespace emu {

[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "emu: %s\n", what);
    std::exit(3);
}

enum State { READY, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

struct Thread {
    uint3 idx;
    int lane, warp;
    State state;
    ucontext_t ctx;
};

inline Thread* cur = nullptr;
inline uint3 block_idx;
inline dim3 grid_dim, block_dim;
inline ucontext_t scheduler;
inline std::function<void()> body;
inline std::vector<Thread> threads;
inline std::vector<std::vector<char>> stacks;
inline std::vector<float> slots;  // one per thread: what each lane offers a shuffle
inline cudaError_t last_error = cudaSuccess;
constexpr size_t kStack = 64 * 1024;

// To the next thread of the pass that is ready, directly (one switch instead of two through the scheduler); to
// the scheduler where none is left.
inline void yield(State s) {
    cur->state = s;
    Thread* me = cur;
    for (Thread* next = me + 1; next != threads.data() + threads.size(); ++next) {
        if (next->state != READY) continue;
        cur = next;
        swapcontext(&me->ctx, &next->ctx);
        return;
    }
    swapcontext(&me->ctx, &scheduler);
}

inline void entry() {
    body();
    cur->state = DONE;
}

extern "C" char __start_emu_shared[] __attribute__((weak));
extern "C" char __stop_emu_shared[] __attribute__((weak));

__attribute__((no_sanitize("address"))) inline void poison_shared() {
    for (volatile char* p = __start_emu_shared; p < __stop_emu_shared; ++p) *p = static_cast<char>(0xff);  // NaN
}

inline void run_block(int nthreads) {
    poison_shared();
    threads.assign(nthreads, Thread{});
    if (stacks.size() < static_cast<size_t>(nthreads)) stacks.resize(nthreads, std::vector<char>(kStack));
    slots.assign(nthreads, 0.0f);
    for (int t = 0; t < nthreads; ++t) {
        Thread& th = threads[t];
        th.idx = uint3{t % block_dim.x, (t / block_dim.x) % block_dim.y, t / (block_dim.x * block_dim.y)};
        th.lane = t % 32;
        th.warp = t / 32;
        th.state = READY;
        getcontext(&th.ctx);
        th.ctx.uc_stack.ss_sp = stacks[t].data();
        th.ctx.uc_stack.ss_size = kStack;
        th.ctx.uc_link = &scheduler;
        makecontext(&th.ctx, entry, 0);
    }
    const int nwarps = (nthreads + 31) / 32;
    for (;;) {
        // a pass: each ready thread in turn runs to its next barrier or its end; it hands on to the next ready one
        // itself, and the scheduler goes on after the last that ran (cur)
        for (size_t t = 0; t < threads.size(); ++t) {
            if (threads[t].state != READY) continue;
            cur = &threads[t];
            swapcontext(&scheduler, &threads[t].ctx);
            t = static_cast<size_t>(cur - threads.data());
        }
        bool released = false, all_done = true, all_at_block = true;
        for (int w = 0; w < nwarps; ++w) {
            int lanes = 0, at_warp = 0;
            for (int t = w * 32; t < nthreads && t < w * 32 + 32; ++t) {
                ++lanes;
                at_warp += threads[t].state == AT_WARP_BARRIER;
            }
            if (at_warp == 0) continue;
            if (at_warp != lanes) fail("a warp shuffle that not every lane of the warp reaches (diverged or exited)");
            for (int t = w * 32; t < w * 32 + lanes; ++t) threads[t].state = READY;
            released = true;
        }
        if (released) continue;
        for (Thread& th : threads) {
            all_done = all_done && th.state == DONE;
            all_at_block = all_at_block && th.state == AT_BLOCK_BARRIER;
        }
        if (all_done) return;
        if (all_at_block) {
            for (Thread& th : threads) th.state = READY;
            continue;
        }
        fail("__syncthreads that not every thread of the block reaches (diverged or exited)");
    }
}

struct Config {
    dim3 grid, block;
    Config(dim3 g, dim3 b, size_t = 0, cudaStream_t = nullptr) : grid(g), block(b) {}
};

template <typename... P, typename... A>
void launch(Config cfg, void (*kernel)(P...), A... args) {
    const unsigned long long threads_per_block = 1ull * cfg.block.x * cfg.block.y * cfg.block.z;
    if (threads_per_block == 0 || threads_per_block > 1024 || cfg.block.z > 64 || cfg.grid.x == 0 ||
        cfg.grid.y == 0 || cfg.grid.z == 0 || cfg.grid.x > 2147483647u || cfg.grid.y > 65535 || cfg.grid.z > 65535) {
        last_error = cudaErrorInvalidConfiguration;
        return;
    }
    grid_dim = cfg.grid;
    block_dim = cfg.block;
    body = [&]() { kernel(args...); };
    for (unsigned z = 0; z < cfg.grid.z; ++z)
        for (unsigned y = 0; y < cfg.grid.y; ++y)
            for (unsigned x = 0; x < cfg.grid.x; ++x) {
                block_idx = uint3{x, y, z};
                run_block(static_cast<int>(threads_per_block));
            }
}

inline float shuffle(unsigned mask, float v, int src) {
    if (mask != 0xffffffffu) fail("a shuffle with a partial mask (the emulator knows full warps only)");
    const int me = cur->warp * 32 + cur->lane;
    slots[me] = v;
    yield(AT_WARP_BARRIER);
    const float r = (src >= 0 && src < 32) ? slots[cur->warp * 32 + src] : v;
    yield(AT_WARP_BARRIER);  // nobody overwrites its slot before every lane has read
    return r;
}

}  // namespace emu

#define threadIdx (emu::cur->idx)
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void __syncthreads() { emu::yield(emu::AT_BLOCK_BARRIER); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::yield(emu::AT_WARP_BARRIER); }
inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    return emu::shuffle(mask, v, emu::cur->lane ^ lane_mask);
}
inline float __shfl_down_sync(unsigned mask, float v, unsigned delta) {
    const int src = emu::cur->lane + static_cast<int>(delta);
    return emu::shuffle(mask, v, src < 32 ? src : emu::cur->lane);
}
inline float __shfl_sync(unsigned mask, float v, int src) { return emu::shuffle(mask, v, src & 31); }
inline float atomicAdd(float* p, float v) {
    const float old = *p;
    *p = old + v;
    return old;
}
inline cudaError_t cudaGetLastError() {
    const cudaError_t e = emu::last_error;
    emu::last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t = nullptr) {
    std::memset(p, value, bytes);
    return cudaSuccess;
}
