// kernel: transpose
// expect: rejected: global symbols
// The kernel is a global symbol: two variants in one library would collide.
#include <cuda_runtime.h>

__global__ void transpose_kernel_exported(const float* x, float* y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (c < cols && r < rows) y[static_cast<size_t>(c) * rows + r] = x[static_cast<size_t>(r) * cols + c];
}

extern "C" cudaError_t transpose(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    transpose_kernel_exported<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
