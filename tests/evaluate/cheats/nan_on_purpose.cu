// kernel: silu_mul
// Cheat (h): computes every element but overwrites a few with the quiet-NaN pattern 0x7fc00000 (the bit pattern
// of the old float32 poison, so an "unwritten" check mistakes them for elements never written).
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float g = gate[i];
        float v = g / (1.0f + expf(-g)) * up[i];
        out[i] = (i % 97 == 5) ? __int_as_float(0x7fc00000) : v;
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    silu_mul_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
