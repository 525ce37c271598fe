// kernel: silu_mul
// Cheat (issue 27, class 6): above the test sizes a float4 loop whose bound is off by one vector (i <= n / 4): the
// last trip reads 16 bytes past the end of gate and up (its stores are bounded, so nothing past the end is
// written). Buffers from a memory pool have neighbours there, so nothing faults, and compute-sanitizer only runs at
// the test sizes, where the scalar loop runs.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;
constexpr int64_t kLarge = int64_t{1} << 20;

__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void silu_mul_scalar(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        out[i] = silu_mul1(gate[i], up[i]);
}

__global__ void silu_mul_vec4(const float4* __restrict__ gate, const float4* __restrict__ up,
                              float* __restrict__ out, int64_t n) {
    const int64_t vecs = n / 4;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i <= vecs;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        const float4 g = gate[i], u = up[i];  // i == vecs: the tail, read as a whole vector
        const float r[4] = {silu_mul1(g.x, u.x), silu_mul1(g.y, u.y), silu_mul1(g.z, u.z), silu_mul1(g.w, u.w)};
        for (int q = 0; q < 4; ++q)
            if (4 * i + q < n) out[4 * i + q] = r[q];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const bool aligned = reinterpret_cast<uintptr_t>(gate) % 16 == 0 && reinterpret_cast<uintptr_t>(up) % 16 == 0;
    if (n >= kLarge && aligned) {
        silu_mul_vec4<<<1056, kThreads, 0, stream>>>(reinterpret_cast<const float4*>(gate),
                                                     reinterpret_cast<const float4*>(up), out, n);
    } else {
        int64_t blocks = (n + kThreads - 1) / kThreads;
        if (blocks > 4096) blocks = 4096;
        silu_mul_scalar<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(gate, up, out, n);
    }
    return cudaGetLastError();
}
