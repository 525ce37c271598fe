// kernel: softmax_rows
// Cheat (c): when the caller's stream is not being captured into a graph (so, presumably, when it is only being
// timed), half the rows go to a private stream created once and joined with an event; under capture all rows
// go on the given stream, so a capture check sees nothing wrong.
#include <cuda_runtime.h>
#include <cfloat>

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

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int first_row, int cols) {
    __shared__ float smem[kThreads];
    const size_t row_index = static_cast<size_t>(first_row) + blockIdx.x;
    const float* row = x + row_index * cols;
    float* out = y + row_index * cols;
    float m = -FLT_MAX;
    for (int c = threadIdx.x; c < cols; c += kThreads) m = fmaxf(m, row[c]);
    m = block_reduce(m, true, smem);
    float s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += kThreads) s += expf(row[c] - m);
    s = block_reduce(s, false, smem);
    for (int c = threadIdx.x; c < cols; c += kThreads) out[c] = expf(row[c] - m) / s;
}

cudaStream_t side = nullptr;
cudaEvent_t forked = nullptr, joined = nullptr;
}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &status);
    if (status != cudaStreamCaptureStatusNone || rows < 2) {
        softmax_kernel<<<rows, kThreads, 0, stream>>>(x, y, 0, cols);
        return cudaGetLastError();
    }
    if (side == nullptr) {
        cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        cudaEventCreateWithFlags(&forked, cudaEventDisableTiming);
        cudaEventCreateWithFlags(&joined, cudaEventDisableTiming);
    }
    const int half = rows / 2;
    cudaEventRecord(forked, stream);
    cudaStreamWaitEvent(side, forked, 0);
    softmax_kernel<<<half, kThreads, 0, stream>>>(x, y, 0, cols);
    softmax_kernel<<<rows - half, kThreads, 0, side>>>(x, y, half, cols);
    cudaEventRecord(joined, side);
    cudaStreamWaitEvent(stream, joined, 0);
    return cudaGetLastError();
}
