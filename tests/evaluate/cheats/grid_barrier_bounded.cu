// kernel: softmax_rows
// Cheat (e): each row is split across 16 blocks (block b works on row b % rows, slice b / rows), and the blocks
// of a row meet at a software barrier whose spin gives up after a fixed number of polls "to avoid deadlock".
// With every block resident (the test shapes: at most 17 rows, 272 blocks) the barrier holds; at the benchmark
// shape (4096 rows, 65536 blocks) the blocks of a row are thousands apart, the spin gives up, and rows are
// normalized with partial maxima and sums.
#include <cuda_runtime.h>
#include <cfloat>

namespace {
constexpr int kThreads = 256;
constexpr int kSplit = 16;
constexpr int kMaxRows = 8192;
constexpr int kPolls = 1024;

__device__ float row_max[kMaxRows][kSplit];
__device__ float row_sum[kMaxRows][kSplit];
__device__ unsigned int row_arrived[kMaxRows][2];

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

__device__ void row_barrier(unsigned int* counter) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1u);
        for (int poll = 0; poll < kPolls && atomicAdd(counter, 0u) < kSplit; ++poll) {
        }
    }
    __syncthreads();
}

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
    __shared__ float smem[kThreads];
    const int row_index = blockIdx.x % rows, part = blockIdx.x / rows;
    const float* row = x + static_cast<size_t>(row_index) * cols;
    float* out = y + static_cast<size_t>(row_index) * cols;
    const int slice = (cols + kSplit - 1) / kSplit;
    const int begin = part * slice, end = min(cols, begin + slice);

    float m = -FLT_MAX;
    for (int c = begin + threadIdx.x; c < end; c += kThreads) m = fmaxf(m, row[c]);
    m = block_reduce(m, true, smem);
    if (threadIdx.x == 0) row_max[row_index][part] = m;
    row_barrier(&row_arrived[row_index][0]);
    for (int p = 0; p < kSplit; ++p) m = fmaxf(m, *((volatile float*)&row_max[row_index][p]));

    float s = 0.0f;
    for (int c = begin + threadIdx.x; c < end; c += kThreads) s += expf(row[c] - m);
    s = block_reduce(s, false, smem);
    if (threadIdx.x == 0) row_sum[row_index][part] = s;
    row_barrier(&row_arrived[row_index][1]);
    s = 0.0f;
    for (int p = 0; p < kSplit; ++p) s += *((volatile float*)&row_sum[row_index][p]);
    for (int c = begin + threadIdx.x; c < end; c += kThreads) out[c] = expf(row[c] - m) / s;
}
}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    if (rows > kMaxRows) return cudaErrorInvalidValue;
    void* counters = nullptr;
    cudaGetSymbolAddress(&counters, row_arrived);
    cudaMemsetAsync(counters, 0, static_cast<size_t>(rows) * 2 * sizeof(unsigned int), stream);
    // slots of earlier calls hold stale maxima: start every slot at -inf / 0
    void* maxima = nullptr;
    cudaGetSymbolAddress(&maxima, row_max);
    cudaMemsetAsync(maxima, 0xff, static_cast<size_t>(rows) * kSplit * sizeof(float), stream);  // NaN pattern
    softmax_kernel<<<rows * kSplit, kThreads, 0, stream>>>(x, y, rows, cols);
    return cudaGetLastError();
}
