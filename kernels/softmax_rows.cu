// Baseline: one block per row, three passes (max, sum of exp, normalize) with shared-memory reductions.
#include <cuda_runtime.h>
#include <cfloat>

namespace {
constexpr int kThreads = 256;

__device__ float block_reduce(float v, float* smem, bool is_max) {
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

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float smem[kThreads];
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float* out = y + static_cast<size_t>(blockIdx.x) * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, row[c]);
    m = block_reduce(m, smem, true);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) s += expf(row[c] - m);
    s = block_reduce(s, smem, false);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += kThreads) out[c] = expf(row[c] - m) * inv;
}
}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    softmax_rows_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
    return cudaGetLastError();
}
