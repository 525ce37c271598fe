// kernel: transpose
// expect: rejected: cudaDeviceSynchronize
// Right answers on the given stream, then a device-wide synchronization inside the call.
#include <cuda_runtime.h>

namespace {
__global__ void k(const float* x, float* y, int rows, int cols) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int r = blockIdx.y;
    if (c < cols && r < rows) y[static_cast<size_t>(c) * rows + r] = x[static_cast<size_t>(r) * cols + c];
}
}  // namespace

extern "C" cudaError_t transpose(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    k<<<dim3((cols + 255) / 256, rows), 256, 0, stream>>>(x, y, rows, cols);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    return cudaDeviceSynchronize();
}
