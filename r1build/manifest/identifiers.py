"""Which names a kernel, a parameter or a tunable may take: C identifiers the generated code can use.

A kernel's name becomes an ``extern "C"`` symbol in the same translation unit as the CUDA runtime, libc and
libm headers, and in the same process as those libraries; a parameter's name is in scope inside the candidate's
entry point; a tunable's name becomes a macro (``-DNAME=value``) seen by every header the candidate includes.
So beyond the C identifier syntax a name must not be:

* a keyword of C, C++ or CUDA C++, or an alternative operator token (``nullptr``, ``constexpr``, ``and``);
* reserved to the implementation: containing ``__`` or starting with ``_`` and an upper-case letter (C++), or
  starting with ``_`` at all for a global name (the kernel);
* a CUDA built-in variable or type (``threadIdx``, ``warpSize``, ``dim3``, ``float4``), a type the declaration
  uses (``int64_t``, ``cudaStream_t``), a POSIX ``_t`` type name, or a CUDA runtime or driver API name
  (``cuda*``, ``cu*`` with an upper-case letter next);
* a function or macro of the C standard library, libm (with its ``f``/``l`` variants) or CUDA's device
  functions (``memcpy``, ``printf``, ``exit``, ``expf``, ``atomicAdd``, ``min``);
* for a kernel, also any symbol the running C library or libm exports (``index``, ``select``, ``read``): an
  exported function of that name would clash at link or load time;
* a macro of the C library or the CUDA headers (``NULL``, ``INT_MAX``, ``CUDART_VERSION``, ``M_PI``);
* a name the generated code uses (``stream``, anything starting with ``r1build_`` in any case).

Tunable names are macros, so they are upper case (``BLOCK``, ``TILE_M``), which keeps them off every
lower-case name in the CUDA headers.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Literal

__all__ = ["IDENTIFIER", "MAX_NAME", "name_problem"]

MAX_NAME = 100
"""Longest name: a kernel's name is part of generated file names, which file systems cap at 255 bytes."""

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_MACRO = re.compile(r"[A-Z][A-Z0-9_]*")

Kind = Literal["kernel", "argument", "tunable"]

_KEYWORDS = frozenset(
    """
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local
    alignas alignof and and_eq asm bitand bitor bool catch char8_t char16_t char32_t class compl concept const_cast
    consteval constexpr constinit co_await co_return co_yield decltype delete dynamic_cast explicit export false
    friend mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public
    reinterpret_cast requires static_assert static_cast template this thread_local throw true try typeid typename
    using virtual wchar_t xor xor_eq final override import module
    __global__ __device__ __host__ __shared__ __constant__ __managed__ __restrict__ __forceinline__ __noinline__
    __launch_bounds__ __grid_constant__
""".split()
)
"""Keywords of C11/C23, C++20 (alternative tokens and contextual ones included) and CUDA's qualifiers."""

_CUDA_BUILTINS = frozenset(
    """
    threadIdx blockIdx blockDim gridDim warpSize clusterIdx clusterDim dim3
    cudaStream_t cudaError_t cudaSuccess size_t ssize_t ptrdiff_t nullptr_t max_align_t
    int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t uintmax_t
    half half2 __half __half2 nv_bfloat16 nv_bfloat162 __nv_bfloat16 __nv_bfloat162 std
""".split()
)
"""CUDA's built-in variables, and the types a declaration or a kernel body names."""

_VECTOR_TYPE = re.compile(r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double)[1-4](?:_16a|_32a)?")

_LIBC = frozenset(
    """
    abort abs aligned_alloc atexit at_quick_exit atof atoi atol atoll bsearch calloc div exit free getenv labs
    ldiv llabs lldiv malloc mblen mbstowcs mbtowc qsort quick_exit rand realloc srand strtod strtof strtol strtold
    strtoll strtoul strtoull system wcstombs wctomb
    clearerr fclose feof ferror fflush fgetc fgetpos fgets fopen fprintf fputc fputs fread freopen fscanf fseek
    fsetpos ftell fwrite getc getchar gets perror printf putc putchar puts remove rename rewind scanf setbuf
    setvbuf snprintf sprintf sscanf tmpfile tmpnam ungetc vfprintf vfscanf vprintf vscanf vsnprintf vsprintf
    vsscanf
    memchr memcmp memcpy memmove memset strcat strchr strcmp strcoll strcpy strcspn strerror strlen strncat
    strncmp strncpy strpbrk strrchr strspn strstr strtok strxfrm strdup strndup
    isalnum isalpha isblank iscntrl isdigit isgraph islower isprint ispunct isspace isupper isxdigit tolower
    toupper
    clock difftime mktime time asctime ctime gmtime localtime strftime timespec_get
    signal raise setjmp longjmp errno assert offsetof va_start va_arg va_end va_copy main
    open close read write fork execve execv execvp kill sleep usleep pipe dup dup2 socket connect bind listen
    accept send recv mmap munmap dlopen dlsym pthread_create
""".split()
)
"""The C standard library's functions and macros (and the POSIX calls a kernel must not shadow)."""

_LIBM = frozenset(
    """
    acos acosh asin asinh atan atan2 atanh cbrt ceil copysign cos cosh erf erfc exp exp2 expm1 fabs fdim floor
    fma fmax fmin fmod frexp hypot ilogb ldexp lgamma llrint llround log log10 log1p log2 logb lrint lround modf
    nan nearbyint nextafter nexttoward pow remainder remquo rint round scalbln scalbn sin sinh sqrt tan tanh
    tgamma trunc fpclassify isfinite isinf isnan isnormal signbit isgreater isless
""".split()
)
"""libm's functions and classification macros; each also has ``f`` and ``l`` variants."""

