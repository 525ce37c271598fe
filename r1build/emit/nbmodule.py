"""The nanobind module of the emitted bindings (``r1build_bindings.cpp``, built as ``<python>_ext``).

Each kernel becomes one function taking every array argument (DLPack: cupy, torch, numpy, ...) in declaration
order, then the free scalars (:mod:`r1build.emit.bound`), then the stream handle as an integer. Before the launch
it checks every array against the manifest, with errors naming the function, the argument and what was expected:
``TypeError`` for an array of another dtype or not on a CUDA device (checked last, so host arrays show every
other error), ``ValueError`` for the number of
dimensions, a dimension that differs from the manifest's shape (sizes read from the first input naming them,
fixed extents as written), a layout that is not C-contiguous, a data pointer below the kernel's ``alignment``
(else its element size), arrays on different devices, or a size its C type cannot hold; ``RuntimeError`` for
an error the launch returns. The launch runs on the arrays' device; the caller's current device is restored.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..manifest.model import DTYPE_BYTES, DTYPES, Arg
from ..manifest.values import integer_range
from .bound import BoundKernel, shape_text
from .header import HEADER_NAME
from .plan import MARKER

__all__ = ["BINDINGS_CPP", "c_string", "render_nb_module"]

BINDINGS_CPP = "r1build_bindings.cpp"

_CODES = {"float": "Float", "bfloat": "Bfloat", "int": "Int", "uint": "UInt", "bool": "Bool"}

_PRELUDE = r"""
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using In = nb::ndarray<nb::ro>;  // read only: numpy's read-only arrays are accepted (and refused as host memory)
using Out = nb::ndarray<>;

// A size of the manifest: unknown (-1) until the first dimension naming it (or the caller) gives it.
struct Size {
    const char* name;
    int64_t value = -1;
    std::string from;
};

// One dimension of a manifest shape: a size, or a fixed extent.
struct Dim {
    Size* size;
    int64_t fixed;
};

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
    std::string name = std::string(kind) + std::to_string(dt.bits);
    return dt.lanes == 1 ? name : name + "x" + std::to_string(dt.lanes);
}

