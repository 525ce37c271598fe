// A CPython extension without binding libraries. tiny.scale_empty() calls the kernel with n = 0 and returns the
// cudaError_t it gets (0); tiny.scale_check(n) runs it on the GPU on x[i] = i and returns how many outputs are
// not 2 * x[i], or minus the cudaError_t of the first CUDA call that failed (-209,
// cudaErrorNoKernelImageForDevice: the module holds no code this GPU runs). Linking it pulls the kernel's
// object, device code included, into the module.
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>

#include "r1build_kernels.h"

static PyObject* scale_empty(PyObject* self, PyObject* args) {
    (void)self;
    (void)args;
    return PyLong_FromLong((long)scale(NULL, NULL, 0, (cudaStream_t)0));
}

static long check_on_gpu(int n, float* host, float* x, float* y) {
    const size_t bytes = (size_t)n * sizeof(float);
    cudaError_t err;
    long wrong = 0;
    for (int i = 0; i < n; ++i) host[i] = (float)i;
    if ((err = cudaMemcpy(x, host, bytes, cudaMemcpyHostToDevice)) != cudaSuccess) return -(long)err;
    if ((err = scale(x, y, n, (cudaStream_t)0)) != cudaSuccess) return -(long)err;
    if ((err = cudaMemcpy(host, y, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess) return -(long)err;
    for (int i = 0; i < n; ++i) wrong += host[i] != 2.0f * (float)i;
    return wrong;
}

static PyObject* scale_check(PyObject* self, PyObject* args) {
    int n = 0;
    float* x = NULL;
    float* y = NULL;
    long result;
    cudaError_t err;
    (void)self;
    if (!PyArg_ParseTuple(args, "i", &n) || n <= 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "n must be positive");
        return NULL;
    }
    float* host = (float*)malloc((size_t)n * sizeof(float));
    if (host == NULL) return PyErr_NoMemory();
    if ((err = cudaMalloc((void**)&x, (size_t)n * sizeof(float))) != cudaSuccess ||
        (err = cudaMalloc((void**)&y, (size_t)n * sizeof(float))) != cudaSuccess) {
        result = -(long)err;
    } else {
        result = check_on_gpu(n, host, x, y);
    }
    cudaFree(x);
    cudaFree(y);
    free(host);
    return PyLong_FromLong(result);
}

static PyMethodDef methods[] = {
    {"scale_empty", scale_empty, METH_NOARGS, "Call the kernel on zero elements; returns its cudaError_t."},
    {"scale_check", scale_check, METH_VARARGS, "Run the kernel on n elements on the GPU; wrong outputs or -error."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tiny", NULL, -1, methods};

PyMODINIT_FUNC PyInit_tiny(void) { return PyModule_Create(&module); }
