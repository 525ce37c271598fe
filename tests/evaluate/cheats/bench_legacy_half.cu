// kernel: silu_mul
// Cheat (issue 27, class 1, the legacy stream): at the test sizes every launch is on the stream argument; above
// them the second half of the work is launched on the legacy default stream (stream 0), never joined to the stream
// (the caller's stream is non-blocking: no implicit ordering with the legacy stream). The capture
// probe passes at the benchmark size (a launch on another stream is not captured, and breaks nothing), the outputs
// read after the device is idle are right, and the events on the stream time only the first half.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int kThreads = 256;
constexpr int64_t kLarge = int64_t{1} << 20;

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t begin, int64_t end) {
    for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < end;
         i += static_cast<int64_t>(gridDim.x) * kThreads) {
        const float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

unsigned blocks_for(int64_t n) {
    int64_t blocks = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    const int64_t half = n >= kLarge ? n / 2 : n;
    silu_mul_kernel<<<blocks_for(half), kThreads, 0, stream>>>(gate, up, out, 0, half);
    if (half < n) silu_mul_kernel<<<blocks_for(n - half), kThreads, 0, 0>>>(gate, up, out, half, n);
    return cudaGetLastError();
}
