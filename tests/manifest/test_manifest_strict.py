"""The manifest refuses what the build cannot use: each broken manifest exits 2 at ``r1build check`` (and at any
command that loads it) naming file, line and key path, never with a traceback.

Every case edits one line of a small, valid manifest (``BASE``) that uses every kind of key.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from r1build.cli.main import main
from r1build.manifest import load_manifest
from r1build.manifest.identifiers import name_problem

BASE = """\
archs = ["sm_90"]
target = "tiny::kernels"
nvcc-flags = ["-O3", "-std=c++17"]

[generation]
provider = "openai"
base-url = "http://127.0.0.1:8000/v1"
api-key-env = "MY_KEY"
temperatures = [0.6]
top-p = 0.95

[generation.prices]
input-per-mtok = 0.5

[[kernel]]
name = "scale"
description = "y[i] = alpha * x[i] for i in [0, n)."
args = [
  { name = "x", dtype = "float32", shape = ["n"], role = "in" },
  { name = "y", dtype = "float32", shape = ["n"], role = "out" },
  { name = "alpha", dtype = "float32", value = 2.0 },
  { name = "k", dtype = "int8", value = 3 },
  { name = "flag", dtype = "bool", value = true },
  { name = "n", dtype = "int32" },
]
reference = "reference:scale"
test-shapes = [{ n = 1 }, { n = 97 }]
bench-shapes = [{ n = 1048576 }]
tolerance = { rtol = 1e-5, atol = 1e-6 }
baseline = "scale.cu"
tunables = { BLOCK = [128, 256], VEC = ["1", "0x2"] }
limits = { registers = 64, spill-bytes = 0, shared-bytes = 0 }
budget = { rounds = 2, samples = 2, target-share = 0.9, wall-time-s = 60.0 }
"""

REFERENCE = """\
import numpy as np


def scale(x, alpha, k, flag, n):
    return (alpha * x).astype(np.float32)
"""

BASELINE = """\
#include <cuda_runtime.h>
#include <cstdint>

#ifndef BLOCK
#define BLOCK 256
#endif

namespace {
__global__ void scale_kernel(const float* x, float* y, float alpha, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = alpha * x[i];
}
}  // namespace

extern "C" cudaError_t scale(const float* x, float* y, float alpha, int8_t k, bool flag, int32_t n,
                             cudaStream_t stream) {
    if (n <= 0) return cudaSuccess;
    scale_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, stream>>>(x, y, alpha, n);
    return cudaGetLastError();
}
"""


def write_project(root: Path, manifest: str = BASE) -> Path:
    """A project with ``manifest`` as its kernels.toml, the reference and the baseline."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "kernels.toml").write_text(manifest, encoding="utf-8")
    (root / "reference.py").write_text(REFERENCE, encoding="utf-8")
    (root / "scale.cu").write_text(BASELINE, encoding="utf-8")
    return root / "kernels.toml"


def run_check(capsys: pytest.CaptureFixture[str], path: Path, command: str = "check") -> tuple[int, str]:
    argv = [command, "-m", str(path)]
    if command == "status":
        argv += ["--cache-dir", str(path.parent / "cache")]
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


_T = 'target = "tiny::kernels"'

