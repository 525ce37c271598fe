// kernel: sum_all
// Honest: cooperative groups without a grid-wide barrier (an ordinary launch): the block and its warps as
// cg::thread_block and cg::tiled_partition<32>, the warp sums with cg::reduce, one atomicAdd per block into the
// output, which a memset on the stream zeroes first. No state between calls. Must pass.
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdint>

namespace cg = cooperative_groups;

namespace {
constexpr int kThreads = 256;

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ float warp_sums[kThreads / 32];
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        acc += x[i];
    acc = cg::reduce(warp, acc, cg::plus<float>());
    if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = acc;
    block.sync();
    if (warp.meta_group_rank() == 0) {
        float v = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()] : 0.0f;
        v = cg::reduce(warp, v, cg::plus<float>());
        if (warp.thread_rank() == 0) atomicAdd(out, v);
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
