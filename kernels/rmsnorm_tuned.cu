// Hand-written candidate: one block of BLOCK threads per row, the sum of squares by warp shuffles, loads of VEC
// floats (float2/float4) wherever the row allows: a scalar head up to the first VEC-aligned element, aligned
// vectors, a scalar tail (a row starts anywhere when cols is odd). The scaling pass writes vectors where the
// output row and the weights have the input row's alignment, one float at a time otherwise.
#include <cuda_runtime.h>
#include <cstdint>

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024, "BLOCK: whole warps, at most 1024 threads");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC: 1, 2 or 4 floats per load");

namespace {
constexpr int kWarps = BLOCK / 32;

struct alignas(4 * VEC) Vec {
    float v[VEC];
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__global__ void __launch_bounds__(BLOCK) rmsnorm_tuned_kernel(const float* __restrict__ x,
                                                             const float* __restrict__ w, float* __restrict__ y,
                                                             int cols, float eps) {
    __shared__ float red[kWarps];  // written by each warp's first lane before the barrier, read after it
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float* out = y + static_cast<size_t>(blockIdx.x) * cols;
    const int t = threadIdx.x;
    // The row's parts: [0, head) scalar, then `body` aligned vectors, then [tail, cols) scalar.
    const int misaligned = static_cast<int>((reinterpret_cast<uintptr_t>(row) / sizeof(float)) % VEC);
    const int head = (VEC - misaligned) % VEC < cols ? (VEC - misaligned) % VEC : cols;
    const int body = (cols - head) / VEC;
    const int tail = head + body * VEC;
    const Vec* row_v = reinterpret_cast<const Vec*>(row + head);

    float acc = 0.0f;
    for (int c = t; c < head; c += BLOCK) acc += row[c] * row[c];
    for (int i = t; i < body; i += BLOCK) {
        const Vec v = row_v[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc += v.v[j] * v.v[j];
    }
    for (int c = tail + t; c < cols; c += BLOCK) acc += row[c] * row[c];
    acc = warp_sum(acc);
    if ((t & 31) == 0) red[t / 32] = acc;
    __syncthreads();
    // Every warp sums the warps' results itself: the same order everywhere, so the same value in every thread.
    acc = warp_sum((t & 31) < kWarps ? red[t & 31] : 0.0f);
    const float inv = rsqrtf(acc / cols + eps);

    const uintptr_t r = reinterpret_cast<uintptr_t>(row);
    if (((r ^ reinterpret_cast<uintptr_t>(out)) | (r ^ reinterpret_cast<uintptr_t>(w))) % (4 * VEC) == 0) {
        const Vec* w_v = reinterpret_cast<const Vec*>(w + head);
        Vec* out_v = reinterpret_cast<Vec*>(out + head);
        for (int c = t; c < head; c += BLOCK) out[c] = row[c] * inv * w[c];
        for (int i = t; i < body; i += BLOCK) {
            Vec v = row_v[i];
            const Vec wv = w_v[i];
#pragma unroll
            for (int j = 0; j < VEC; ++j) v.v[j] = v.v[j] * inv * wv.v[j];
            out_v[i] = v;
        }
        for (int c = tail + t; c < cols; c += BLOCK) out[c] = row[c] * inv * w[c];
    } else {
        for (int c = t; c < cols; c += BLOCK) out[c] = row[c] * inv * w[c];
    }
}
}  // namespace

extern "C" cudaError_t rmsnorm(const float* x, const float* weight, float* y, int rows, int cols, float eps,
                               cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    rmsnorm_tuned_kernel<<<rows, BLOCK, 0, stream>>>(x, weight, y, cols, eps);
    return cudaGetLastError();
}
