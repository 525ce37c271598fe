#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void iota_kernel(int32_t* out, int32_t n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i;
}
}  // namespace

extern "C" cudaError_t iota(int32_t* out, int32_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    iota_kernel<<<(n + 255) / 256, 256, 0, stream>>>(out, n);
    return cudaGetLastError();
}
