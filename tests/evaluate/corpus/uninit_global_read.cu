// kernel: silu_mul
// expect: incorrect: initcheck
// Reads each output element before writing it (the value never matters, so the answer is right): initcheck
// reports the read of memory nothing wrote.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        float old = out[i];
        float g = gate[i];
        float v = g / (1.0f + expf(-g)) * up[i];
        out[i] = (old == 12345.678f) ? 0.0f : v;
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    k<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
