#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void axpy_kernel(const float* x, float* y, float a, int64_t n) {
    const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
}  // namespace

extern "C" cudaError_t axpy(const float* x, float* y, float a, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    axpy_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, y, a, n);
    return cudaGetLastError();
}
