// Baseline: grid-stride partial sums, a shared-memory block reduction, one atomicAdd per block.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__global__ void sum_all_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ float smem[kThreads];
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        acc += x[i];
    }
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, smem[0]);
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    if (n <= 0) return cudaSuccess;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 1024) blocks = 1024;
    sum_all_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
