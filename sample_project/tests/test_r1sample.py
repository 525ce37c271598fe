"""r1sample against numpy: every kernel on cupy arrays and on torch tensors, awkward sizes included."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
import r1sample

RNG = np.random.default_rng(20261130)


def to_device(xp: ModuleType, a: np.ndarray) -> Any:
    if xp.__name__ == "cupy":
        return xp.asarray(a)
    return xp.from_numpy(np.ascontiguousarray(a)).to("cuda")


def to_host(xp: ModuleType, a: Any) -> np.ndarray:
    if xp.__name__ == "cupy":
        return xp.asnumpy(a)
    xp.cuda.synchronize()
    return a.cpu().numpy()


def sync(xp: ModuleType) -> None:
    if xp.__name__ == "cupy":
        xp.cuda.get_current_stream().synchronize()
    else:
        xp.cuda.synchronize()


def gelu_ref(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    return (0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z**3)))).astype(np.float32)


def test_imports_without_a_gpu() -> None:
    assert r1sample.device_count() >= 0
    assert callable(r1sample.gelu)


def test_host_arrays_are_refused_with_a_clear_message() -> None:
    x = np.ones(8, dtype=np.float32)
    # numpy allocates the output (array API) and the check refuses host memory; numpy 1 cannot allocate it
    with pytest.raises(TypeError, match=r"r1sample\._kernels\.gelu: (x must be an array on a CUDA|cannot allocate)"):
        r1sample.gelu(x)
    with pytest.raises(TypeError, match=r"r1sample\._kernels\.gelu: x must be an array on a CUDA device .* got a cpu"):
        r1sample.gelu(x, out=np.empty_like(x))
    with pytest.raises(TypeError, match=r"r1sample\._kernels\.reduce_sum: x must be an array .* got builtins\.list"):
        r1sample.reduce_sum([1.0, 2.0])
    with pytest.raises(TypeError, match=r"r1sample\._kernels\.matmul_tiled: a must be an array .* got builtins\.int"):
        r1sample.matmul_tiled(1, 2)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 31, 1000, 65537])
def test_gelu(xp: ModuleType, n: int) -> None:
    x = RNG.standard_normal(n, dtype=np.float32) * 3
    y = r1sample.gelu(to_device(xp, x))
    np.testing.assert_allclose(to_host(xp, y), gelu_ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 33), (7, 1023), (2, 5003), (64, 128)])
def test_softmax_rows(xp: ModuleType, rows: int, cols: int) -> None:
    x = RNG.standard_normal((rows, cols), dtype=np.float32) * 4
    y = to_host(xp, r1sample.softmax_rows(to_device(xp, x)))
    z = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, z / z.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 127, 4099, 100003, 3_000_001])
def test_reduce_sum(xp: ModuleType, n: int) -> None:
    x = RNG.standard_normal(n, dtype=np.float32)
    total = to_host(xp, r1sample.reduce_sum(to_device(xp, x)))
    assert total.shape == (1,)
    np.testing.assert_allclose(total[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3 * max(1.0, n / 1e5))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n", "k"), [(1, 1, 1), (33, 17, 5), (100, 129, 67), (64, 64, 0)])
def test_matmul_tiled(xp: ModuleType, m: int, n: int, k: int) -> None:
    a = RNG.standard_normal((m, k), dtype=np.float32)
    b = RNG.standard_normal((k, n), dtype=np.float32)
    c = to_host(xp, r1sample.matmul_tiled(to_device(xp, a), to_device(xp, b)))
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_preallocated_output_and_explicit_stream(xp: ModuleType) -> None:
    x = RNG.standard_normal(4097, dtype=np.float32)
    dx = to_device(xp, x)
    out = to_device(xp, np.zeros_like(x))
    stream = xp.cuda.Stream()
    result = r1sample.gelu(dx, out, stream=stream)
    assert result is out
    stream.synchronize()
    np.testing.assert_allclose(to_host(xp, out), gelu_ref(x), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_bad_arguments_raise_clear_errors(xp: ModuleType) -> None:
    x = to_device(xp, RNG.standard_normal((4, 6), dtype=np.float32))
    with pytest.raises(ValueError, match=r"x must have 1 dimension"):
        r1sample.gelu(x)
    with pytest.raises(ValueError, match=r"must be C-contiguous"):
        r1sample.softmax_rows(x.T)
    with pytest.raises(ValueError, match=r"b must have shape \(6, 6\) .*\[k, n\].* got \(4, 6\); k = 6 from a's"):
        r1sample.matmul_tiled(x, x)  # the inner dimensions differ
    with pytest.raises(ValueError, match=r"y must have shape \(4, 6\)"):
        r1sample.softmax_rows(x, out=to_device(xp, np.zeros((6, 4), dtype=np.float32)))
    doubles = to_device(xp, np.ones(5, dtype=np.float64))
    with pytest.raises(TypeError, match=r"x must be float32, got float64"):
        r1sample.gelu(doubles, out=to_device(xp, np.ones(5, dtype=np.float32)))


@pytest.mark.gpu
def test_empty_inputs(xp: ModuleType) -> None:
    empty = to_device(xp, np.zeros(0, dtype=np.float32))
    assert to_host(xp, r1sample.gelu(empty)).shape == (0,)
    assert to_host(xp, r1sample.reduce_sum(empty))[0] == 0.0


@pytest.fixture
def torch_cuda() -> ModuleType:
    """torch with a CUDA device; skips where either is missing."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch with a CUDA device is not available here")
    return torch


@pytest.mark.gpu
def test_torch_custom_ops_pass_opcheck(torch_cuda: ModuleType) -> None:
    torch = torch_cuda
    x1 = torch.randn(1000, device="cuda")
    x2 = torch.randn(7, 33, device="cuda")
    a, b = torch.randn(33, 5, device="cuda"), torch.randn(5, 17, device="cuda")
    for op, args in [
        (torch.ops.r1sample.gelu, (x1,)),
        (torch.ops.r1sample.softmax_rows, (x2,)),
        (torch.ops.r1sample.reduce_sum, (x1,)),
        (torch.ops.r1sample.matmul_tiled, (a, b)),
    ]:
        torch.library.opcheck(op, args)


@pytest.mark.gpu
def test_torch_compile_equals_eager(torch_cuda: ModuleType) -> None:
    torch = torch_cuda

    def f(a: Any, b: Any) -> Any:
        return torch.ops.r1sample.softmax_rows(torch.ops.r1sample.matmul_tiled(a, b))

    a, b = torch.randn(64, 48, device="cuda"), torch.randn(48, 80, device="cuda")
    compiled = torch.compile(f, fullgraph=True)
    torch.testing.assert_close(compiled(a, b), f(a, b), rtol=1e-5, atol=1e-6)
