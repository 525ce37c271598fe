// An example of binding r1build's kernels by hand, kept as documentation: it is NOT built. r1sample uses the
// bindings r1build writes from kernels.toml's [bindings] table (r1sample._kernels; see docs/guides/bindings.md).
// A project that wants its own binding links r1build::kernels and includes r1build_kernels.h as this file does
// (bench/warm_build.py builds it in its plain-CMake comparison).
//
// Every function takes its arrays (outputs included, preallocated) and a stream handle as an integer (0: the
// legacy default stream). Arguments are checked here, with errors that name the function and the argument:
// TypeError for the wrong kind of array (not on a CUDA device, not float32), ValueError for wrong shapes or
// layouts, RuntimeError for CUDA.

#include <cuda_runtime.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "r1build_kernels.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Any array at all: device, dtype and layout are checked by hand so the messages can be specific.
using Array = nb::ndarray<>;

std::string device_name(int device_type) {
    switch (device_type) {
        case nb::device::cpu::value: return "cpu";
        case nb::device::cuda::value: return "cuda";
        case nb::device::cuda_host::value: return "cuda_host (pinned host memory)";
        case nb::device::cuda_managed::value: return "cuda_managed";
        case nb::device::rocm::value: return "rocm";
        default: return "device type " + std::to_string(device_type);
    }
}

std::string dtype_name(nb::dlpack::dtype dt) {
    const char* kind = "?";
    switch (static_cast<nb::dlpack::dtype_code>(dt.code)) {
        case nb::dlpack::dtype_code::Int: kind = "int"; break;
        case nb::dlpack::dtype_code::UInt: kind = "uint"; break;
        case nb::dlpack::dtype_code::Float: kind = "float"; break;
        case nb::dlpack::dtype_code::Bfloat: kind = "bfloat"; break;
        case nb::dlpack::dtype_code::Complex: kind = "complex"; break;
        case nb::dlpack::dtype_code::Bool: return "bool";
        default: return "dtype code " + std::to_string(dt.code) + " of " + std::to_string(dt.bits) + " bits";
    }
    return std::string(kind) + std::to_string(dt.bits);
}

