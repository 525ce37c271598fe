"""r1sample: four CUDA kernels built by r1build, on cupy and torch arrays (anything speaking DLPack on CUDA).

Each function takes CUDA float32 arrays, allocates its output with the input's library when ``out`` is not
given, and runs on ``stream``: by default the current stream of the input's library (cupy's
``cupy.cuda.get_current_stream()``, torch's ``torch.cuda.current_stream()``). ``stream`` may also be a cupy or
torch stream object or a raw ``cudaStream_t`` as an integer (0 is the legacy default stream).

Wrong arguments raise TypeError (not a CUDA array, not float32) or ValueError (shape, layout); a CUDA failure
raises RuntimeError. Without a GPU the module imports, and every call says what is missing.
"""

from __future__ import annotations

from typing import Any

from . import _ops

__all__ = ["cuda_available", "device_count", "gelu", "matmul_tiled", "reduce_sum", "softmax_rows"]
__version__ = "0.1.0"


def device_count() -> int:
    """Number of CUDA devices this process can use; 0 without a GPU or driver."""
    return int(_ops.device_count())


def cuda_available() -> bool:
    """Whether a CUDA device can be used."""
    return device_count() > 0


def _library(x: Any) -> str:
    root = type(x).__module__.partition(".")[0]
    return root if root in ("cupy", "torch") else ""


def _describe(x: Any) -> str:
    return f"{type(x).__module__}.{type(x).__qualname__}"


def _empty_like(fn: str, x: Any, shape: tuple[int, ...]) -> Any:
    """A float32 array of ``shape`` from ``x``'s library, on ``x``'s device."""
    library = _library(x)
    if library == "cupy":
        import cupy

        with cupy.cuda.Device(x.device.id):
            return cupy.empty(shape, dtype=cupy.float32)
    if library == "torch":
        import torch

        if x.device.type != "cuda":
            raise TypeError(f"r1sample.{fn}: expected a CUDA tensor, got one on {x.device}")
        return torch.empty(shape, dtype=torch.float32, device=x.device)
    raise TypeError(
        f"r1sample.{fn}: expected a cupy array or a torch CUDA tensor, got {_describe(x)}; with another "
        "DLPack library on CUDA, pass `out=` preallocated"
    )


def _stream(x: Any, stream: Any) -> int:
    """The stream handle to launch on: ``stream`` as given, else the current stream of ``x``'s library."""
    if stream is None:
        library = _library(x)
        if library == "cupy":
            import cupy

            with cupy.cuda.Device(x.device.id):
                return int(cupy.cuda.get_current_stream().ptr)
        if library == "torch" and x.device.type == "cuda":
            import torch

            return int(torch.cuda.current_stream(x.device).cuda_stream)
        return 0
    for attribute in ("ptr", "cuda_stream"):  # cupy.cuda.Stream, torch.cuda.Stream
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if isinstance(stream, int) and stream >= 0:
        return stream
    raise TypeError(f"stream must be a cupy or torch stream or a non-negative int handle, got {stream!r}")


def _shape(fn: str, x: Any) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None:
        raise TypeError(f"r1sample.{fn}: expected a CUDA array (cupy or torch), got {_describe(x)}")
    return tuple(int(d) for d in shape)


def gelu(x: Any, out: Any = None, *, stream: Any = None) -> Any:
    """GELU (tanh approximation) of a 1-d float32 CUDA array."""
    y = _empty_like("gelu", x, _shape("gelu", x)) if out is None else out
    _ops.gelu(x, y, _stream(x, stream))
    return y


def softmax_rows(x: Any, out: Any = None, *, stream: Any = None) -> Any:
    """Softmax over each row of a 2-d float32 CUDA array."""
    y = _empty_like("softmax_rows", x, _shape("softmax_rows", x)) if out is None else out
    _ops.softmax_rows(x, y, _stream(x, stream))
    return y


def reduce_sum(x: Any, out: Any = None, *, stream: Any = None) -> Any:
    """The sum of a 1-d float32 CUDA array, as a CUDA array of shape (1,)."""
    y = _empty_like("reduce_sum", x, (1,)) if out is None else out
    _ops.reduce_sum(x, y, _stream(x, stream))
    return y


def matmul_tiled(a: Any, b: Any, out: Any = None, *, stream: Any = None) -> Any:
    """``a @ b`` for 2-d float32 CUDA arrays a (m, k) and b (k, n)."""
    if out is None:
        sa, sb = _shape("matmul_tiled", a), _shape("matmul_tiled", b)
        if len(sa) != 2 or len(sb) != 2:
            raise ValueError(f"r1sample.matmul_tiled: a and b must be 2-d, got shapes {sa} and {sb}")
        out = _empty_like("matmul_tiled", a, (sa[0], sb[1]))
    _ops.matmul_tiled(a, b, out, _stream(a, stream))
    return out
