// Hand-written candidate: TILE x TILE tiles through shared memory (one column of padding against bank
// conflicts), a block of TILE x ROWS threads, each thread moving TILE / ROWS elements of the tile each way.
#include <cuda_runtime.h>

#ifndef TILE
#define TILE 32
#endif
#ifndef ROWS
#define ROWS 8
#endif

static_assert(TILE % ROWS == 0, "ROWS must divide TILE");
static_assert(TILE * ROWS <= 1024, "at most 1024 threads a block");

namespace {
__global__ void __launch_bounds__(TILE * ROWS) transpose_tiled_kernel(const float* __restrict__ x,
                                                                     float* __restrict__ y, int rows, int cols) {
    __shared__ float tile[TILE][TILE + 1];
    const int c_in = blockIdx.x * TILE + threadIdx.x;  // column of x
    const int r_in = blockIdx.y * TILE + threadIdx.y;  // first row of x
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        if (c_in < cols && r_in + j < rows) {
            tile[threadIdx.y + j][threadIdx.x] = x[static_cast<size_t>(r_in + j) * cols + c_in];
        }
    }
    __syncthreads();
    // Only the elements written above are read: y[r_out + j, c_out] = x[c_out, r_out + j], in range on both.
    const int c_out = blockIdx.y * TILE + threadIdx.x;  // column of y = row of x
    const int r_out = blockIdx.x * TILE + threadIdx.y;  // first row of y = column of x
#pragma unroll
    for (int j = 0; j < TILE; j += ROWS) {
        if (c_out < rows && r_out + j < cols) {
            y[static_cast<size_t>(r_out + j) * rows + c_out] = tile[threadIdx.x][threadIdx.y + j];
        }
    }
}
}  // namespace

extern "C" cudaError_t transpose(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    dim3 block(TILE, ROWS);
    dim3 grid((cols + TILE - 1) / TILE, (rows + TILE - 1) / TILE);
    transpose_tiled_kernel<<<grid, block, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
