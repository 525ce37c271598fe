"""The gate proves each candidate defines the declared signature exactly, with the real nvcc: the candidate is
compiled beside the ``extern "C"`` declaration the public header uses, so another parameter type, a missing
``const``, another return type or a missing stream is a compile error, and a source that defines no entry
point (empty, another symbol, C++ linkage) is rejected. Whole projects: ``tests/packages/bad_signature`` fails
``r1build lock`` at the gate (exit 1, the table of why, nothing locked); ``tests/packages/bad_reference`` fails
``r1build check``."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.errors import ToolchainError
from r1build.gate import StaticGate, gate_key
from r1build.manifest import Manifest, load_manifest
from r1build.manifest.cdecl import declaration, signature
from r1build.records import Candidate, Origin
from r1build.toolchain.nvcc import toolchain

PACKAGES = Path(__file__).resolve().parents[1] / "packages"

try:
    toolchain()
    HAVE_NVCC = True
except ToolchainError:  # pragma: no cover - every development and CI machine has nvcc
    HAVE_NVCC = False

MANIFEST = """\
archs = ["sm_90"]

[[kernel]]
name = "sig"
description = "y[i] = x[i] > alpha for i in [0, n), as 0 or 1."
args = [
  { name = "x", dtype = "float16", shape = ["n"], role = "in" },
  { name = "y", dtype = "uint8", shape = ["n"], role = "out" },
  { name = "alpha", dtype = "float32", value = 0.5 },
  { name = "flag", dtype = "bool", value = true },
  { name = "n", dtype = "int64" },
]
reference = "reference:sig"
test-shapes = [{ n = 3 }]
bench-shapes = [{ n = 1024 }]
"""

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

REFERENCE = """\
import numpy as np


def sig(x, alpha, flag, n):
    return (x.astype(np.float32) > alpha).astype(np.uint8)
