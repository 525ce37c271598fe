// kernel: silu_mul
// expect: rejected: cudaStreamCreateWithFlags
// Works on a private stream and waits for it before returning: right answers, but the caller's stream never
// sees the work, so timing on that stream would measure nothing.
#include <cuda_runtime.h>
#include <cstdint>

namespace {
__global__ void k(const float* gate, const float* up, float* out, int64_t n) {
    int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) { float g = gate[i]; out[i] = g / (1.0f + expf(-g)) * up[i]; }
}
cudaStream_t side = nullptr;
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    (void)stream;
    if (side == nullptr) {
        cudaError_t err = cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        if (err != cudaSuccess) return err;
    }
    k<<<static_cast<unsigned>((n + 255) / 256), 256, 0, side>>>(gate, up, out, n);
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    return cudaStreamSynchronize(side);
}
