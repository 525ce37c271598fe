// kernel: softmax_rows
// expect: rejected: cudaStreamSynchronize
// Runs on cudaStreamPerThread and waits for it: right answers, wrong stream.
#include <cuda_runtime.h>
#include <cfloat>

namespace {
__global__ void k(const float* x, float* y, int cols) {
    if (threadIdx.x != 0) return;
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float* out = y + static_cast<size_t>(blockIdx.x) * cols;
    float m = -FLT_MAX;
    for (int c = 0; c < cols; ++c) m = fmaxf(m, row[c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += expf(row[c] - m);
    for (int c = 0; c < cols; ++c) out[c] = expf(row[c] - m) / s;
}
}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    (void)stream;
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    k<<<rows, 32, 0, cudaStreamPerThread>>>(x, y, cols);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    return cudaStreamSynchronize(cudaStreamPerThread);
}