# (id, old text of BASE, new text, key path in the message, a fragment of the message)
CASES: list[tuple[str, str, str, str, str]] = [
    # names: C/C++/CUDA keywords, reserved names, built-ins, runtime and libc symbols
    ("kernel-nullptr", 'name = "scale"', 'name = "nullptr"', "kernel[0].name", "keyword"),
    ("kernel-constexpr", 'name = "scale"', 'name = "constexpr"', "kernel[0].name", "keyword"),
    ("kernel-__global__", 'name = "scale"', 'name = "__global__"', "kernel[0].name", "keyword"),
    ("kernel-dunder", 'name = "scale"', 'name = "my__kernel"', "kernel[0].name", "reserved"),
    ("kernel-underscore", 'name = "scale"', 'name = "_scale"', "kernel[0].name", "reserved"),
    ("kernel-cudaMalloc", 'name = "scale"', 'name = "cudaMalloc"', "kernel[0].name", "CUDA runtime"),
    ("kernel-cuLaunch", 'name = "scale"', 'name = "cuLaunchKernel"', "kernel[0].name", "CUDA runtime"),
    ("kernel-memcpy", 'name = "scale"', 'name = "memcpy"', "kernel[0].name", "C library"),
    ("kernel-printf", 'name = "scale"', 'name = "printf"', "kernel[0].name", "C library"),
    ("kernel-exit", 'name = "scale"', 'name = "exit"', "kernel[0].name", "C library"),
    ("kernel-expf", 'name = "scale"', 'name = "expf"', "kernel[0].name", "libm"),
    ("kernel-libc-export", 'name = "scale"', 'name = "select"', "kernel[0].name", "exports"),
    ("kernel-warpSize", 'name = "scale"', 'name = "warpSize"', "kernel[0].name", "built-in"),
    ("kernel-main", 'name = "scale"', 'name = "main"', "kernel[0].name", "C library"),
    ("kernel-generated", 'name = "scale"', 'name = "r1build_capability"', "kernel[0].name", "generates"),
    ("kernel-type", 'name = "scale"', 'name = "size_t"', "kernel[0].name", "built-in"),
    ("kernel-posix-type", 'name = "scale"', 'name = "scale_t"', "kernel[0].name", "'_t'"),
    ("kernel-not-ident", 'name = "scale"', 'name = "scale(void); int x"', "kernel[0].name", "not a valid C"),
    ("arg-nullptr", '{ name = "x", dtype', '{ name = "nullptr", dtype', "kernel[0].args[0].name", "keyword"),
    ("arg-threadIdx", '{ name = "x", dtype', '{ name = "threadIdx", dtype', "kernel[0].args[0].name", "built-in"),
    ("arg-blockIdx", '{ name = "x", dtype', '{ name = "blockIdx", dtype', "kernel[0].args[0].name", "built-in"),
    ("arg-reserved", '{ name = "x", dtype', '{ name = "_X", dtype', "kernel[0].args[0].name", "reserved"),
    ("arg-memcpy", '{ name = "x", dtype', '{ name = "memcpy", dtype', "kernel[0].args[0].name", "C library"),
    ("arg-printf", '{ name = "x", dtype', '{ name = "printf", dtype', "kernel[0].args[0].name", "C library"),
    ("arg-int64_t", '{ name = "x", dtype', '{ name = "int64_t", dtype', "kernel[0].args[0].name", "type"),
    ("arg-float4", '{ name = "x", dtype', '{ name = "float4", dtype', "kernel[0].args[0].name", "type"),
    (
        "arg-cudaStream",
        '{ name = "x", dtype',
        '{ name = "cudaStreamCreate", dtype',
        "kernel[0].args[0].name",
        "CUDA runtime",
    ),
    ("arg-min", '{ name = "x", dtype', '{ name = "min", dtype', "kernel[0].args[0].name", "device functions"),
    ("arg-kernel-name", '{ name = "x", dtype', '{ name = "scale", dtype', "kernel[0].args[0].name", "kernel's name"),
    ("arg-stream", '{ name = "x", dtype', '{ name = "stream", dtype', "kernel[0].args[0].name", "implied"),
    ("arg-keyword-alt", '{ name = "x", dtype', '{ name = "and", dtype', "kernel[0].args[0].name", "keyword"),
    # values out of range for their dtype
    (
        "int8-300",
        'dtype = "int8", value = 3 }',
        'dtype = "int8", value = 300 }',
        "kernel[0].args[3].value",
        "out of range for int8",
    ),
    (
        "int8-float",
        'dtype = "int8", value = 3 }',
        'dtype = "int8", value = 2.5 }',
        "kernel[0].args[3].value",
        "must be integers",
    ),
    (
        "uint-negative",
        'dtype = "int8", value = 3 }',
        'dtype = "uint16", value = -1 }',
        "kernel[0].args[3].value",
        "out of range for uint16",
    ),
    (
        "int-bool",
        'dtype = "int8", value = 3 }',
        'dtype = "int8", value = true }',
        "kernel[0].args[3].value",
        "must be numbers",
    ),
    (
        "bool-number",
        'dtype = "bool", value = true }',
        'dtype = "bool", value = 1 }',
        "kernel[0].args[4].value",
        "true or false",
    ),
    (
        "float16-overflow",
        'dtype = "float32", value = 2.0 }',
        'dtype = "float16", value = 1e6 }',
        "kernel[0].args[2].value",
        "out of range for float16",
    ),
    (
        "float-nan",
        'dtype = "float32", value = 2.0 }',
        'dtype = "float32", value = nan }',
        "kernel[0].args[2].value",
        "finite",
    ),
    (
        "float-inf",
        'dtype = "float32", value = 2.0 }',
        'dtype = "float32", value = -inf }',
        "kernel[0].args[2].value",
        "finite",
    ),
    ("size-too-big", "{ n = 97 }", "{ n = 3000000000 }", "kernel[0].test-shapes[1].n", "does not fit its dtype int32"),
    ("bench-size-too-big", "{ n = 1048576 }", "{ n = 2147483648 }", "kernel[0].bench-shapes[0].n", "int32"),
    (
        "shape-empty",
        'shape = ["n"], role = "out"',
        'shape = [], role = "out"',
        "kernel[0].args[1].shape",
        "at least one dimension",
    ),
    # tolerances, limits, budget, generation numbers
    ("rtol-nan", "rtol = 1e-5", "rtol = nan", "kernel[0].tolerance.rtol", "finite"),
    ("atol-inf", "atol = 1e-6", "atol = inf", "kernel[0].tolerance.atol", "finite"),
    ("rtol-negative", "rtol = 1e-5", "rtol = -1e-5", "kernel[0].tolerance.rtol", "at least 0"),
    ("rtol-one", "rtol = 1e-5", "rtol = 1.0", "kernel[0].tolerance.rtol", "below 1"),
    ("target-share-high", "target-share = 0.9", "target-share = 1.6", "kernel[0].budget.target-share", "at most 1.5"),
    ("target-share-zero", "target-share = 0.9", "target-share = 0.0", "kernel[0].budget.target-share", "above 0"),
    ("target-share-nan", "target-share = 0.9", "target-share = nan", "kernel[0].budget.target-share", "finite"),
    ("wall-time-inf", "wall-time-s = 60.0", "wall-time-s = inf", "kernel[0].budget.wall-time-s", "finite"),
    ("rounds-zero", "rounds = 2", "rounds = 0", "kernel[0].budget.rounds", "at least 1"),
    ("registers-zero", "registers = 64", "registers = 0", "kernel[0].limits.registers", "at least 1"),
    ("registers-negative", "registers = 64", "registers = -8", "kernel[0].limits.registers", "at least 1"),
    ("registers-over", "registers = 64", "registers = 256", "kernel[0].limits.registers", "at most 255"),
    ("spill-negative", "spill-bytes = 0", "spill-bytes = -1", "kernel[0].limits.spill-bytes", "at least 0"),
    ("shared-negative", "shared-bytes = 0", "shared-bytes = -4", "kernel[0].limits.shared-bytes", "at least 0"),
    ("top-p-high", "top-p = 0.95", "top-p = 2.0", "generation.top-p", "at most 1"),
    ("temperature-nan", "temperatures = [0.6]", "temperatures = [0.6, nan]", "generation.temperatures[1]", "finite"),
    ("temperature-high", "temperatures = [0.6]", "temperatures = [0.6, 3.0]", "generation.temperatures[1]", "0..2"),
    (
        "price-negative",
        "input-per-mtok = 0.5",
        "input-per-mtok = -0.5",
        "generation.prices.input-per-mtok",
        "at least 0",
    ),
    # the endpoint, the key's variable, the CMake target
    (
        "url-no-scheme",
        'base-url = "http://127.0.0.1:8000/v1"',
        'base-url = "127.0.0.1:8000/v1"',
        "generation.base-url",
        "not an http:// or https:// URL",
    ),
    (
        "url-file",
        'base-url = "http://127.0.0.1:8000/v1"',
        'base-url = "file:///etc/passwd"',
        "generation.base-url",
        "http",
    ),
    ("url-words", 'base-url = "http://127.0.0.1:8000/v1"', 'base-url = "not a url"', "generation.base-url", "URL"),
    (
        "url-bad-port",
        'base-url = "http://127.0.0.1:8000/v1"',
        'base-url = "http://host:99999/v1"',
        "generation.base-url",
        "Port",
    ),
    (
        "url-credentials",
        'base-url = "http://127.0.0.1:8000/v1"',
        'base-url = "https://me:secret@host/v1"',
        "generation.base-url",
        "no credentials",
    ),
    ("control-character", "top-p = 0.95", 'model = "r1\\u0001"\ntop-p = 0.95', "generation.model", "control character"),
    ("kernel-name-long", 'name = "scale"', 'name = "' + "k" * 101 + '"', "kernel[0].name", "longer than 100"),
    (
        "api-key-env",
        'api-key-env = "MY_KEY"',
        'api-key-env = "MY KEY"',
        "generation.api-key-env",
        "environment variable",
    ),
    ("target-cmake", 'target = "tiny::kernels"', 'target = "tiny) message(WARNING x"', "target", "CMake target"),
    # nvcc flags that select archs, outputs or the compiler, or are not one flag
    ("flag-arch", '"-O3", "-std=c++17"', '"-O3", "-arch=sm_80"', "nvcc-flags[1]", "archs"),
    ("flag-arch-separate", '"-O3", "-std=c++17"', '"-arch", "sm_80"', "nvcc-flags[0]", "archs"),
    ("flag-gencode", '"-O3", "-std=c++17"', '"-gencode=arch=compute_80,code=sm_80"', "nvcc-flags[0]", "archs"),
    ("flag-gpu-architecture", '"-O3", "-std=c++17"', '"--gpu-architecture=sm_90"', "nvcc-flags[0]", "archs"),
    ("flag-code", '"-O3", "-std=c++17"', '"-O3", "-code=sm_90"', "nvcc-flags[1]", "archs"),
    ("flag-output", '"-O3", "-std=c++17"', '"-O3", "-o=/tmp/x.o"', "nvcc-flags[1]", "output"),
    ("flag-ccbin", '"-O3", "-std=c++17"', '"-ccbin=/usr/bin/clang"', "nvcc-flags[0]", "host compiler"),
    ("flag-options-file", '"-O3", "-std=c++17"', '"--options-file=flags.txt"', "nvcc-flags[0]", "from a file"),
    ("flag-two-in-one", '"-O3", "-std=c++17"', '"-O3 -arch=sm_50"', "nvcc-flags[0]", "whitespace"),
    ("flag-not-flag", '"-O3", "-std=c++17"', '"-O3", "evil.cu"', "nvcc-flags[1]", "not a flag"),
    ("flag-cmake", '"-O3", "-std=c++17"', '"-O3;-DX"', "nvcc-flags[0]", "characters"),
    ("flag-defines-tunable", '"-O3", "-std=c++17"', '"-O3", "-DBLOCK=64"', "nvcc-flags[1]", "a tunable of kernel[0]"),
    ("flag-defines-arg", '"-O3", "-std=c++17"', '"-O3", "-Dalpha=beta"', "nvcc-flags[1]", "an argument of kernel[0]"),
    ("flag-undefines-kernel", '"-O3", "-std=c++17"', '"-O3", "-Uscale"', "nvcc-flags[1]", "the name of kernel[0]"),
    ("flag-dependency-file", '"-O3", "-std=c++17"', '"-O3", "-MD"', "nvcc-flags[1]", "output"),
    ("flag-lto", '"-O3", "-std=c++17"', '"-O3", "-dlto"', "nvcc-flags[1]", "produces"),
    # tunables: values are one token, names are macros that clash with nothing
    ("tunable-flag", "BLOCK = [128, 256]", 'BLOCK = ["128 -DEVIL=1"]', "kernel[0].tunables.BLOCK[0]", "one token"),
    ("tunable-newline", "BLOCK = [128, 256]", 'BLOCK = ["64\\n#error"]', "kernel[0].tunables.BLOCK[0]", "one token"),
    (
        "tunable-code",
        "BLOCK = [128, 256]",
        'BLOCK = [128, "(1); system(0)"]',
        "kernel[0].tunables.BLOCK[1]",
        "one token",
    ),
    ("tunable-empty-string", "BLOCK = [128, 256]", 'BLOCK = [""]', "kernel[0].tunables.BLOCK[0]", "one token"),
    ("tunable-huge", "BLOCK = [128, 256]", "BLOCK = [128, 2" + "0" * 22 + "]", "kernel[0].tunables.BLOCK[1]", "64 bit"),
    ("tunable-duplicate", "BLOCK = [128, 256]", 'BLOCK = [128, "128"]', "kernel[0].tunables.BLOCK[1]", "duplicate"),
    ("tunable-none", "BLOCK = [128, 256]", "BLOCK = []", "kernel[0].tunables.BLOCK", "at least one value"),
    ("tunable-lowercase", "BLOCK = [128, 256]", "block = [128, 256]", "kernel[0].tunables.block", "upper-case"),
    ("tunable-arg-name", "BLOCK = [128, 256]", "x = [128, 256]", "kernel[0].tunables.x", "upper-case"),
    ("tunable-std-macro", "BLOCK = [128, 256]", "INT_MAX = [128, 256]", "kernel[0].tunables.INT_MAX", "macro"),
    ("tunable-cuda-macro", "BLOCK = [128, 256]", "CUDART_VERSION = [1]", "kernel[0].tunables.CUDART_VERSION", "macro"),
    ("tunable-reserved", "BLOCK = [128, 256]", "__CUDA_ARCH__ = [1]", "kernel[0].tunables.__CUDA_ARCH__", "reserved"),
    ("tunable-ndebug", "BLOCK = [128, 256]", "NDEBUG = [1]", "kernel[0].tunables.NDEBUG", "macro"),
    (
        "tunable-generated",
        "BLOCK = [128, 256]",
        "R1BUILD_KERNELS_H_ = [1]",
        "kernel[0].tunables.R1BUILD_KERNELS_H_",
        "generates",
    ),
    (
        "tunable-explosion",
        'VEC = ["1", "0x2"]',
        ", ".join(f"{t} = [{', '.join(map(str, range(1, 21)))}]" for t in ("VEC", "TM", "TN")),
        "kernel[0].tunables.TN",
        "value sets",
    ),
    ("arg-macro", '{ name = "x", dtype', '{ name = "NULL", dtype', "kernel[0].args[0].name", "macro"),
    ("arg-limit-macro", '{ name = "x", dtype', '{ name = "INT_MAX", dtype', "kernel[0].args[0].name", "macro"),
    ("kernel-header-guard", 'name = "scale"', 'name = "R1BUILD_KERNELS_H_"', "kernel[0].name", "generates"),
    # [bindings]: a dotted module inside a package, an identifier as the torch namespace, Python-safe names
    ("bindings-unknown", _T, 'bindings = { pyton = "tiny._k" }', "bindings.pyton", "did you mean 'python'"),
    ("bindings-no-package", _T, 'bindings = { python = "kernels" }', "bindings.python", "names no package"),
    ("bindings-not-dotted", _T, 'bindings = { python = "my-pkg.k" }', "bindings.python", "not a Python identifier"),
    ("bindings-keyword", _T, 'bindings = { python = "pkg.class" }', "bindings.python", "Python keyword"),
    ("bindings-torch-alone", _T, 'bindings = { torch-namespace = "tiny" }', "bindings.torch-namespace", "needs"),
    (
        "bindings-torch-dotted",
        _T,
        'bindings = { python = "tiny._k", torch-namespace = "a.b" }',
        "bindings.torch-namespace",
        "not a Python identifier",
    ),
    (
        "bindings-torch-aten",
        _T,
        'bindings = { python = "t.k", torch-namespace = "aten" }',
        "bindings.torch-namespace",
        "reserved",
    ),
    # flops, alignment, test-shape sizes, the reference's spelling
    ("flops-div-zero", "budget = {", 'flops = "n / (n - n)"\nbudget = {', "kernel[0].flops", "division by zero"),
    ("flops-negative", "budget = {", 'flops = "n - 2 * n"\nbudget = {', "kernel[0].flops", "not negative"),
    ("flops-overflow", "budget = {", 'flops = "n ** n ** n"\nbudget = {', "kernel[0].flops", "cannot be evaluated"),
    ("flops-call", "budget = {", 'flops = "len(n)"\nbudget = {', "kernel[0].flops", "only sizes"),
    ("alignment-not-pow2", "budget = {", "alignment = 24\nbudget = {", "kernel[0].alignment", "power of two"),
    ("alignment-too-big", "budget = {", "alignment = 4096\nbudget = {", "kernel[0].alignment", "at most 256"),
    ("test-shape-too-big", "{ n = 97 }", "{ n = 1000000000 }", "kernel[0].test-shapes[1]", "GiB"),
    (
        "reference-path",
        'reference = "reference:scale"',
        'reference = "../reference:scale"',
        "kernel[0].reference",
        "module:function",
    ),
    (
        "reference-code",
        'reference = "reference:scale"',
        'reference = "reference:scale(1)"',
        "kernel[0].reference",
        "module:function",
    ),
    # found by a fuzzer: each was a traceback
    (
        "flops-complex",
        'baseline = "scale.cu"',
        'flops = "(1-n)**0.5"\nbaseline = "scale.cu"',
        "kernel[0].flops",
        "a negative number to a fractional power has no real value",
    ),
    (
        "dimensions-33",
        '{ name = "x", dtype = "float32", shape = ["n"], role = "in" }',
        '{ name = "x", dtype = "float32", shape = [' + "1, " * 32 + '"n"], role = "in" }',
        "kernel[0].args[0].shape",
        "33 dimensions; an array has at most 32",
    ),
    (
        "int-of-3000-digits",
        "registers = 64,",
        "registers = " + "1" * 3000 + ",",
        "kernel[0].limits.registers",
        "an integer of about 3000 digits",
    ),
    (
        "path-too-long",
        'baseline = "scale.cu"',
        'baseline = "' + "k" * 5000 + '.cu"',
        "kernel[0].baseline",
        "cannot be looked up: File name too long",
    ),
    # a hand-written source's path is one the lock can name as its origin: `r1build lock` wrote origins such as
    # '/abs/scale.cu' or 'my scale.cu' that every later command then refused as not a relative path
    *[
        (f"source-path-{i}", 'baseline = "scale.cu"', f"baseline = {path!r}", "kernel[0].baseline", "relative path")
        for i, path in enumerate(["/tmp/scale.cu", "../p/scale.cu", "sub/../scale.cu", "my scale.cu", "sc\u00e9le.cu"])
    ],
    (
        "source-path-empty-part",
        'baseline = "scale.cu"',
        'candidates = [".//scale.cu"]\nbaseline = "scale.cu"',
        "kernel[0].candidates",
        "relative path",
    ),
]


