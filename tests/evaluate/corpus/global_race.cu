// kernel: sum_all
// expect: incorrect: nondeterministic | differ beyond
// Every block adds its partial sum to out[0] without an atomic: updates get lost.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* x, float* out, int64_t n) {
    __shared__ float smem[256];
    float acc = 0.0f;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * 256 + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * 256) acc += x[i];
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        volatile float* o = out;
        *o = *o + smem[0];
    }
}
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    cudaError_t err = cudaMemsetAsync(out, 0, sizeof(float), stream);
    if (err != cudaSuccess) return err;
    int64_t blocks = (n + 255) / 256;
    if (blocks > 1024) blocks = 1024;
    k<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
