"""The device code each arch adds to an object, read from its fatbin (what ``status`` shows per arch and
``max-wheel-mib`` caps), checked against cuobjdump on objects the real nvcc built."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from r1build.errors import ToolchainError
from r1build.gate.fatbin import device_code_bytes
from r1build.toolchain.nvcc import toolchain

KERNEL = "__global__ void twice(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }\n"


def _compile(tmp_path: Path, gencodes: list[str]) -> Path:
    try:
        nvcc = toolchain().nvcc
    except ToolchainError as exc:  # pragma: no cover - every development and CI machine has nvcc
        pytest.skip(str(exc))
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "k.cu").write_text(KERNEL, encoding="utf-8")
    cmd = [nvcc, "-c", "k.cu", "-o", "k.o", *(f"-gencode={g}" for g in gencodes)]
    subprocess.run(cmd, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    return tmp_path / "k.o"


@pytest.mark.slow
def test_each_arch_of_a_joint_compile_is_sized(tmp_path: Path, cuobjdump: str) -> None:
    obj = _compile(
        tmp_path,
        [
            "arch=compute_80,code=[sm_80,compute_80]",
            "arch=compute_90a,code=sm_90a",
            "arch=compute_100,code=sm_100",
            "arch=compute_100a,code=sm_100a",
            "arch=compute_120f,code=sm_120f",
        ],
    )
    sizes = device_code_bytes(obj)
    assert set(sizes) == {"sm_80", "sm_90a", "sm_100", "sm_100a", "sm_120f"}
    headers = subprocess.run([cuobjdump, "-elf", str(obj)], capture_output=True, text=True, check=True).stdout
    assert set(re.findall(r"^arch = (sm_\w+)$", headers, re.MULTILINE)) == set(sizes)
    assert all(size > 1000 for size in sizes.values())
    # sm_80 carries its PTX as well: more than its machine code alone
    assert sizes["sm_80"] > device_code_bytes(_compile(tmp_path / "sass", ["arch=compute_80,code=sm_80"]))["sm_80"]
    assert sum(sizes.values()) <= obj.stat().st_size


def test_an_object_without_device_code_has_none(tmp_path: Path) -> None:
    (tmp_path / "x.o").write_bytes(b"\x7fELF" + bytes(200))
    assert device_code_bytes(tmp_path / "x.o") == {}
    assert device_code_bytes(tmp_path / "missing.o") == {}