@pytest.mark.parametrize(("old", "new", "key", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_exits_2_naming_file_line_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, key: str, fragment: str
) -> None:
    assert BASE.count(old) == 1, old
    text = BASE.replace(old, new)
    path = write_project(tmp_path / "p", text)
    code, output = run_check(capsys, path)
    assert code == 2, output
    assert "Traceback" not in output
    line = next(ln for ln in output.splitlines() if ln.startswith("error:"))
    assert f"{path}:" in line and f": {key}: " in line, line
    assert fragment in line, line
    lineno = int(line.split(f"{path}:", 1)[1].split(":", 1)[0])
    assert new[:12] in text.splitlines()[lineno - 1], (lineno, text.splitlines()[lineno - 1])


def test_kernel_names_differing_only_in_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    second = BASE[BASE.index("[[kernel]]") :].replace('name = "scale"', 'name = "Scale"')
    path = write_project(tmp_path / "p", BASE + "\n" + second)
    code, output = run_check(capsys, path)
    assert code == 2, output
    assert "kernel[1].name: kernel name 'Scale' differs only in case from kernel[0]'s 'scale'" in output


def test_the_base_manifest_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, output = run_check(capsys, write_project(tmp_path / "p"))
    assert code == 0, output


@pytest.mark.parametrize("command", ["status", "lock"])
def test_other_commands_refuse_the_same_manifest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = write_project(tmp_path / "p", BASE.replace("BLOCK = [128, 256]", 'BLOCK = ["64\\n#error"]'))
    if command == "lock":
        code = main(["lock", "-m", str(path), "--offline", "--no-gpu", "--cache-dir", str(tmp_path / "cache")])
        captured = capsys.readouterr()
        output = captured.out + captured.err
    else:
        code, output = run_check(capsys, path, command)
    assert code == 2, output
    assert "kernel[0].tunables.BLOCK[0]" in output and "Traceback" not in output
    assert not (path.parent / "kernels.lock").exists()


def test_a_subprocess_check_exits_2_without_a_traceback(tmp_path: Path) -> None:
    path = write_project(tmp_path / "p", BASE.replace("rtol = 1e-5", "rtol = nan"))
    proc = subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", "check", "-m", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "kernel[0].tolerance.rtol: must be a finite number, got nan" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_values_are_exact_and_take_their_dtype(tmp_path: Path) -> None:
    text = BASE.replace('dtype = "int8", value = 3 }', 'dtype = "int64", value = 9223372036854775807 }').replace(
        'dtype = "float32", value = 2.0 }', 'dtype = "float32", value = 2 }'
    )
    spec = load_manifest(write_project(tmp_path / "p", text)).kernels[0]
    values = {a.name: a.value for a in spec.args}
    assert values["k"] == 2**63 - 1 and isinstance(values["k"], int)
    assert values["alpha"] == 2.0 and isinstance(values["alpha"], float)
    assert values["flag"] is True
    text = BASE.replace('dtype = "int8", value = 3 }', 'dtype = "uint64", value = 3.0 }')
    spec = load_manifest(write_project(tmp_path / "q", text)).kernels[0]
    assert [a.value for a in spec.args if a.name == "k"] == [3]
    assert isinstance(spec.args[3].value, int)


def test_integer_valued_floats_and_literals_stay_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (
        BASE.replace('dtype = "int8", value = 3 }', 'dtype = "int8", value = -128 }')
        .replace('VEC = ["1", "0x2"]', 'VEC = ["1u", "0x2", "1.5f", "float", "-1"]')
        .replace('"-O3", "-std=c++17"', '"-O3", "-std=c++17", "--use_fast_math", "-Xptxas=-O3", "-lineinfo"')
    )
    code, output = run_check(capsys, write_project(tmp_path / "p", text))
    assert code == 0, output


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("x", "argument"),
        ("n", "argument"),
        ("gamma", "argument"),
        ("index", "argument"),
        ("_tmp", "argument"),
        ("softmax_rows", "kernel"),
        ("silu_mul", "kernel"),
        ("TILE_M", "tunable"),
        ("ELEMS", "tunable"),
    ],
)
def test_ordinary_names_pass(name: str, kind: str) -> None:
    assert name_problem(name, kind) is None  # type: ignore[arg-type]


