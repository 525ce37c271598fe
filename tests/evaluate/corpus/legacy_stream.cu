// kernel: silu_mul
// expect: rejected: cudaDeviceSynchronize
// Launches on the legacy default stream (no stream in the launch) and synchronizes the device.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) { float g = gate[i]; out[i] = g / (1.0f + expf(-g)) * up[i]; }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    (void)stream;
    k<<<static_cast<unsigned>((n + 255) / 256), 256>>>(gate, up, out, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    return cudaDeviceSynchronize();
}
