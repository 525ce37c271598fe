// kernel: silu_mul
// expect: incorrect: out-of-bounds write
// Off by one in the other direction: element i is stored at out[i - 1], and out[-1] is written.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i <= n && i >= 1) {
        float g = gate[i - 1];
        out[i - 1] = g / (1.0f + expf(-g)) * up[i - 1];
    }
    if (i == 0) out[-1] = 0.0f;
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    k<<<static_cast<unsigned>((n + 256) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
