// kernel: sum_all
// Cheat (c) without a denied symbol: the launcher copies a value back to a pageable host variable with
// cudaMemcpyAsync (allowed), which makes the host wait for the stream, and sizes its second pass by it.
// Outside capture this is a host-side synchronization inside the call; under capture the copy is not allowed.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__global__ void partials(const float* __restrict__ x, float* __restrict__ part, int64_t n, int* __restrict__ count) {
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
    if (threadIdx.x == 0) {
        part[blockIdx.x] = smem[0];
        if (count != nullptr) atomicAdd(count, 1);
    }
}

__device__ float scratch[1024];
__device__ int done_blocks;
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaMemsetAsync(out, 0, sizeof(float), stream);
    float* part = nullptr;
    int* count = nullptr;
    cudaGetSymbolAddress(reinterpret_cast<void**>(&part), scratch);
    cudaGetSymbolAddress(reinterpret_cast<void**>(&count), done_blocks);
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 1024) blocks = 1024;
    cudaMemsetAsync(count, 0, sizeof(int), stream);
    partials<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, part, n, count);
    int finished = 0;  // pageable host memory: the copy returns only once the stream got here
    cudaError_t err = cudaMemcpyAsync(&finished, count, sizeof(int), cudaMemcpyDeviceToHost, stream);
    if (err != cudaSuccess) return err;
    partials<<<1, kThreads, 0, stream>>>(part, out, finished, nullptr);
    return cudaGetLastError();
}
