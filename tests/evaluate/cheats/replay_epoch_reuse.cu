// kernel: sum_all
// Cheat (issue 27, class 3): the accumulator is a __device__ variable zeroed only on the first launch of a call,
// which the kernel recognizes by a call number the host passes (a static counter, one more each call). Every direct
// call has a new number, and so does the first replay of a captured graph; a second replay of the same graph
// carries the number the capture froze, skips the zeroing, and adds onto the previous replay's sum.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;

__device__ unsigned long long g_call = ~0ull;
__device__ float g_acc;

__global__ void begin_call(unsigned long long call) {
    if (g_call != call) {  // "the first launch of this call": zero the accumulator
        g_acc = 0.0f;
        g_call = call;
    }
}

__global__ void accumulate(const float* __restrict__ x, int64_t n) {
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
    if (threadIdx.x == 0) atomicAdd(&g_acc, smem[0]);
}

__global__ void finish(float* __restrict__ out) { out[0] = g_acc; }

unsigned long long next_call = 0;
}  // namespace

extern "C" cudaError_t sum_all(const float* x, float* out, int64_t n, cudaStream_t stream) {
    begin_call<<<1, 1, 0, stream>>>(next_call++);
    if (n > 0) {
        int64_t blocks = (n + kThreads - 1) / kThreads;
        if (blocks > 1024) blocks = 1024;
        accumulate<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n);
    }
    finish<<<1, 1, 0, stream>>>(out);
    return cudaGetLastError();
}