"""

HEAD = "#include <cuda_runtime.h>\n#include <cuda_fp16.h>\n#include <cstdint>\n\n"
BODY = "{ (void)stream; return cudaSuccess; }\n"
EXACT = (
    'extern "C" cudaError_t sig(const __half* x, uint8_t* y, float alpha, bool flag, int64_t n, cudaStream_t stream)'
)

# (id, source after HEAD, expected status, fragment of the detail)
CASES = [
    ("exact", EXACT + " " + BODY, "passed", ""),
    (
        "same-types-other-spelling",
        'extern "C" cudaError_t sig(const __half* in, unsigned char* out, const float a, bool f, const int64_t count, '
        "cudaStream_t stream) " + BODY,
        "passed",
        "",
    ),
    (
        "restrict-qualified",
        EXACT.replace("__half* x", "__half* __restrict__ x").replace("uint8_t* y", "uint8_t* __restrict__ y")
        + " "
        + BODY,
        "passed",
        "",
    ),
    (
        "definition-without-extern-c-after-the-declaration",
        "cudaError_t sig(const __half* x, uint8_t* y, float alpha, bool flag, int64_t n, cudaStream_t stream) " + BODY,
        "passed",
        "",
    ),
    (
        "int32-size",
        EXACT.replace("int64_t n", "int32_t n") + " " + BODY,
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "long-long-size",
        EXACT.replace("int64_t n", "long long n") + " " + BODY,
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "missing-const",
        EXACT.replace("const __half* x", "__half* x") + " " + BODY,
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "float-for-half",
        EXACT.replace("const __half* x", "const float* x") + " " + BODY,
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "double-scalar",
        EXACT.replace("float alpha", "double alpha") + " " + BODY,
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "int-return",
        EXACT.replace("cudaError_t sig", "int sig") + " { (void)stream; return 0; }\n",
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "no-stream",
        EXACT.replace(", cudaStream_t stream", "") + " { return cudaSuccess; }\n",
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "extra-parameter",
        EXACT.replace("int64_t n,", "int64_t n, int extra,") + " " + BODY,
        "compile_error",
        "does not match the declared signature",
    ),
    (
        "static-definition",
        EXACT.replace('extern "C" ', "static ") + " " + BODY,
        "compile_error",
        "does not match the declared signature",
    ),
    ("empty", "", "rejected", "does not define the entry point"),
    ("declaration-only", EXACT + ";\n", "rejected", "does not define the entry point"),
    ("another-symbol", EXACT.replace(" sig(", " sig2(") + " " + BODY, "rejected", "does not define the entry point"),
    (
        "cxx-linkage-overload",
        "cudaError_t sig(const __half* x, uint8_t* y, float alpha, bool flag, int n, cudaStream_t stream) " + BODY,
        "rejected",
        "does not define the entry point",
    ),
]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    root = tmp_path_factory.mktemp("sig")
    (root / "kernels.toml").write_text(MANIFEST, encoding="utf-8")
    (root / "reference.py").write_text(REFERENCE, encoding="utf-8")
    return load_manifest(root / "kernels.toml")


@pytest.mark.heavy  # a compile per signature mismatch: 17 s
@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not found")
def test_each_candidate_must_define_the_declared_signature(manifest: Manifest, tmp_path: Path) -> None:
    spec = manifest.kernels[0]
    assert signature(spec) == EXACT.removeprefix('extern "C" ')
    candidates = [Candidate(HEAD + source, Origin("file", f"{name}.cu"), {}) for name, source, _, _ in CASES]
    with Cache(tmp_path / "cache") as cache:
        results = StaticGate(cache).judge(manifest, spec, [("sm_90", c) for c in candidates])
    for (name, _, status, fragment), result in zip(CASES, results, strict=True):
        assert result.status == status, (name, result.detail)
        assert result.stage == "gate"
        assert fragment in result.detail, (name, result.detail)
        if fragment == "does not match the declared signature":
            assert result.detail.startswith(f'the definition of sig {fragment} extern "C" {EXACT[11:]}'), name


def test_the_declaration_is_part_of_the_gate_key(manifest: Manifest) -> None:
    spec = manifest.kernels[0]
    candidate = Candidate(HEAD + EXACT + " " + BODY, Origin("file", "sig.cu"), {})
    tc = toolchain() if HAVE_NVCC else None
    if tc is None:
        pytest.skip("nvcc not found")
    args = [dataclasses.replace(a, dtype="int32") if a.name == "n" else a for a in spec.args]
    changed = dataclasses.replace(spec, args=args)
    assert "int32_t n" in declaration(changed) and "int64_t n" in declaration(spec)
    assert gate_key(manifest, spec, "sm_90", candidate, tc) != gate_key(manifest, changed, "sm_90", candidate, tc)


@pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not found")
def test_bad_signature_project_fails_lock_at_the_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "bad_signature"
    shutil.copytree(PACKAGES / "bad_signature", project)
    argv = ["lock", "-m", str(project), "--offline", "--no-gpu", "--cache-dir", str(tmp_path / "cache")]
    code = main(argv)
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 1, text
    assert "scale/sm_90: no candidate may win" in text and "compile_error" in text
    assert "Traceback" not in text
    assert not (project / "kernels.lock").exists()
    assert main([*argv, "--json"]) == 1
    (row,) = json.loads(capsys.readouterr().out)["unresolved"][0]["outcomes"]
    assert (row["provenance"], row["stage"], row["status"]) == ("baseline", "gate", "compile_error")
    assert row["reason"].startswith(
        'the definition of scale does not match the declared signature extern "C" '
        "cudaError_t scale(const float* x, float* y, int64_t n, cudaStream_t stream)"
    )


def test_bad_reference_project_fails_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = tmp_path / "bad_reference"
    shutil.copytree(PACKAGES / "bad_reference", project)
    code = main(["check", "-m", str(project)])
    out = capsys.readouterr()
    assert code == 2, out
    assert (
        f"{project / 'kernels.toml'}:13: kernel[0].reference: the reference reference:scale of kernel 'scale' "
        "at test shape n=1 (signed inputs): output 'y' has shape (0,), the spec declares (1,)"
    ) in out.err
