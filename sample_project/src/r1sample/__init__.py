"""r1sample: four CUDA kernels built by r1build, on cupy and torch arrays (anything speaking DLPack on CUDA).

The functions are the bindings r1build writes from ``kernels.toml`` (its ``[bindings]`` table): each checks its
arguments against the manifest, allocates its output with the input's library when ``out`` is not given, and
runs on ``stream``: by default the current stream of the input's library (cupy's
``cupy.cuda.get_current_stream()``, torch's ``torch.cuda.current_stream()``). ``stream`` may also be a cupy or
torch stream object or a raw ``cudaStream_t`` as an integer (0 is the legacy default stream). Where torch is
importable, the kernels are also the custom ops ``torch.ops.r1sample.<kernel>``, which ``torch.compile`` traces.

Wrong arguments raise TypeError (not a CUDA array, not float32) or ValueError (shape, layout), naming the
function and the argument; a CUDA failure raises RuntimeError. Without a GPU the module imports, and every call
says what is missing.
"""

from __future__ import annotations

from ._kernels import device_count, gelu, matmul_tiled, reduce_sum, softmax_rows

__all__ = ["cuda_available", "device_count", "gelu", "matmul_tiled", "reduce_sum", "softmax_rows"]
__version__ = "0.1.0"


def cuda_available() -> bool:
    """Whether a CUDA device can be used."""
    return device_count() > 0
