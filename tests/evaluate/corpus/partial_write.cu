// kernel: silu_mul
// expect: incorrect: unwritten
// Handles groups of four and forgets the tail: the last n % 4 elements are never written.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n4) {
    int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (q >= n4) return;
    for (int j = 0; j < 4; ++j) {
        float g = gate[4 * q + j];
        out[4 * q + j] = g / (1.0f + expf(-g)) * up[4 * q + j];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    int64_t n4 = n / 4;
    if (n4 == 0) return cudaSuccess;
    k<<<static_cast<unsigned>((n4 + 255) / 256), 256, 0, stream>>>(gate, up, out, n4);
    return cudaGetLastError();
}
