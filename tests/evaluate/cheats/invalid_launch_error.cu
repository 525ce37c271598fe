// kernel: silu_mul
// Cheat (l): a "tuned" block size table that picks 2048 threads per block for small n, an invalid launch
// configuration; the launcher returns what cudaGetLastError() says.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

int block_size_for(int64_t n) { return n < 4096 ? 2048 : 256; }
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int threads = block_size_for(n);
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    silu_mul_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
