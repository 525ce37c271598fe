"""Emitted bindings end to end on a machine without a GPU: ``tests/packages/bound`` (``[bindings]`` in its
manifest, one CMake line) built by pip into a wheel, then its module imported from the unpacked wheel by this
Python: the checks refuse wrong devices, dtypes, shapes, layouts and alignments with the documented errors before
any launch (numpy arrays, host memory), the stubs type-check with mypy, and, where torch is installed, the
custom ops register, fake tensors propagate the manifest's shapes and ``torch.compile(fullgraph=True)`` traces
two ops without a graph break (the compiled graph is never run: no GPU).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.build.buildenv import PACKAGES, BuildEnv, copy_project
from tests.support.shared import once_per_run

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


@pytest.fixture(scope="module")
def site(build_env: BuildEnv, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of tests/packages/bound, built by pip and unpacked; once a test run, whichever worker asks first.
    Without build isolation: the build env has r1build, scikit-build-core and nanobind, which an isolated build
    installs first (some 3 s); test_build_sample.py builds the sample's bindings with isolation."""
    with once_per_run(tmp_path_factory, "bound") as (base, made):
        unpacked = base / "site"
        if not made:
            shutil.rmtree(base / "bound", ignore_errors=True)
            project = copy_project(PACKAGES / "bound", base / "bound")
            out = base / "wheels"
            out.mkdir(exist_ok=True)
            proc = build_env.pip_wheel(project, out, isolated=False)
            assert proc.returncode == 0, proc.stdout[-8000:]
            (wheel,) = out.glob("boundpkg-*.whl")
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(unpacked)
    return unpacked


def run_python(site: Path, code: str) -> str:
    """Run ``code`` with this Python (the build env's version) and the unpacked wheel first on the path."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc.stdout


def test_the_wheel_holds_module_stubs_and_extension(site: Path) -> None:
    names = {p.name for p in (site / "boundpkg").iterdir()}
    assert {"_k.py", "_k.pyi", "__init__.py", "py.typed"} <= names
    assert [n for n in names if n.startswith("_k_ext.") and n.endswith(".so")], names


CHECKS = """
import numpy as np
from boundpkg import _k

