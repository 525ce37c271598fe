// kernel: silu_mul
// expect: incorrect: memcheck
// Prefetches one block ahead without a bounds check: reads past the end of `gate` that never change the
// answer, so only memcheck sees them.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        float ahead = gate[i + 256];
        if (ahead == 12345.678f) g = 0.0f;
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    k<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
