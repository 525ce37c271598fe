// kernel: silu_mul
// expect: incorrect: modified its input
// Uses `gate` as scratch space after reading it.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        float s = g / (1.0f + expf(-g));
        const_cast<float*>(gate)[i] = s;
        out[i] = s * up[i];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    k<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
