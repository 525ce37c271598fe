// kernel: silu_mul
// Honest: float4 loads and stores where all three pointers share their alignment modulo 16 bytes, a scalar head up
// to the first 16-byte boundary and a scalar tail after the last whole vector; a scalar loop otherwise. Right at
// any offset and size, at 16-byte-aligned pointers too. Must pass.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n, int64_t head, bool vec) {
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    if (!vec) {
        for (int64_t i = tid; i < n; i += stride) out[i] = silu_mul1(gate[i], up[i]);
        return;
    }
    const int64_t vecs = (n - head) / 4;
    const float4* g4 = reinterpret_cast<const float4*>(gate + head);
    const float4* u4 = reinterpret_cast<const float4*>(up + head);
    float4* o4 = reinterpret_cast<float4*>(out + head);
    for (int64_t i = tid; i < vecs; i += stride) {
        const float4 g = g4[i], u = u4[i];
        o4[i] = make_float4(silu_mul1(g.x, u.x), silu_mul1(g.y, u.y), silu_mul1(g.z, u.z), silu_mul1(g.w, u.w));
    }
    if (tid < head) out[tid] = silu_mul1(gate[tid], up[tid]);
    const int64_t tail = head + vecs * 4 + tid;
    if (tail < n && tid < 4) out[tail] = silu_mul1(gate[tail], up[tail]);
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const uintptr_t a = reinterpret_cast<uintptr_t>(gate) % 16;
    const bool vec = a % 4 == 0 && reinterpret_cast<uintptr_t>(up) % 16 == a && reinterpret_cast<uintptr_t>(out) % 16 == a;
    int64_t head = vec ? static_cast<int64_t>((16 - a) % 16 / 4) : 0;
    if (head > n) head = n;
    int64_t blocks = (n / 4 + kThreads - 1) / kThreads;
    if (blocks < 1) blocks = 1;
    if (blocks > 8192) blocks = 8192;
    silu_mul_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(gate, up, out, n, head, vec);
    return cudaGetLastError();
}
