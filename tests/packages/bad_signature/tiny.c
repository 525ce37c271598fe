// A CPython extension without binding libraries: tiny.scale_empty() calls the kernel with n = 0 and returns the
// cudaError_t it gets (0). Linking it pulls the kernel's object, device code included, into the module.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "r1build_kernels.h"

static PyObject* scale_empty(PyObject* self, PyObject* args) {
    (void)self;
    (void)args;
    return PyLong_FromLong((long)scale(NULL, NULL, 0, (cudaStream_t)0));
}

static PyMethodDef methods[] = {
    {"scale_empty", scale_empty, METH_NOARGS, "Call the kernel on zero elements; returns its cudaError_t."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tiny", NULL, -1, methods};

PyMODINIT_FUNC PyInit_tiny(void) { return PyModule_Create(&module); }