template <class A>
std::string shape_of(const A& a) {
    std::string s = "(";
    for (size_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

[[noreturn]] void type_error(const std::string& message) { throw nb::type_error(message.c_str()); }
[[noreturn]] void value_error(const std::string& message) { throw nb::value_error(message.c_str()); }

// The device of one array argument (checked after everything else, so host arrays show the other errors).
template <class A>
void check_device(const char* fn, const char* name, const A& a) {
    if (a.device_type() != nb::device::cuda::value && a.device_type() != nb::device::cuda_managed::value) {
        type_error(std::string(fn) + ": " + name + " must be an array on a CUDA device (cupy, or torch on 'cuda'), " +
                   "got a " + device_name(a.device_type()) + " array");
    }
}

// Dtype, layout (C-contiguous) and alignment of one array argument.
template <class A>
void check_array(const char* fn, const char* name, const A& a, nb::dlpack::dtype_code code, int bits,
                 const char* dtype, std::uintptr_t alignment) {
    const std::string where = std::string(fn) + ": " + name;
    const nb::dlpack::dtype dt = a.dtype();
    if (dt.code != static_cast<uint8_t>(code) || dt.bits != bits || dt.lanes != 1) {
        type_error(where + " must be " + dtype + ", got " + dtype_name(dt));
    }
    if (a.size() == 0) return;  // an empty array has no layout to check (its strides are arbitrary)
    int64_t expected = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
        if (a.shape(i) != 1 && a.stride(i) != expected) {
            value_error(where + " must be C-contiguous (row major, no gaps); make a contiguous copy first");
        }
        expected *= static_cast<int64_t>(a.shape(i));
    }
    const std::uintptr_t address = reinterpret_cast<std::uintptr_t>(a.data());
    if (address % alignment != 0) {
        value_error(where + " must be aligned to " + std::to_string(alignment) + " bytes, its data starts " +
                    std::to_string(address % alignment) + " bytes past such an address");
    }
}

// The array's shape against the manifest's: sizes not yet known are read from it, the others compared.
template <class A>
void check_shape(const char* fn, const char* name, const A& a, std::initializer_list<Dim> dims) {
    const std::string where = std::string(fn) + ": " + name;
    if (a.ndim() != dims.size()) {
        value_error(where + " must have " + std::to_string(dims.size()) + " dimension(s), got shape " + shape_of(a));
    }
    bool same = true;
    size_t i = 0;
    for (const Dim& d : dims) {
        const int64_t got = static_cast<int64_t>(a.shape(i));
        if (d.size != nullptr && d.size->value < 0) {
            d.size->value = got;
            d.size->from = std::string(name) + "'s dimension " + std::to_string(i);
        } else {
            same = same && (d.size != nullptr ? d.size->value : d.fixed) == got;
        }
        ++i;
    }
    if (same) return;
    std::string want = "(";
    std::string named = "[";
    std::string known;
    i = 0;
    for (const Dim& d : dims) {
        const std::string sep = i++ ? ", " : "";
        want += sep + std::to_string(d.size != nullptr ? d.size->value : d.fixed);
        named += sep + (d.size != nullptr ? std::string(d.size->name) : std::to_string(d.fixed));
        if (d.size != nullptr && d.size->from.rfind(std::string(name) + "'s", 0) != 0) {
            known += "; " + std::string(d.size->name) + " = " + std::to_string(d.size->value) + " from " + d.size->from;
        }
    }
    want += dims.size() == 1 ? ",)" : ")";
    value_error(where + " must have shape " + want + " (the manifest's " + named + "]), got " + shape_of(a) + known);
}

void check_free_size(const char* fn, Size& size, int64_t value) {
    if (value < 0) {
        value_error(std::string(fn) + ": " + size.name + " must not be negative, got " + std::to_string(value));
    }
    size.value = value;
    size.from = "the argument";
}

void check_range(const char* fn, const Size& size, int64_t most, const char* dtype) {
    if (size.value > most) {
        value_error(std::string(fn) + ": " + size.name + " = " + std::to_string(size.value) + " (from " + size.from +
                    ") is too large for the kernel's " + dtype + " " + size.name);
    }
}

void check_same_device(const char* fn, std::initializer_list<std::pair<const char*, int>> arrays) {
    const auto& first = *arrays.begin();
    for (const auto& other : arrays) {
        if (other.second != first.second) {
            value_error(std::string(fn) + ": all arrays must be on one CUDA device, got " + first.first +
                        " on device " + std::to_string(first.second) + " and " + other.first + " on device " +
                        std::to_string(other.second));
        }
    }
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
            throw std::runtime_error(std::string(fn_) + ": CUDA error " + cudaGetErrorName(err) + ": " +
                                     cudaGetErrorString(err));
        }
    }

private:
    const char* fn_;
    int previous_ = 0;
};

cudaStream_t as_stream(std::uintptr_t stream) { return reinterpret_cast<cudaStream_t>(stream); }

int device_count() {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaErrorNoDevice || err == cudaErrorInsufficientDriver) {
        cudaGetLastError();
        return 0;
    }
    if (err != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("device_count: CUDA error ") + cudaGetErrorName(err) + ": " +
                                 cudaGetErrorString(err));
    }
    return count;
}
"""


def c_string(text: str) -> str:
    """A C string literal holding ``text`` (UTF-8; octal escapes for everything but printable ASCII)."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\?':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _param(arg: Arg) -> str:
    """The compiled function's parameter for one argument."""
    if arg.is_array:
        return f"const {'In' if arg.role == 'in' else 'Out'}& {arg.name}"
    if arg.is_size:
        return f"int64_t {arg.name}"
    return f"{'float' if arg.dtype in ('float16', 'bfloat16') else DTYPES[arg.dtype]} {arg.name}"


def _dtype_code(dtype: str) -> tuple[str, int]:
    kind = dtype.rstrip("0123456789")
    return _CODES[kind], 8 * DTYPE_BYTES[dtype]


def _call_arg(arg: Arg) -> str:
    """The entry point's argument for one manifest argument."""
    c_type = DTYPES[arg.dtype]
    if arg.is_array:
        const = "const " if arg.role == "in" else ""
        return f"static_cast<{const}{c_type}*>({arg.name}.data())"
    if arg.is_size:
        return f"static_cast<{c_type}>(r1b_s_{arg.name}.value)"
    return f"static_cast<{c_type}>({arg.name})"


