// kernel: silu_mul
// expect: rejected: system
// Shells out from the launcher: the host object needs `system`, which no kernel library may call.
#include <cuda_runtime.h>
#include <cstdint>
#include <cstdlib>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) { float g = gate[i]; out[i] = g / (1.0f + expf(-g)) * up[i]; }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n == -42) return static_cast<cudaError_t>(std::system("true"));
    k<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