_CUDA_DEVICE = frozenset(
    """
    min max umin umax llmin llmax ullmin ullmax rsqrt rsqrtf rcbrt rcbrtf sincos sincosf sincospi sincospif
    sinpi sinpif cospi cospif exp10 exp10f erfinv erfinvf erfcinv erfcinvf erfcx erfcxf normcdf normcdff
    normcdfinv normcdfinvf saturate fdivide fdividef norm normf norm3d norm4d rnorm rnormf j0 j1 jn y0 y1 yn
    atomicAdd atomicSub atomicExch atomicMin atomicMax atomicInc atomicDec atomicCAS atomicAnd atomicOr atomicXor
    clock64 malloc free printf assert make_float2 make_float4 make_int2 make_int4 make_uint4 make_double2
""".split()
)
"""CUDA's device functions that a kernel body calls by name."""

_MACROS = frozenset(
    """
    NULL EOF BUFSIZ FILENAME_MAX FOPEN_MAX TMP_MAX RAND_MAX EXIT_SUCCESS EXIT_FAILURE MB_CUR_MAX MB_LEN_MAX
    CHAR_BIT CHAR_MAX CHAR_MIN SIZE_MAX PTRDIFF_MAX PTRDIFF_MIN INFINITY NAN HUGE_VAL HUGE_VALF HUGE_VALL
    CLOCKS_PER_SEC SEEK_SET SEEK_CUR SEEK_END NDEBUG
""".split()
)
"""Standard macros a tunable must not redefine (``NDEBUG`` changes what ``assert`` does in every header)."""

_RESERVED_MACRO = re.compile(
    r"(?:CUDA|CUDART|CUB|CCCL|THRUST|NV|NVCC|CU|CUFFT|CUBLAS|CURAND|FLT|DBL|LDBL|INT\d*|UINT\d*|INTMAX|UINTMAX"
    r"|INTPTR|UINTPTR|SCHAR|UCHAR|SHRT|USHRT|LONG|ULONG|LLONG|ULLONG|WCHAR|WINT|SIG_ATOMIC|M)_\w*",
    re.ASCII,
)
"""Macro families of the C standard headers and the CUDA headers (``INT32_MAX``, ``FLT_EPSILON``, ``M_PI``,
``CUDART_VERSION``)."""


def _math_names() -> frozenset[str]:
    return frozenset(name + suffix for name in _LIBM for suffix in ("", "f", "l"))


_MATH = _math_names()


@functools.cache
def _c_libraries() -> tuple[int, ...]:
    """Handles of the running C library and libm, opened once (Linux: glibc, musl).

    Through ``_ctypes``, the C half of :mod:`ctypes` (its ``dlopen`` and ``dlsym``, which ``ctypes.CDLL`` calls):
    importing ctypes itself builds its type classes, ~1 ms of a ``resolve --locked`` that checks its kernels'
    names and uses nothing else of it."""
    import _ctypes  # here: most names are settled without it

    handles = []
    for lib in ("libc.so.6", "libm.so.6", "libc.so"):
        try:
            handles.append(_ctypes.dlopen(lib, os.RTLD_NOW))
        except OSError:
            continue
    return tuple(handles)


@functools.cache
def _exported(name: str) -> bool:
    """Whether the running C library or libm exports a symbol ``name``."""
    import _ctypes

    for handle in _c_libraries():
        try:
            _ctypes.dlsym(handle, name)
        except OSError:
            continue
        return True
    return False


def name_problem(name: str, kind: Kind) -> str | None:
    """Why ``name`` cannot be the name of a ``kind``, or None when it can."""
    if not IDENTIFIER.fullmatch(name):
        return "is not a valid C identifier (letters, digits and '_', not starting with a digit)"
    if len(name) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters (generated file names hold it)"
    if name in _KEYWORDS:
        return "is a C, C++ or CUDA keyword"
    if "__" in name or re.match(r"_[A-Z]", name):
        return "is reserved to the compiler and library (it contains '__' or starts with '_' and a capital)"
    if kind == "kernel" and name.startswith("_"):
        return "is reserved to the compiler and library (a global name starting with '_')"
    if name.lower().startswith("r1build_") or name == "stream":
        return "is used by the code r1build generates"
    if name in _MACROS or _RESERVED_MACRO.fullmatch(name):
        return "is a macro of the C library or the CUDA headers"
    if kind == "tunable":
        if not _MACRO.fullmatch(name):
            return (
                "is not an upper-case macro name (tunables are passed as -DNAME=value, which a lower-case "
                "name would substitute into the CUDA headers)"
            )
        return None
    if name in _CUDA_BUILTINS or _VECTOR_TYPE.fullmatch(name):
        return "is a CUDA built-in variable or a type the generated code uses"
    if name.endswith("_t"):
        return "ends in '_t', which POSIX reserves for type names"
    if re.match(r"cuda[A-Z_]|cu[A-Z]|nvrtc|cublas|cufft|curand|cusparse|cusolver|cudnn|nccl", name):
        return "is a name of the CUDA runtime, driver or libraries' API"
    if name in _LIBC or name in _MATH or name in _CUDA_DEVICE:
        return "is a function or macro of the C library, libm or CUDA's device functions"
    if kind == "kernel" and _exported(name):
        return 'is a symbol the C library or libm exports; an extern "C" function of that name would clash with it'
    return None
