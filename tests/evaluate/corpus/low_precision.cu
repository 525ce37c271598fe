// kernel: rmsnorm
// expect: incorrect: differ beyond | relative error
// Computes in half precision: about three decimal digits, far from the spec's tolerance.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

namespace {
__global__ void k(const float* x, const float* w, float* y, int cols, float eps) {
    __shared__ float smem[256];
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += 256) acc += row[c] * row[c];
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    const __half inv = __float2half(rsqrtf(smem[0] / cols + eps));
    for (int c = threadIdx.x; c < cols; c += 256) {
        __half v = __hmul(__hmul(__float2half(row[c]), inv), __float2half(w[c]));
        y[static_cast<size_t>(blockIdx.x) * cols + c] = __half2float(v);
    }
}
}  // namespace

extern "C" cudaError_t rmsnorm(const float* x, const float* weight, float* y, int rows, int cols, float eps,
                               cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    k<<<rows, 256, 0, stream>>>(x, weight, y, cols, eps);
    return cudaGetLastError();
}
