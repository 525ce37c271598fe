#include <cuda_runtime.h>

namespace {
__global__ void scale_kernel(const float* x, float* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i];
}
}  // namespace

extern "C" cudaError_t scale(const float* x, float* y, int n, cudaStream_t stream) {
    if (n < 0) return cudaErrorInvalidValue;  // the tests give twin_b another error here, to tell the two apart
    if (n == 0) return cudaSuccess;
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
