// An extension module named by CMake (twin_a or twin_b) whose negative() calls the kernel `scale` with n = -1
// and returns the cudaError_t it gets, which tells which project's `scale` was called.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "r1build_kernels.h"

static PyObject* negative(PyObject* self, PyObject* args) {
    (void)self;
    (void)args;
    return PyLong_FromLong((long)scale(NULL, NULL, -1, (cudaStream_t)0));
}

static PyMethodDef methods[] = {
    {"negative", negative, METH_NOARGS, "Call this module's kernel with n = -1; returns its cudaError_t."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, TWIN_NAME, NULL, -1, methods};

PyMODINIT_FUNC TWIN_INIT(void) { return PyModule_Create(&module); }
