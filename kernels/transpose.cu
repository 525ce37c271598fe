// Baseline: 32x32 tiles through shared memory, padded against bank conflicts.
#include <cuda_runtime.h>

namespace {
constexpr int kTile = 32;
constexpr int kRows = 8;

__global__ void transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float tile[kTile][kTile + 1];
    int c = blockIdx.x * kTile + threadIdx.x;
    int r = blockIdx.y * kTile + threadIdx.y;
    for (int j = 0; j < kTile; j += kRows) {
        if (c < cols && r + j < rows) tile[threadIdx.y + j][threadIdx.x] = x[static_cast<size_t>(r + j) * cols + c];
    }
    __syncthreads();
    c = blockIdx.y * kTile + threadIdx.x;
    r = blockIdx.x * kTile + threadIdx.y;
    for (int j = 0; j < kTile; j += kRows) {
        if (c < rows && r + j < cols) y[static_cast<size_t>(r + j) * rows + c] = tile[threadIdx.x][threadIdx.y + j];
    }
}
}  // namespace

extern "C" cudaError_t transpose(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    dim3 block(kTile, kRows);
    dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
    transpose_kernel<<<grid, block, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
