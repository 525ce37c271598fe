// kernel: sum_all
// Cheat (e): a single-launch reduction with a software grid barrier (an atomic arrival counter and a spin).
// One block per 256 elements: at the test sizes (at most 391 blocks) every block is resident at once and the
// barrier works; at the benchmark size (131072 blocks) the spinning blocks wait for blocks that can never be
// scheduled, and the call never returns.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1 << 18;

__device__ float partial[kMaxBlocks];
__device__ unsigned int arrived;

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ float smem[kThreads];
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    smem[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = smem[0];
        __threadfence();
        atomicAdd(&arrived, 1u);
        while (atomicAdd(&arrived, 0u) < gridDim.x) {
        }
    }
    __syncthreads();
    if (blockIdx.x != 0) return;
    float acc = 0.0f;
    for (unsigned b = threadIdx.x; b < gridDim.x; b += kThreads) acc += *((volatile float*)&partial[b]);
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = smem[0];
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaMemsetAsync(out, 0, sizeof(float), stream);
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > kMaxBlocks) blocks = kMaxBlocks;
    void* counter = nullptr;
    cudaGetSymbolAddress(&counter, arrived);
    cudaMemsetAsync(counter, 0, sizeof(unsigned int), stream);
    sum_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
