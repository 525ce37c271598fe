// Hand-written candidate: one block of BLOCK threads per row, warp-shuffle reductions. Loads of VEC floats
// (float2/float4) wherever the row allows: a scalar head up to the first VEC-aligned element, aligned vectors,
// a scalar tail (a row starts anywhere when cols is odd). ONLINE = 1 finds the max and the sum of exponentials
// in one pass (the sum rescaled whenever the max grows), then writes: two passes over the row instead of three.
#include <cuda_runtime.h>
#include <cfloat>
#include <cstdint>

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef ONLINE
#define ONLINE 1
#endif

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024, "BLOCK: whole warps, at most 1024 threads");
static_assert(VEC == 1 || VEC == 2 || VEC == 4, "VEC: 1, 2 or 4 floats per load");
static_assert(ONLINE == 0 || ONLINE == 1, "ONLINE: 0 or 1");

namespace {
constexpr int kWarps = BLOCK / 32;

struct alignas(4 * VEC) Vec {
    float v[VEC];
};

// The row's parts: [0, head) scalar, then `body` aligned vectors, then [head + body * VEC, cols) scalar.
struct Split {
    int head, body;
};

__device__ __forceinline__ Split split(const float* p, int cols) {
    const int misaligned = static_cast<int>((reinterpret_cast<uintptr_t>(p) / sizeof(float)) % VEC);
    int head = (VEC - misaligned) % VEC;
    if (head > cols) head = cols;
    return Split{head, (cols - head) / VEC};
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Every warp reduces the per-warp results itself, so every thread gets the block's result after one barrier.
// `red` is used by this one call only (each reduction of a block has its own array).
__device__ __forceinline__ float block_max(float v, float* red) {
    v = warp_max(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    return warp_max(lane < kWarps ? red[lane] : -FLT_MAX);
}

__device__ __forceinline__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    const int lane = threadIdx.x & 31;
    return warp_sum(lane < kWarps ? red[lane] : 0.0f);
}

// (m, s) stands for s * exp(m): a running max and the sum of exp(x - m) over the elements seen.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    const float mm = fmaxf(m, m2);
    s = s * expf(m - mm) + s2 * expf(m2 - mm);
    m = mm;
}

__global__ void __launch_bounds__(BLOCK) softmax_rows_tuned_kernel(const float* __restrict__ x,
                                                                  float* __restrict__ y, int cols) {
    const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
    float* out = y + static_cast<size_t>(blockIdx.x) * cols;
    const Split in = split(row, cols);
    const Vec* row_v = reinterpret_cast<const Vec*>(row + in.head);
    const int tail = in.head + in.body * VEC;
    const int t = threadIdx.x;
    __shared__ float red_m[kWarps];  // each written once, by the warps' first lanes, before one barrier
    __shared__ float red_s[kWarps];

#if ONLINE
    float m = -FLT_MAX, s = 0.0f;
    for (int c = t; c < in.head; c += BLOCK) merge(m, s, row[c], 1.0f);
    for (int i = t; i < in.body; i += BLOCK) {
        const Vec v = row_v[i];
        float vm = v.v[0];
#pragma unroll
        for (int j = 1; j < VEC; ++j) vm = fmaxf(vm, v.v[j]);
        const float mm = fmaxf(m, vm);
        float vs = 0.0f;
#pragma unroll
        for (int j = 0; j < VEC; ++j) vs += expf(v.v[j] - mm);
        s = s * expf(m - mm) + vs;
        m = mm;
    }
    for (int c = tail + t; c < cols; c += BLOCK) merge(m, s, row[c], 1.0f);
    // Warp, then block: the pairs merge like the values of a sum.
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
    if ((t & 31) == 0) {
        red_m[t / 32] = m;
        red_s[t / 32] = s;
    }
    __syncthreads();
    const int lane = t & 31;
    m = lane < kWarps ? red_m[lane] : -FLT_MAX;
    s = lane < kWarps ? red_s[lane] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, m2, s2);
    }
#else
    float m = -FLT_MAX;
    for (int c = t; c < in.head; c += BLOCK) m = fmaxf(m, row[c]);
    for (int i = t; i < in.body; i += BLOCK) {
        const Vec v = row_v[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) m = fmaxf(m, v.v[j]);
    }
    for (int c = tail + t; c < cols; c += BLOCK) m = fmaxf(m, row[c]);
    m = block_max(m, red_m);
    float s = 0.0f;
    for (int c = t; c < in.head; c += BLOCK) s += expf(row[c] - m);
    for (int i = t; i < in.body; i += BLOCK) {
        const Vec v = row_v[i];
#pragma unroll
        for (int j = 0; j < VEC; ++j) s += expf(v.v[j] - m);
    }
    for (int c = tail + t; c < cols; c += BLOCK) s += expf(row[c] - m);
    s = block_sum(s, red_s);
#endif
    const float inv = 1.0f / s;

    // The write: vectors where the output row has the input row's alignment, else one float at a time.
    if (((reinterpret_cast<uintptr_t>(row) ^ reinterpret_cast<uintptr_t>(out)) % (4 * VEC)) == 0) {
        Vec* out_v = reinterpret_cast<Vec*>(out + in.head);
        for (int c = t; c < in.head; c += BLOCK) out[c] = expf(row[c] - m) * inv;
        for (int i = t; i < in.body; i += BLOCK) {
            Vec v = row_v[i];
#pragma unroll
            for (int j = 0; j < VEC; ++j) v.v[j] = expf(v.v[j] - m) * inv;
            out_v[i] = v;
        }
        for (int c = tail + t; c < cols; c += BLOCK) out[c] = expf(row[c] - m) * inv;
    } else {
        for (int c = t; c < cols; c += BLOCK) out[c] = expf(row[c] - m) * inv;
    }
}
}  // namespace

extern "C" cudaError_t softmax_rows(const float* x, float* y, int rows, int cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return cudaSuccess;
    softmax_rows_tuned_kernel<<<rows, BLOCK, 0, stream>>>(x, y, cols);
    return cudaGetLastError();
}