def test_bound_kernels_take_python_safe_argument_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE.replace(_T, 'bindings = { python = "tiny._k" }').replace('name = "k", dtype', 'name = "lambda", dtype')
    code, output = run_check(capsys, write_project(tmp_path / "p", text))
    assert code == 2 and "kernel[0].args[3].name: 'lambda' is a Python keyword" in output, output
    code, output = run_check(capsys, write_project(tmp_path / "q", BASE.replace(_T, 'bindings = { python = "t._k" }')))
    assert code == 0, output


def test_every_reserved_nvcc_flag_name_is_refused_as_is_and_with_a_value() -> None:
    """The reserved flag names are kept as sets (no regex compiled on a first run): each is refused alone and
    as ``name=value``; a name that only begins like one is not."""
    import re

    from r1build.manifest.flags import _RESERVED_PATTERNS, flag_problem

    for pattern, why in _RESERVED_PATTERNS:
        for name in pattern.split("|"):
            assert re.fullmatch(r"-[-A-Za-z]+", name), name  # a literal name, as a set member must be
            assert flag_problem(name) == f"{name} {why}"
            assert flag_problem(f"{name}=x") == f"{name} {why}"
    assert flag_problem("-ccbinx") is None and flag_problem("-O3") is None


def test_the_default_archs_are_checked_where_every_kernel_names_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = BASE.replace('archs = ["sm_90"]', 'archs = ["sm_999"]', 1).replace(
        'name = "scale"\n', 'name = "scale"\narchs = ["sm_90"]\n', 1
    )
    path = write_project(tmp_path / "p", text)
    code, output = run_check(capsys, path)
    assert code == 2 and f"{path}:1: archs[0]: sm_999 is not supported by the installed CUDA" in output, output


