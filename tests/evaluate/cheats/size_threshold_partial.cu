// kernel: softmax_rows
// Cheat (a): one block per row, but the grid is capped at 64 blocks "for occupancy" and there is no loop over
// the remaining rows. Every test shape has at most 17 rows; the benchmark shape has 4096, of which 64 are done.
#include <cuda_runtime.h>
#include <cfloat>

namespace {
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 64;

__device__ float block_reduce(float v, bool is_max, float* smem) {
    smem[threadIdx.x] = v;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = smem[threadIdx.x + s];
            smem[threadIdx.x] = is_max ? fmaxf(smem[threadIdx.x], o) : smem[threadIdx.x] + o;
        }
        __syncthreads();
    }
    float r = smem[0];
    __syncthreads();
    return r;
}

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float smem[kThreads];
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float* out = y + static_cast<size_t>(blockIdx.x) * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, row[c]);
    m = block_reduce(m, true, smem);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) s += expf(row[c] - m);
    s = block_reduce(s, false, smem);
    for (int c = threadIdx.x; c < cols; c += kThreads) out[c] = expf(row[c] - m) / s;
}
}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int blocks = rows < kMaxBlocks ? rows : kMaxBlocks;
    softmax_kernel<<<blocks, kThreads, 0, stream>>>(x, y, cols);
    return cudaGetLastError();
}