std::string shape_text(const Array& a) {
    std::string s = "(";
    for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

[[noreturn]] void type_error(const std::string& message) { throw nb::type_error(message.c_str()); }
[[noreturn]] void value_error(const std::string& message) { throw nb::value_error(message.c_str()); }

// One float32 C-contiguous CUDA array of `ndim` dimensions.
void check_array(const char* fn, const char* name, const Array& a, size_t ndim) {
    const std::string where = std::string("r1sample.") + fn + ": " + name;
    if (a.device_type() != nb::device::cuda::value) {
        type_error(where + " must be an array on a CUDA device (cupy, or torch on 'cuda'), got a " +
                   device_name(a.device_type()) + " array");
    }
    if (a.dtype() != nb::dtype<float>()) type_error(where + " must be float32, got " + dtype_name(a.dtype()));
    if (a.ndim() != ndim) {
        value_error(where + " must have " + std::to_string(ndim) + " dimension(s), got shape " + shape_text(a));
    }
    for (size_t i = 0; i < ndim; ++i) {
        if (a.shape(i) == 0) return;  // an empty array has no layout to check (its strides are arbitrary)
    }
    int64_t expected = 1;
    for (size_t i = ndim; i-- > 0;) {
        if (a.shape(i) != 1 && a.stride(i) != expected) {
            value_error(where + " must be C-contiguous (row major, no gaps); make a contiguous copy first");
        }
        expected *= static_cast<int64_t>(a.shape(i));
    }
}

void check_same_device(const char* fn, const Array& first, std::initializer_list<const Array*> others) {
    for (const Array* a : others) {
        if (a->device_id() != first.device_id()) {
            value_error(std::string("r1sample.") + fn + ": all arrays must be on one CUDA device, got devices " +
                        std::to_string(first.device_id()) + " and " + std::to_string(a->device_id()));
        }
    }
}

void check_shape(const char* fn, const char* name, const Array& a, const std::vector<int64_t>& want) {
    bool same = a.ndim() == want.size();
    for (size_t i = 0; same && i < want.size(); ++i) same = static_cast<int64_t>(a.shape(i)) == want[i];
    if (!same) {
        std::string w = "(";
        for (size_t i = 0; i < want.size(); ++i) w += (i ? ", " : "") + std::to_string(want[i]);
        w += want.size() == 1 ? ",)" : ")";
        value_error(std::string("r1sample.") + fn + ": " + name + " must have shape " + w + ", got " +
                    shape_text(a));
    }
}

int as_int32(const char* fn, const char* what, size_t v) {
    if (v > static_cast<size_t>(std::numeric_limits<int>::max())) {
        value_error(std::string("r1sample.") + fn + ": " + what + " = " + std::to_string(v) +
                    " is too large (the kernel takes 32-bit sizes)");
    }
    return static_cast<int>(v);
}

// Runs a launch on the arrays' device, then restores the caller's current device.
class DeviceScope {
public:
    DeviceScope(const char* fn, int device) : fn_(fn) {
        check(cudaGetDevice(&previous_));
        if (previous_ != device) check(cudaSetDevice(device));
    }
    ~DeviceScope() { cudaSetDevice(previous_); }
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

    void check(cudaError_t err) const {
        if (err != cudaSuccess) {
            cudaGetLastError();  // clear a sticky launch error so later calls see their own
            throw std::runtime_error(std::string("r1sample.") + fn_ + ": CUDA error " + cudaGetErrorName(err) +
                                     ": " + cudaGetErrorString(err));
        }
    }

private:
    const char* fn_;
    int previous_ = 0;
};

cudaStream_t as_stream(std::uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

void gelu_op(const Array& x, const Array& y, std::uintptr_t stream) {
    check_array("gelu", "x", x, 1);
    check_array("gelu", "y", y, 1);
    check_same_device("gelu", x, {&y});
    check_shape("gelu", "y", y, {static_cast<int64_t>(x.shape(0))});
    DeviceScope scope("gelu", x.device_id());
    scope.check(gelu(static_cast<const float*>(x.data()), static_cast<float*>(y.data()),
                     static_cast<int64_t>(x.shape(0)), as_stream(stream)));
}

void softmax_rows_op(const Array& x, const Array& y, std::uintptr_t stream) {
    check_array("softmax_rows", "x", x, 2);
    check_array("softmax_rows", "y", y, 2);
    check_same_device("softmax_rows", x, {&y});
    check_shape("softmax_rows", "y", y, {static_cast<int64_t>(x.shape(0)), static_cast<int64_t>(x.shape(1))});
    const int rows = as_int32("softmax_rows", "rows", x.shape(0));
    const int cols = as_int32("softmax_rows", "cols", x.shape(1));
    DeviceScope scope("softmax_rows", x.device_id());
    scope.check(softmax_rows(static_cast<const float*>(x.data()), static_cast<float*>(y.data()), rows, cols,
                             as_stream(stream)));
}

void reduce_sum_op(const Array& x, const Array& out, std::uintptr_t stream) {
    check_array("reduce_sum", "x", x, 1);
    check_array("reduce_sum", "out", out, 1);
    check_same_device("reduce_sum", x, {&out});
    check_shape("reduce_sum", "out", out, {1});
    DeviceScope scope("reduce_sum", x.device_id());
    scope.check(reduce_sum(static_cast<const float*>(x.data()), static_cast<float*>(out.data()),
                           static_cast<int64_t>(x.shape(0)), as_stream(stream)));
}

void matmul_tiled_op(const Array& a, const Array& b, const Array& c, std::uintptr_t stream) {
    check_array("matmul_tiled", "a", a, 2);
    check_array("matmul_tiled", "b", b, 2);
    check_array("matmul_tiled", "c", c, 2);
    check_same_device("matmul_tiled", a, {&b, &c});
    if (b.shape(0) != a.shape(1)) {
        value_error("r1sample.matmul_tiled: inner dimensions differ: a is " + shape_text(a) + ", b is " +
                    shape_text(b));
    }
    check_shape("matmul_tiled", "c", c, {static_cast<int64_t>(a.shape(0)), static_cast<int64_t>(b.shape(1))});
    const int m = as_int32("matmul_tiled", "m", a.shape(0));
    const int n = as_int32("matmul_tiled", "n", b.shape(1));
    const int k = as_int32("matmul_tiled", "k", a.shape(1));
    DeviceScope scope("matmul_tiled", a.device_id());
    scope.check(matmul_tiled(static_cast<const float*>(a.data()), static_cast<const float*>(b.data()),
                             static_cast<float*>(c.data()), m, n, k, as_stream(stream)));
}

int device_count() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        return 0;
    }
    if (err != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("r1sample.device_count: CUDA error ") + cudaGetErrorName(err) + ": " +
                                 cudaGetErrorString(err));
    }
    return count;
}

}  // namespace

NB_MODULE(_ops, m) {
    m.doc() = "r1build kernels on CUDA arrays (DLPack): outputs preallocated, stream as an integer handle.";
    m.def("gelu", &gelu_op, "x"_a, "y"_a, "stream"_a = 0,
          "y = GELU(x) (tanh approximation); x and y float32, 1-d, same length.");
    m.def("softmax_rows", &softmax_rows_op, "x"_a, "y"_a, "stream"_a = 0,
          "y = softmax over each row of x; x and y float32, 2-d, same shape.");
    m.def("reduce_sum", &reduce_sum_op, "x"_a, "out"_a, "stream"_a = 0,
          "out[0] = sum(x); x float32 1-d, out float32 of shape (1,).");
    m.def("matmul_tiled", &matmul_tiled_op, "a"_a, "b"_a, "c"_a, "stream"_a = 0,
          "c = a @ b; a (m, k), b (k, n), c (m, n), all float32.");
    m.def("device_count", &device_count, "Number of CUDA devices this process can use (0 without a driver).");
}
