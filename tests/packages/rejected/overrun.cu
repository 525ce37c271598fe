#include <cuda_runtime.h>

namespace {
// Works on groups of four and forgets the tail: with n not a multiple of 4 it reads x and writes y past the end.
__global__ void overrun_kernel(const float* x, float* y, int n) {
    const int padded = (n + 3) & ~3;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < padded) y[i] = 2.0f * x[i];
}
}  // namespace

extern "C" cudaError_t overrun(const float* x, float* y, int n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int padded = (n + 3) & ~3;
    overrun_kernel<<<(padded + 255) / 256, 256, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