TORCH_REFERENCES = """
import torch


def scale_right(x, alpha, k, flag, n):
    return alpha * x


def scale_wrong(x, alpha, k, flag, n):
    return alpha * x + 1


def scale_cuda_only(x, alpha, k, flag, n):
    raise RuntimeError("needs a CUDA device")
"""


@pytest.mark.parametrize(
    ("function", "code", "said"),
    [
        ("scale_right", 0, ""),
        ("scale_wrong", 2, "kernel[0].torch-reference: the torch-reference torch_ref:scale_wrong disagrees with"),
        ("scale_cuda_only", 0, "warning: scale: the torch-reference torch_ref:scale_cuda_only failed on CPU tensors"),
    ],
)
def test_check_runs_the_torch_reference_against_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], function: str, code: int, said: str
) -> None:
    """`r1build check` runs a kernel's ``torch-reference`` on CPU tensors where torch is installed, as the manifest
    reference says (it never ran: a fuzzer's torch-reference that raised passed)."""
    pytest.importorskip("torch", reason="torch (the CPU build) is not installed here")
    text = BASE.replace(
        'reference = "reference:scale"', f'reference = "reference:scale"\ntorch-reference = "torch_ref:{function}"'
    )
    path = write_project(tmp_path / "p", text)
    (path.parent / "torch_ref.py").write_text(TORCH_REFERENCES, encoding="utf-8")
    got, output = run_check(capsys, path)
    assert got == code, output
    assert said in " ".join(output.split()), output


def test_a_bench_shape_larger_than_any_gpu_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = BASE.replace('{ name = "n", dtype = "int32" }', '{ name = "n", dtype = "int64" }', 1).replace(
        "bench-shapes = [{ n = 1048576 }]", "bench-shapes = [{ n = 1000000000000000000 }]", 1
    )
    path = write_project(tmp_path / "p", text)
    code, output = run_check(capsys, path)
    assert code == 2 and "kernel[0].bench-shapes[0]: the arrays take" in output, output
    assert "more than the 256 GiB a bench shape may use: more than any GPU holds" in output, output
