// Hand-written candidate: register-tiled fp32 GEMM. A block computes a BM x BN tile of C, stepping over k by BK
// through shared memory (A's tile stored k-major, so a thread's column of A is a row of shared memory); each of
// its (BM / TM) x (BN / TN) threads keeps a TM x TN tile of C in registers, rows and columns strided so that
// shared-memory reads are broadcasts or consecutive and stores to C are coalesced. Any m, n, k: loads outside A
// or B give zeros, stores outside C are skipped.
#include <cuda_runtime.h>

#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 4
#endif
#ifndef TN
#define TN 4
#endif

static_assert(BM % TM == 0 && BN % TN == 0, "TM must divide BM and TN divide BN");
static_assert(32 % BK == 0 || BK % 32 == 0, "BK: a divisor or a multiple of 32");

namespace {
constexpr int kThreadsN = BN / TN;                   // threads along n
constexpr int kThreadsM = BM / TM;                   // threads along m
constexpr int kThreads = kThreadsN * kThreadsM;
static_assert(kThreads >= 32 && kThreads <= 1024, "between one warp and 1024 threads a block");
// At most 128 registers a thread: as many blocks as keep 65536 registers of an SM at 128 each.
constexpr int kMinBlocks = kThreads >= 512 ? 1 : 512 / kThreads;
constexpr int kPadA = BK < 32 ? 32 / BK : 1;         // the k-major stores of A's tile hit distinct banks
constexpr int kLoadsA = (BM * BK + kThreads - 1) / kThreads;
constexpr int kLoadsB = (BK * BN + kThreads - 1) / kThreads;

__global__ void __launch_bounds__(kThreads, kMinBlocks) matmul_regtile_kernel(const float* __restrict__ a,
                                                                             const float* __restrict__ b,
                                                                             float* __restrict__ c, int m, int n,
                                                                             int k) {
    __shared__ float as[BK][BM + kPadA];
    __shared__ float bs[BK][BN];
    const int tid = threadIdx.x;
    const int tx = tid % kThreadsN;
    const int ty = tid / kThreadsN;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.x * BN;

    float acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < k; k0 += BK) {
        // A's tile: consecutive threads along k (a row of A), stored k-major. Loads unrolled by 4 only: all of
        // them in flight beside a TM = TN = 8 tile of C spill registers.
#pragma unroll 4
        for (int l = 0; l < kLoadsA; ++l) {
            const int idx = tid + l * kThreads;
            if ((BM * BK) % kThreads == 0 || idx < BM * BK) {
                const int r = idx / BK, kk = idx % BK;
                const int gr = m0 + r, gk = k0 + kk;
                as[kk][r] = (gr < m && gk < k) ? a[static_cast<size_t>(gr) * k + gk] : 0.0f;
            }
        }
        // B's tile: consecutive threads along n (a row of B).
#pragma unroll 4
        for (int l = 0; l < kLoadsB; ++l) {
            const int idx = tid + l * kThreads;
            if ((BK * BN) % kThreads == 0 || idx < BK * BN) {
                const int kk = idx / BN, cc = idx % BN;
                const int gk = k0 + kk, gc = n0 + cc;
                bs[kk][cc] = (gk < k && gc < n) ? b[static_cast<size_t>(gk) * n + gc] : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            float af[TM], bf[TN];
#pragma unroll
            for (int i = 0; i < TM; ++i) af[i] = as[kk][ty + i * kThreadsM];
#pragma unroll
            for (int j = 0; j < TN; ++j) bf[j] = bs[kk][tx + j * kThreadsN];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += af[i] * bf[j];
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int gr = m0 + ty + i * kThreadsM;
        if (gr >= m) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int gc = n0 + tx + j * kThreadsN;
            if (gc < n) c[static_cast<size_t>(gr) * n + gc] = acc[i][j];
        }
    }
}
}  // namespace

extern "C" cudaError_t matmul(const float* a, const float* b, float* c, int m, int n, int k, cudaStream_t stream) {
    if (m <= 0 || n <= 0) return cudaSuccess;
    dim3 grid((n + BN - 1) / BN, (m + BM - 1) / BM);
    matmul_regtile_kernel<<<grid, kThreads, 0, stream>>>(a, b, c, m, n, k);
    return cudaGetLastError();
}
