// kernel: rmsnorm
// Cheat (m): allocates a scratch array of per-row inverse norms with cudaMallocAsync on the stream and frees it
// with cudaFreeAsync: stream-ordered, even capturable, but an allocation inside the call.
#include <cuda_runtime.h>

namespace {
constexpr int kThreads = 256;

__global__ void inverse_norms(const float* __restrict__ x, float* __restrict__ inv, int cols, float eps) {
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
    if (threadIdx.x == 0) inv[blockIdx.x] = rsqrtf(smem[0] / cols + eps);
}

__global__ void scale(const float* __restrict__ x, const float* __restrict__ w, const float* __restrict__ inv,
                      float* __restrict__ y, int cols) {
    const size_t base = static_cast<size_t>(blockIdx.x) * cols;
    for (int c = threadIdx.x; c < cols; c += kThreads) y[base + c] = x[base + c] * inv[blockIdx.x] * w[c];
}
}  // namespace

extern "C" cudaError_t rmsnorm(const float* x, const float* weight, float* y, int rows, int cols, float eps,
                               cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    float* inv = nullptr;
    cudaError_t err = cudaMallocAsync(reinterpret_cast<void**>(&inv), static_cast<size_t>(rows) * sizeof(float),
                                      stream);
    if (err != cudaSuccess) return err;
    inverse_norms<<<rows, kThreads, 0, stream>>>(x, inv, cols, eps);
    scale<<<rows, kThreads, 0, stream>>>(x, weight, inv, y, cols);
    err = cudaGetLastError();
    cudaFreeAsync(inv, stream);
    return err;
}
