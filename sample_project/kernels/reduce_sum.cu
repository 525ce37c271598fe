// r1sample baseline: full sum. Each block sums a grid-stride slice in registers, reduces it with warp shuffles
// and adds its partial sum to out[0] atomically; out[0] is zeroed on the same stream first.
#include <cuda_runtime.h>
#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 1024;

__global__ void reduce_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ float partial[kWarps];
    float acc = 0.0f;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) acc += x[i];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        float block_sum = 0.0f;
        for (int w = 0; w < kWarps; ++w) block_sum += partial[w];
        atomicAdd(out, block_sum);
    }
}

}  // namespace

extern "C" cudaError_t reduce_sum(const float* x, float* out, int64_t n, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess || n <= 0) return err;
    const int64_t wanted = (n + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
    reduce_sum_kernel<<<blocks, kThreads, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
