// r1sample baseline: GELU (tanh approximation), one element per thread in a grid-stride loop.
// Candidate contract: one exported C function that launches on `stream`; everything else is internal.
#include <cuda_runtime.h>
#include <cstdint>

#ifndef BLOCK
#define BLOCK 256
#endif

namespace {

constexpr int kMaxBlocks = 65535;

__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * BLOCK;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * BLOCK + threadIdx.x; i < n; i += stride) {
        const float v = x[i];
        const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(inner));
    }
}

}  // namespace

extern "C" cudaError_t gelu(const float* x, float* y, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int64_t wanted = (n + BLOCK - 1) / BLOCK;
    const int blocks = static_cast<int>(wanted < kMaxBlocks ? wanted : kMaxBlocks);
    gelu_kernel<<<blocks, BLOCK, 0, stream>>>(x, y, n);
    return cudaGetLastError();
}