def error(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        print(type(exc).__name__, exc)
    else:
        print("no error")

f32 = np.ones((3, 5), np.float32)
bias = np.ones(5, np.float32)
print("devices", _k.device_count())
error(_k.scale_rows, f32, bias, 2.0, out=np.empty((3, 5), np.float32))           # host memory
error(_k.scale_rows, [[1.0]], bias, 2.0)                                          # no array at all
error(_k._ext.scale_rows, f32.astype(np.float64), bias, f32, 2.0)                 # dtype
error(_k._ext.scale_rows, f32, bias, np.ones((5, 3), np.float32), 2.0)           # out's shape
error(_k.scale_rows, f32, np.ones(4, np.float32), 2.0)                            # a size named twice
error(_k.scale_rows, np.ones(5, np.float32), bias, 2.0)                           # dimensions
error(_k.axpy, np.ones(4, np.float32), np.ones(4, np.float32), 0.5, out=bias)      # no out arrays
error(_k.iota, 9)                                                                 # no input to allocate like
error(_k.iota, -1, out=np.ones(3, np.int32))                                      # a negative size
error(_k.iota, 9, out=np.ones(9, np.int32), stream="default")                    # stream
error(_k.scale_rows, np.ones((5, 3), np.float32).T, np.ones(3, np.float32), 2.0)  # layout
error(_k.scale_rows, np.ones(16, np.float32)[1:].reshape(3, 5), bias, 2.0)       # alignment
"""


def test_wrong_arguments_raise_the_documented_errors(site: Path) -> None:
    lines = run_python(site, CHECKS).splitlines()
    assert lines[0].startswith("devices "), lines
    name = "boundpkg._k.scale_rows"
    on_host = "must be an array on a CUDA device (cupy, or torch on 'cuda'), got a cpu array"
    expected = [
        f"TypeError {name}: x {on_host}",
        f"TypeError {name}: x must be an array on a CUDA device (cupy, torch, DLPack), got builtins.list",
        f"TypeError {name}: x must be float32, got float64",
        f"ValueError {name}: y must have shape (3, 5) (the manifest's [rows, cols]), got (5, 3); rows = 3 from x's "
        "dimension 0; cols = 5 from x's dimension 1",
        f"ValueError {name}: bias must have shape (5,) (the manifest's [cols]), got (4,); cols = 5 from x's "
        "dimension 1",
        f"ValueError {name}: x must have 2 dimension(s), got shape (5,)",
        "TypeError boundpkg._k.axpy: the kernel has no out arrays",
        "TypeError boundpkg._k.iota: a kernel without inputs needs out= preallocated",
        "ValueError boundpkg._k.iota: n must not be negative, got -1",
        "TypeError boundpkg._k.iota: stream must be a cupy or torch stream or a non-negative int handle, got 'default'",
        f"ValueError {name}: x must be C-contiguous (row major, no gaps); make a contiguous copy first",
        f"ValueError {name}: x must be aligned to 16 bytes, its data starts 4 bytes past such an address",
    ]
    assert lines[1:] == expected


def test_stubs_type_check_with_mypy(site: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text(
        "from typing import Any\nfrom boundpkg import _k\n\n\ndef use(x: Any, b: Any) -> None:\n"
        "    y = _k.scale_rows(x, b, 2.0)\n    _k.axpy(x, y, 0.5, stream=0)\n    _k.iota(9, out=y)\n"
        "    n: int = _k.device_count()\n",
        encoding="utf-8",
    )
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from boundpkg import _k\n\n_k.scale_rows(1, 2, 'two')\n_k.iota()\n_k.axpy(1, 2, 3.0, streem=0)\n",
        encoding="utf-8",
    )
    env = {**os.environ, "MYPYPATH": str(site)}
    args = [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache")]
    ok = subprocess.run([*args, str(good)], env=env, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    wrong = subprocess.run([*args, str(bad)], env=env, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert wrong.returncode == 1, wrong.stdout
    assert 'Argument 3 to "scale_rows" has incompatible type "str"; expected "float"' in wrong.stdout
    assert 'Missing positional argument "n" in call to "iota"' in wrong.stdout
    assert 'Unexpected keyword argument "streem" for "axpy"' in wrong.stdout


TORCH = """
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from boundpkg import _k

ops = torch.ops.boundtest
print("schema", ops.axpy.default._schema)
with FakeTensorMode() as mode:
    x = torch.empty(6, 10)
    b = torch.empty(10)
    print("fake", tuple(ops.scale_rows(x, b, 2.0).shape), ops.iota(9).dtype, tuple(ops.iota(9).shape))
    try:
        ops.scale_rows(x, torch.empty(4), 2.0)
    except Exception as exc:
        print("mismatch", type(exc).__name__, str(exc).splitlines()[0])
    try:
        ops.scale_rows(x.double(), b, 2.0)
    except Exception as exc:
        print("dtype", type(exc).__name__, str(exc).splitlines()[0])

graphs = []

def capture(gm, example_inputs):
    graphs.append(gm)
    def never_run(*args):
        raise RuntimeError("not run: no GPU")
    return never_run

def f(x, b):
    y = ops.scale_rows(x, b, 2.0)
    return ops.scale_rows(y, b, 0.5).sum()

try:
    torch.compile(f, fullgraph=True, backend=capture)(torch.ones(4, 8), torch.ones(8))
except RuntimeError as exc:
    print("call", str(exc).splitlines()[0])
targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
print("graphs", len(graphs), targets)

def g(x, y):  # the mutating op: declared so, traced without a break
    ops.axpy(x, y, 0.5)
    return y * 2

graphs.clear()
try:
    torch.compile(g, fullgraph=True, backend=capture)(torch.ones(4), torch.ones(4))
except RuntimeError as exc:
    print("mutating call", str(exc).splitlines()[0])
print("mutating graphs", len(graphs), [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"])
"""


def test_torch_custom_ops_register_fake_and_trace(site: Path) -> None:
    pytest.importorskip("torch", reason="torch (the CPU build) is not installed here")
    out = run_python(site, TORCH)
    assert re.search(r"boundtest::axpy\(Tensor x, Tensor\(a\d!\) y, float a\) -> \(\)", out), out  # y mutated
    assert "fake (6, 10) torch.int32 (9,)" in out, out
    assert "mismatch" in out and "boundtest::scale_rows: bias's dimension 0 is 4, but cols = 10" in out, out
    assert "dtype TypeError boundtest::scale_rows: x must be float32, got float64" in out, out
    assert "call not run: no GPU" in out, out
    assert "graphs 1 ['boundtest.scale_rows', 'boundtest.scale_rows'" in out, out  # one graph: no break
    assert "mutating call not run: no GPU" in out, out
    assert "mutating graphs 1 ['boundtest.axpy'" in out, out


EAGER = """
import torch
from boundpkg import _k

ops = torch.ops.boundtest
x, b = torch.ones(3, 4), torch.ones(4)
try:
    ops.scale_rows(x, b, 2.0)
except NotImplementedError as exc:
    print("cpu", str(exc).splitlines()[0])
# the kernels run on CUDA only; for the CPU, the same arithmetic in torch behind the registration under test
lib = _k._LIBRARIES["boundtest"]
lib.impl("scale_rows", lambda x, bias, alpha: x * alpha + bias, "CPU")
def axpy(x, y, a):  # written as the kernel writes, past autograd's version counter
    y.data.add_(x.data, alpha=a)
lib.impl("axpy", axpy, "CPU")
y = torch.zeros(5)
before = y._version
ops.axpy(torch.ones(5), y, 0.5)
print("axpy", y.tolist(), "version +", y._version - before)
for op, args in ((ops.axpy.default, (torch.randn(5), torch.randn(5), 0.5)),
                 (ops.scale_rows.default, (torch.randn(3, 4), torch.randn(4), 2.0))):
    print("opcheck", {k: v for k, v in torch.library.opcheck(op, args).items() if v != "SUCCESS"})
try:  # as with torch.library.custom_op and no register_autograd: the backward that opcheck runs raises
    torch.library.opcheck(ops.scale_rows.default, (torch.randn(3, 4, requires_grad=True), torch.randn(4), 2.0))
except Exception as exc:
    print("opcheck grad", type(exc).__name__, str(exc).splitlines()[0])
w = torch.ones(3, 4, requires_grad=True)
z = ops.scale_rows(w, b, 2.0)
print("grad", z.requires_grad)
try:
    z.sum().backward()
except RuntimeError as exc:
    print("backward", str(exc).splitlines()[0])
with torch.no_grad():
    print("no_grad", ops.scale_rows(w, b, 2.0).requires_grad)
"""


def test_torch_ops_in_eager_keep_custom_op_semantics(site: Path) -> None:
    """Registered through ``torch.library``'s define/impl (the decorator costs ~10 us per eager call): CUDA only,
    the mutated argument's version bumped, ``opcheck`` clean, and a backward that raises (so ``opcheck`` of an input
    that requires grad fails), as ``torch.library.custom_op`` without ``register_autograd`` gives."""
    pytest.importorskip("torch", reason="torch (the CPU build) is not installed here")
    out = run_python(site, EAGER)
    assert "cpu Could not run 'boundtest::scale_rows' with arguments from the 'CPU' backend" in out, out
    assert "axpy [0.5, 0.5, 0.5, 0.5, 0.5] version + 1" in out, out
    assert out.count("opcheck {}") == 2, out
    assert "opcheck grad OpCheckError" in out and "test_aot_dispatch_dynamic failed" in out, out
    assert "grad True" in out and "no_grad False" in out, out
    assert "backward Trying to backward through boundtest::scale_rows, but r1build's kernels have no" in out, out
