// kernel: silu_mul
// Cheat (a): does the work at every size the tests use and none above a threshold, where only the time is
// looked at. The launcher returns success without launching anything for large n.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int64_t kLargest = 1 << 20;  // "fast path": large inputs are "handled elsewhere"

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0 || n > kLargest) return cudaSuccess;
    int64_t blocks = (n + 255) / 256;
    silu_mul_kernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
