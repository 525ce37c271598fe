// kernel: sum_all
// expect: incorrect: shared memory
// Threads with no element leave their shared-memory slot unwritten, and the reduction reads every slot.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* x, float* out, int64_t n) {
    __shared__ float smem[256];
    int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x;
    if (i < n) {
        float acc = 0.0f;
        for (; i < n; i += static_cast<int64_t>(gridDim.x) * 256) acc += x[i];
        smem[threadIdx.x] = acc;
    }
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, smem[0]);
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 64) blocks = 64;
    k<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
