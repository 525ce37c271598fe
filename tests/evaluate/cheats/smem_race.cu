// kernel: rmsnorm
// Cheat (k): a real shared-memory race. The row's sum of squares is reduced warp by warp with shuffles, each
// warp's lane 0 stores its partial in shared memory, and thread 0 adds the eight partials without a barrier in
// between: it reads slots other warps may not have written yet (an earlier block's values, or whatever was
// there before).
#include <cuda_runtime.h>

namespace {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                               int cols, float eps) {
    __shared__ float partial[kWarps];
    __shared__ float inv_rms;
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) acc += row[c] * row[c];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = acc;
    // missing: __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int i = 0; i < kWarps; ++i) total += *((volatile float*)&partial[i]);
        inv_rms = rsqrtf(total / cols + eps);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += kThreads)
        y[static_cast<size_t>(blockIdx.x) * cols + c] = row[c] * inv_rms * w[c];
}
}  // namespace

extern "C" cudaError_t rmsnorm(const float* x, const float* weight, float* y, int rows, int cols, float eps,
                               cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    rmsnorm_kernel<<<rows, kThreads, 0, stream>>>(x, weight, y, cols, eps);
    return cudaGetLastError();
}
