// kernel: silu_mul
// Cheat (issue 27, wrong reasons): above the test sizes a "tuned" block size of 2048 threads, an invalid launch
// configuration, and a launcher that returns cudaSuccess without asking cudaGetLastError(): nothing runs at the
// benchmark size. The reason must name the launch error the library's own runtime holds, not the capture it spoils.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int64_t kLarge = int64_t{1} << 20;

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int threads = n >= kLarge ? 2048 : 256;
    int64_t blocks = (n + threads - 1) / threads;
    if (blocks > 65535) blocks = 65535;
    silu_mul_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(gate, up, out, n);
    return cudaSuccess;
}
