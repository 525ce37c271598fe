"""A torch-reference checked against the numpy reference on CPU tensors of the manifest's test shape (the CPU
build of torch; skipped where torch is not installed)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from r1build.evaluate.correctness.torch_check import torch_disagreement
from r1build.manifest import load_manifest

pytest.importorskip("torch")

GOOD = """import torch


def silu_mul(gate, up, n):
    return torch.nn.functional.silu(gate) * up
"""
WRONG = GOOD.replace("silu(gate) * up", "silu(gate) + up")


@pytest.mark.parametrize(("source", "agrees"), [(GOOD, True), (WRONG, False)])
def test_torch_reference_against_the_numpy_reference(root_copy: Path, source: str, agrees: bool) -> None:
    (root_copy / "kernels" / "torch_ref.py").write_text(source, encoding="utf-8")
    m = load_manifest(root_copy / "kernels.toml")
    spec = dataclasses.replace(m.kernel("silu_mul"), torch_reference="kernels.torch_ref:silu_mul")
    found = torch_disagreement(m.root, spec, spec.test_shapes[2])
    if agrees:
        assert found is None
    else:
        assert found is not None and "kernels.torch_ref:silu_mul disagrees with the reference at {'n': 1021}" in found


def test_a_torch_reference_that_raises_is_said(root_copy: Path) -> None:
    (root_copy / "kernels" / "torch_ref.py").write_text("def silu_mul(gate, up, n):\n    raise KeyError('x')\n")
    m = load_manifest(root_copy / "kernels.toml")
    spec = dataclasses.replace(m.kernel("silu_mul"), torch_reference="kernels.torch_ref:silu_mul")
    found = torch_disagreement(m.root, spec, spec.test_shapes[0])
    assert found is not None and "failed on CPU tensors: KeyError" in found
