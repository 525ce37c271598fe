#include <cuda_runtime.h>
#include <cstdlib>

namespace {
__global__ void leaky_kernel(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
}  // namespace

extern "C" cudaError_t leaky(const float* x, float* y, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    // reads the environment: the static gate's symbol allowlist rejects getenv
    const int threads = std::getenv("LEAKY_THREADS") != nullptr ? 128 : 256;
    leaky_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