def _checks(k: BoundKernel, alignment: int | None) -> list[str]:
    lines = [f"    Size r1b_s_{a.name}{{{c_string(a.name)}}};" for a in k.spec.args if a.is_size]
    lines += [f"    check_free_size(r1b_fn, r1b_s_{a.name}, {a.name});" for a in k.free if a.is_size]
    for arg in k.inputs + k.outputs:
        code, bits = _dtype_code(arg.dtype)
        align = max(alignment or 1, DTYPE_BYTES[arg.dtype])
        dims = ", ".join(
            f"Dim{{&r1b_s_{d}, 0}}" if isinstance(d, str) else f"Dim{{nullptr, {d}}}" for d in arg.shape or []
        )
        lines += [
            f"    check_shape(r1b_fn, {c_string(arg.name)}, {arg.name}, {{{dims}}});",
            f"    check_array(r1b_fn, {c_string(arg.name)}, {arg.name}, nb::dlpack::dtype_code::{code}, {bits}, "
            f'"{arg.dtype}", {align});',
        ]
    for arg in (a for a in k.spec.args if a.is_size):
        most = integer_range(arg.dtype)[1] if arg.dtype != "uint64" else 2**63 - 1
        lines.append(f'    check_range(r1b_fn, r1b_s_{arg.name}, {min(most, 2**63 - 1)}LL, "{arg.dtype}");')
    lines += [f"    check_device(r1b_fn, {c_string(a.name)}, {a.name});" for a in k.inputs + k.outputs]
    return lines


def _function(k: BoundKernel) -> list[str]:
    arrays = k.arrays
    params = [_param(a) for a in arrays] + [_param(a) for a in k.free] + ["std::uintptr_t stream"]
    lines = [
        "",
        f"// {k.qualname}: {shape_text([a.name for a in arrays])} then the free scalars, the stream last",
        f"void bind_{k.spec.name}({', '.join(params)}) {{",
        f"    const char* r1b_fn = {c_string(k.qualname)};",
        *_checks(k, k.spec.alignment),
    ]
    call = ", ".join([_call_arg(a) for a in k.spec.args] + ["as_stream(stream)"])
    if arrays:
        pairs = ", ".join(f"{{{c_string(a.name)}, {a.name}.device_id()}}" for a in arrays)
        lines += [
            f"    check_same_device(r1b_fn, {{{pairs}}});",
            f"    DeviceScope r1b_scope(r1b_fn, {arrays[0].name}.device_id());",
            f"    r1b_scope.check({k.entry}({call}));",
        ]
    else:
        lines += ["    DeviceScope r1b_scope(r1b_fn, 0);", f"    r1b_scope.check({k.entry}({call}));"]
    return [*lines, "}"]


def _def_line(k: BoundKernel) -> str:
    names = [f'"{a.name}"_a' for a in k.arrays] + [f'"{a.name}"_a' for a in k.free] + ['"stream"_a = 0']
    doc = c_string(f"{k.spec.description} (checked arrays, outputs preallocated, stream as an integer handle)")
    return f'    m.def("{k.spec.name}", &bind_{k.spec.name}, {", ".join(names)},\n          {doc});'


def render_nb_module(module: str, ext: str, kernels: Sequence[BoundKernel]) -> str:
    """The nanobind module ``ext`` (the compiled part of the Python module ``module``) binding ``kernels``."""
    lines = [
        f"// {MARKER} from the manifest's kernels: do not edit, it is rewritten on every build.",
        f"// {module}'s compiled part: each kernel checked against the manifest, then launched.",
        f'#include "{HEADER_NAME}"',
        _PRELUDE.rstrip("\n"),
    ]
    for k in kernels:
        lines += _function(k)
    lines += ["", "}  // namespace", "", f"NB_MODULE({ext}, m) {{"]
    lines.append(f"    m.doc() = {c_string(f'The compiled part of {module}: r1build kernels on DLPack arrays.')};")
    lines += [_def_line(k) for k in kernels]
    lines += [
        '    m.def("device_count", &device_count, "Number of CUDA devices this process can use (0 without one).");'
    ]
    return "\n".join([*lines, "}"]) + "\n"
