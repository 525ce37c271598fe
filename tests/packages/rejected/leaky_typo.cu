#include <cuda_runtime.h>

extern "C" cudaError_t leaky(const float* x, float* y, int n, cudaStream_t stream) {
    return cudaSucces;  // a typo: does not compile
}
