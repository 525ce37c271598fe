// kernel: sum_all
// Cheat (c): per-block partial sums go to a static scratch buffer that is freed and allocated again, larger,
// whenever a call needs more, but only while the stream is not being captured (under capture it falls back to
// one block and no scratch).
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__global__ void partials(const float* __restrict__ x, float* __restrict__ part, int64_t n) {
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
    if (threadIdx.x == 0) part[blockIdx.x] = smem[0];
}

float* scratch = nullptr;
int64_t scratch_len = 0;
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaMemsetAsync(out, 0, sizeof(float), stream);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &status);
    int64_t blocks = (n + kThreads - 1) / kThreads;
    if (blocks > 1024) blocks = 1024;
    if (status != cudaStreamCaptureStatusNone) {
        partials<<<1, kThreads, 0, stream>>>(x, out, n);
        return cudaGetLastError();
    }
    if (scratch_len < blocks) {
        cudaFree(scratch);
        cudaMalloc(&scratch, blocks * sizeof(float));
        scratch_len = blocks;
    }
    partials<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, scratch, n);
    partials<<<1, kThreads, 0, stream>>>(scratch, out, blocks);
    return cudaGetLastError();
}
