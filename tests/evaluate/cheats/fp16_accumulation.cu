// kernel: sum_all
// Cheat (j): "faster" half-precision accumulation: each thread sums its elements in __half, the block tree runs
// in __half, and only the block's total is added in float. No race: the answer is the same every time, just
// only three decimal digits right (about 5e-4 relative error even at n = 1).
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ __half smem[kThreads];
    __half acc = __float2half(0.0f);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        acc = __hadd(acc, __float2half(x[i]));
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] = __hadd(smem[threadIdx.x], smem[threadIdx.x + s]);
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, __half2float(smem[0]));
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess || n <= 0) return err;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 1024) blocks = 1024;
    sum_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
