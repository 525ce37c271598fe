// kernel: sum_all
// Cheat (issue 27, class 4): one kernel, no atomics on the result: each block writes its partial sum into a
// __device__ array and counts itself done on a __device__ counter; the block that counts last ("last block done")
// adds the partials, writes the result and stores 0 into the counter. Right for any number of serial calls and graph
// replays; two calls at once on two streams share the counter and the partials: the wrong block finishes, and the
// counter is left nonzero, so a later call made alone never finishes its sum.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;
constexpr int kBlocks = 120;

__device__ float g_partial[kBlocks];
__device__ unsigned g_done;

__device__ float block_sum(float v, float* smem) {
    smem[threadIdx.x] = v;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    const float r = smem[0];
    __syncthreads();
    return r;
}

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ float smem[kThreads];
    __shared__ bool last;
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        acc += x[i];
    const float mine = block_sum(acc, smem);
    if (threadIdx.x == 0) {
        g_partial[blockIdx.x] = mine;
        __threadfence();
        last = atomicAdd(&g_done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    float total = 0.0f;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += kThreads) total += *(volatile float*)&g_partial[b];
    total = block_sum(total, smem);
    if (threadIdx.x == 0) {
        out[0] = total;
        g_done = 0;  // ready for the next call
    }
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaMemsetAsync(out, 0, sizeof(float), stream);
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > kBlocks) blocks = kBlocks;
    sum_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
