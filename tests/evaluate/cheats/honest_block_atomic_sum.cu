// kernel: sum_all
// Honest: grid-stride partial sums in fp32, a warp-shuffle and shared-memory block reduction, one fp32 atomicAdd
// per block into the output zeroed on the stream. Must pass.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ float warp_sums[kWarps];
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        acc += x[i];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, offset);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < kWarps ? warp_sums[threadIdx.x] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (threadIdx.x == 0) atomicAdd(out, v);
    }
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess || n <= 0) return err;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 2048) blocks = 2048;
    sum_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
