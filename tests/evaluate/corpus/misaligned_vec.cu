// kernel: silu_mul
// expect: crashed: misaligned
// float4 loads and stores without checking that the pointers are 16-byte aligned.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__device__ float f(float g, float u) { return g / (1.0f + expf(-g)) * u; }
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t n4 = n / 4;
    if (q < n4) {
        float4 g = reinterpret_cast<const float4*>(gate)[q];
        float4 u = reinterpret_cast<const float4*>(up)[q];
        reinterpret_cast<float4*>(out)[q] = make_float4(f(g.x, u.x), f(g.y, u.y), f(g.z, u.z), f(g.w, u.w));
    }
    if (q == 0) for (int64_t i = n4 * 4; i < n; ++i) out[i] = f(gate[i], up[i]);
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    int64_t threads = n / 4 + 1;
    k<<<static_cast<unsigned>((threads + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
