// kernel: sum_all
// Honest: the grid-wide barrier done right. A cooperative launch (cudaLaunchCooperativeKernel) with a grid no
// larger than what the occupancy API says can be resident: block 0 zeroes the output, grid.sync(), then each block
// adds its sum with one atomicAdd. No __device__ scratch, so calls on two streams at once do not meet (issue 27: a
// kernel may be called concurrently on different streams; a __device__ array of partials would be shared). Must
// pass.
#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cstdint>

namespace cg = cooperative_groups;

namespace {
constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

__device__ float block_sum(float v, float* smem) {
    smem[threadIdx.x] = v;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    return smem[0];
}

__global__ void sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t n) {
    __shared__ float smem[kThreads];
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * kThreads)
        acc += x[i];
    const float mine = block_sum(acc, smem);
    if (blockIdx.x == 0 && threadIdx.x == 0) out[0] = 0.0f;
    cg::this_grid().sync();  // the zero is in place (and visible) before any block adds
    if (threadIdx.x == 0) atomicAdd(out, mine);
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaMemsetAsync(out, 0, sizeof(float), stream);
    int device = 0, sms = 0, per_sm = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sum_kernel, kThreads, 0);
    if (err != cudaSuccess) return err;
    int64_t blocks = (n + kThreads - 1) / kThreads;
    int64_t resident = static_cast<int64_t>(sms) * per_sm;
    if (resident > kMaxBlocks) resident = kMaxBlocks;
    if (blocks > resident) blocks = resident;
    if (blocks < 1) blocks = 1;
    void* args[] = {const_cast<float**>(&x), &out, &n};
    return cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(sum_kernel), dim3(static_cast<unsigned>(blocks)),
                                       dim3(kThreads), args, 0, stream);
}
