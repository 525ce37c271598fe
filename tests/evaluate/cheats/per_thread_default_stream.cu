// kernel: rmsnorm
// Cheat (i): launches on cudaStreamPerThread (a handle, no symbol to reject) instead of the stream argument and
// does not wait: the caller's stream is not ordered with the work.
#include <cuda_runtime.h>

namespace {
constexpr int kThreads = 256;

__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y,
                               int cols, float eps) {
    __shared__ float smem[kThreads];
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) acc += row[c] * row[c];
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(smem[0] / cols + eps);
    for (int c = threadIdx.x; c < cols; c += kThreads)
        y[static_cast<size_t>(blockIdx.x) * cols + c] = row[c] * inv * w[c];
}
}  // namespace

extern "C" cudaError_t rmsnorm(const float* x, const float* weight, float* y, int rows, int cols, float eps,
                               cudaStream_t stream) {
    (void)stream;
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    rmsnorm_kernel<<<rows, kThreads, 0, cudaStreamPerThread>>>(x, weight, y, cols, eps);
    return cudaGetLastError();
}
