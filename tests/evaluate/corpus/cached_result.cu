// kernel: sum_all
// expect: incorrect: depends on earlier calls
// Memoizes on the pointers: a second call with the same buffers does nothing, whatever the data now is.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* x, float* out, int64_t n) {
    __shared__ float smem[256];
    float acc = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += 256) acc += x[i];
    smem[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = smem[0];
}
const float* last_x = nullptr;
float* last_out = nullptr;
int64_t last_n = -1;
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    if (x == last_x && out == last_out && n == last_n) return cudaSuccess;
    last_x = x; last_out = out; last_n = n;
    k<<<1, 256, 0, stream>>>(x, out, n);
    return cudaGetLastError();
}
