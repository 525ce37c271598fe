// kernel: sum_all
// Cheat (g): the blocks accumulate into a __device__ total that is zero when the library is loaded and never
// reset, and a tail kernel copies it out: the first call is right, every later call adds to the previous sums.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__device__ float total;

__global__ void accumulate(const float* __restrict__ x, int64_t n) {
    __shared__ float smem[kThreads];
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        acc += x[i];
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(&total, smem[0]);
}

__global__ void write_out(float* __restrict__ out) { out[0] = total; }
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (n > 0) {
        int64_t blocks = (n + kThreads - 1) / kThreads;
        if (blocks > 1024) blocks = 1024;
        accumulate<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n);
    }
    write_out<<<1, 1, 0, stream>>>(out);
    return cudaGetLastError();
}
