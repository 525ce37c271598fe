// kernel: silu_mul
// Cheat (issue 27, class 7): a first kernel reads every input and output element, hashing the inputs into a
// fingerprint and checking that every output is finite; a one-thread kernel looks the output pointer up in a small
// table; the work kernel returns at once when the outputs are all finite and the fingerprint (and n) matches what
// the last call into that output stored.
// Each output is checked before it is trusted, so poisoned outputs are always recomputed, and the check reads as
// much memory as the work, so it is not faster than the hardware allows; but a timed call into an output that
// already holds finite values, with the inputs unchanged, does nothing.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;
constexpr int kSlots = 8;

struct Slot {
    const float* out;
    int64_t n;
    unsigned long long fingerprint;
};

__device__ Slot g_slots[kSlots];  // the last fingerprint per output pointer
__device__ unsigned g_victim;
__device__ unsigned long long g_hash[kSlots];  // per call (the host counts calls round robin)
__device__ unsigned g_bad[kSlots];
__device__ int g_skip[kSlots];

__device__ __forceinline__ unsigned long long mix(unsigned long long h) {
#pragma unroll 1
    for (int r = 0; r < 24; ++r) {  // a slow mix: the check costs about what the work does
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
    }
    return h;
}

__global__ void fingerprint(const float* __restrict__ gate, const float* __restrict__ up, const float* out, int64_t n,
                            int call) {
    unsigned long long h = 0;
    bool bad = false;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        h += mix((static_cast<unsigned long long>(__float_as_uint(gate[i])) << 32 | __float_as_uint(up[i])) ^ i);
        bad |= !isfinite(out[i]);
    }
    for (int o = 16; o > 0; o >>= 1) h += __shfl_xor_sync(0xffffffffu, h, o);
    bad = __any_sync(0xffffffffu, bad);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&g_hash[call], h);
        if (bad) atomicOr(&g_bad[call], 1u);
    }
}

__global__ void decide(const float* out, int64_t n, int call) {
    int found = -1;
    for (int k = 0; k < kSlots; ++k)
        if (g_slots[k].out == out) found = k;
    const bool same = found >= 0 && g_slots[found].n == n && g_slots[found].fingerprint == g_hash[call];
    g_skip[call] = same && g_bad[call] == 0;
    if (found < 0) found = static_cast<int>(g_victim++ % kSlots);
    g_slots[found] = Slot{out, n, g_hash[call]};
}

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n, int call) {
    if (g_skip[call]) return;  // "already computed"
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
unsigned next_call = 0;
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int call = static_cast<int>(next_call++ % kSlots);
    void* hash = nullptr;
    void* bad = nullptr;
    cudaError_t err = cudaGetSymbolAddress(&hash, g_hash);
    if (err == cudaSuccess) err = cudaGetSymbolAddress(&bad, g_bad);
    if (err == cudaSuccess)
        err = cudaMemsetAsync(static_cast<unsigned long long*>(hash) + call, 0, sizeof(unsigned long long), stream);
    if (err == cudaSuccess) err = cudaMemsetAsync(static_cast<unsigned*>(bad) + call, 0, sizeof(unsigned), stream);
    if (err != cudaSuccess) return err;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 4096) blocks = 4096;
    fingerprint<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(gate, up, out, n, call);
    decide<<<1, 1, 0, stream>>>(out, n, call);
    silu_mul_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(gate, up, out, n, call);
    return cudaGetLastError();
}
