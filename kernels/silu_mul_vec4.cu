// Hand-written candidate: float4 loads when the pointers allow it, a scalar path otherwise. Each thread takes
// UNROLL items (float4s, or floats on the scalar path) a BLOCK apart per trip of a grid-stride loop, all loads
// before any store, so UNROLL loads of each input are in flight at once.
#include <cuda_runtime.h>
#include <cstdint>

#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef UNROLL
#define UNROLL 1
#endif

static_assert(BLOCK % 32 == 0 && BLOCK >= 32 && BLOCK <= 1024, "BLOCK: whole warps, at most 1024 threads");
static_assert(UNROLL >= 1 && UNROLL <= 16, "UNROLL: 1 to 16 items per thread per trip");

namespace {
__device__ __forceinline__ float silu_mul1(float g, float u) { return g / (1.0f + __expf(-g)) * u; }

__global__ void __launch_bounds__(BLOCK) silu_mul_vec4_kernel(const float* __restrict__ gate,
                                                             const float* __restrict__ up,
                                                             float* __restrict__ out, int64_t n) {
    const int64_t chunk = static_cast<int64_t>(BLOCK) * UNROLL;  // items one block takes per trip
    const int64_t stride = static_cast<int64_t>(gridDim.x) * chunk;
    const int64_t first = static_cast<int64_t>(blockIdx.x) * chunk + threadIdx.x;
    const bool aligned = ((reinterpret_cast<uintptr_t>(gate) | reinterpret_cast<uintptr_t>(up) |
                           reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    if (aligned) {
        const int64_t n4 = n / 4;
        const float4* g4 = reinterpret_cast<const float4*>(gate);
        const float4* u4 = reinterpret_cast<const float4*>(up);
        float4* o4 = reinterpret_cast<float4*>(out);
        for (int64_t base = first; base < n4; base += stride) {
            if (base + static_cast<int64_t>(UNROLL - 1) * BLOCK < n4) {  // every item in range: no checks
                float4 g[UNROLL], u[UNROLL];
#pragma unroll
                for (int j = 0; j < UNROLL; ++j) {
                    g[j] = g4[base + j * BLOCK];
                    u[j] = u4[base + j * BLOCK];
                }
#pragma unroll
                for (int j = 0; j < UNROLL; ++j) {
                    o4[base + j * BLOCK] = make_float4(silu_mul1(g[j].x, u[j].x), silu_mul1(g[j].y, u[j].y),
                                                       silu_mul1(g[j].z, u[j].z), silu_mul1(g[j].w, u[j].w));
                }
            } else {
#pragma unroll
                for (int j = 0; j < UNROLL; ++j) {
                    const int64_t i = base + static_cast<int64_t>(j) * BLOCK;
                    if (i < n4) {
                        const float4 gj = g4[i], uj = u4[i];
                        o4[i] = make_float4(silu_mul1(gj.x, uj.x), silu_mul1(gj.y, uj.y), silu_mul1(gj.z, uj.z),
                                            silu_mul1(gj.w, uj.w));
                    }
                }
            }
        }
        // The last n % 4 elements (at most 3): the first threads of the grid take one each.
        const int64_t tail = n4 * 4 + static_cast<int64_t>(blockIdx.x) * BLOCK + threadIdx.x;
        if (tail < n) out[tail] = silu_mul1(gate[tail], up[tail]);
    } else {
        for (int64_t base = first; base < n; base += stride) {
            if (base + static_cast<int64_t>(UNROLL - 1) * BLOCK < n) {  // every item in range: no checks
                float g[UNROLL], u[UNROLL];
#pragma unroll
                for (int j = 0; j < UNROLL; ++j) {
                    g[j] = gate[base + j * BLOCK];
                    u[j] = up[base + j * BLOCK];
                }
#pragma unroll
                for (int j = 0; j < UNROLL; ++j) out[base + j * BLOCK] = silu_mul1(g[j], u[j]);
            } else {
#pragma unroll
                for (int j = 0; j < UNROLL; ++j) {
                    const int64_t i = base + static_cast<int64_t>(j) * BLOCK;
                    if (i < n) out[i] = silu_mul1(gate[i], up[i]);
                }
            }
        }
    }
}
}  // namespace

extern "C" cudaError_t silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    // Enough blocks for the float4 items (the scalar path loops over the rest), at most 4 waves of 2048 threads
    // on each of 132 SMs; at least one, which also covers n < 4.
    const int64_t chunk = static_cast<int64_t>(BLOCK) * UNROLL;
    int64_t blocks = (n / 4 + chunk - 1) / chunk;
    const int64_t most = 132 * (2048 / BLOCK) * 4;
    if (blocks > most) blocks = most;
    if (blocks < 1) blocks = 1;
    silu_mul_vec4_kernel<<<static_cast<unsigned>(blocks), BLOCK, 0, stream>>>(gate, up, out, n);
    return cudaGetLastError();
}
