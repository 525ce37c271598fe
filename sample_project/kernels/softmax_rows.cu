// r1sample baseline: row softmax, one block per row, three passes over the row (max, sum of exponentials,
// normalize) with warp-shuffle reductions. Correct for any cols >= 1, including cols < the block size.
#include <cuda_runtime.h>
#include <cfloat>

namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// Every thread of the block gets the block-wide result.
template <bool kMax>
__device__ float block_reduce(float v, float* partial) {
    v = kMax ? warp_max(v) : warp_sum(v);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = partial[0];
    for (int w = 1; w < kWarps; ++w) r = kMax ? fmaxf(r, partial[w]) : r + partial[w];
    __syncthreads();  // partial is reused by the next reduction
    return r;
}

__global__ void softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float partial[kWarps];
    const float* in = x + static_cast<size_t>(blockIdx.x) * cols;
    float* out = y + static_cast<size_t>(blockIdx.x) * cols;

    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, in[c]);
    m = block_reduce<true>(m, partial);

    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) s += expf(in[c] - m);
    s = block_reduce<false>(s, partial);

    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += kThreads) out[c] = expf(in[c] - m) * inv;
}

}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    softmax_rows_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
    return cudaGetLastError();
}
