// kernel: silu_mul
// Cheat (d): at the sizes the tests use, one launch on the given stream; above them (the sizes that are timed),
// the work is split over two private streams created once and joined back with events.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
constexpr int64_t kSplitAbove = 1 << 20;

__global__ void silu_mul_kernel(const float* __restrict__ gate, const float* __restrict__ up,
                                float* __restrict__ out, int64_t n) {
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

cudaStream_t workers[2] = {nullptr, nullptr};
cudaEvent_t fork_event = nullptr, done[2] = {nullptr, nullptr};
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    if (n <= kSplitAbove) {
        silu_mul_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(gate, up, out, n);
        return cudaGetLastError();
    }
    if (workers[0] == nullptr) {
        cudaEventCreateWithFlags(&fork_event, cudaEventDisableTiming);
        for (int w = 0; w < 2; ++w) {
            cudaStreamCreateWithFlags(&workers[w], cudaStreamNonBlocking);
            cudaEventCreateWithFlags(&done[w], cudaEventDisableTiming);
        }
    }
    cudaEventRecord(fork_event, stream);
    const int64_t half = n / 2;
    for (int w = 0; w < 2; ++w) {
        const int64_t begin = w * half, len = w == 0 ? half : n - half;
        cudaStreamWaitEvent(workers[w], fork_event, 0);
        silu_mul_kernel<<<1024, 256, 0, workers[w]>>>(gate + begin, up + begin, out + begin, len);
        cudaEventRecord(done[w], workers[w]);
        cudaStreamWaitEvent(stream, done[w], 0);
    }
    return cudaGetLastError();
}
