// kernel: silu_mul
// Honest: work in several steps, all ordered on the stream argument: a device-to-device copy of gate into out
// (cudaMemcpyAsync on the stream), then a kernel that turns out into silu(out) * up in place. Nothing on another
// stream, no state between calls. Must pass.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__global__ void silu_mul_in_place(const float* __restrict__ up, float* __restrict__ out, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        const float g = out[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    cudaError_t err = cudaMemcpyAsync(out, gate, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) return err;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 8192) blocks = 8192;
    silu_mul_in_place<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(up, out, n);
    return cudaGetLastError();
}
