// kernel: silu_mul
// expect: crashed: illegal memory access | illegal address
// Computes an index with 32-bit arithmetic that wraps into a wild pointer for large n; here it is forced.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        float* where = (n > 1000) ? reinterpret_cast<float*>(0x10) + i : out + i;
        *where = g / (1.0f + expf(-g)) * up[i];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    k<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
