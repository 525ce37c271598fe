"""Input generation, poison patterns and buffer layouts (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest

from r1build.evaluate.correctness.inputs import (
    DISTRIBUTIONS,
    GUARD_BYTES,
    generate_inputs,
    layout_for,
    poison_bytes,
    scalar_values,
)
from r1build.manifest import Manifest


def test_distributions_are_seeded_distinct_and_never_zero(root_manifest: Manifest) -> None:
    spec = root_manifest.kernel("silu_mul")
    sizes = {"n": 4096}
    drawn = {d: generate_inputs(spec, sizes, d, seed=7) for d in DISTRIBUTIONS}
    again = generate_inputs(spec, sizes, "signed", seed=7)
    assert np.array_equal(drawn["signed"]["gate"], again["gate"])
    assert not np.array_equal(drawn["signed"]["gate"], generate_inputs(spec, sizes, "signed", seed=8)["gate"])
    for arrays in drawn.values():
        assert set(arrays) == {"gate", "up"}  # out is not an input
        assert arrays["gate"].dtype == np.float32 and arrays["gate"].shape == (4096,)
        assert np.count_nonzero(arrays["gate"]) > 3000
    assert np.abs(drawn["large"]["gate"]).max() > 100.0
    assert len(np.unique(drawn["ties"]["gate"])) <= 7
    tiny = np.finfo(np.float32).tiny
    sub = drawn["denormal"]["gate"]
    assert np.count_nonzero((sub != 0) & (np.abs(sub) < tiny)) > 500


def test_integer_and_bool_inputs(root_manifest: Manifest) -> None:
    from dataclasses import replace

    spec = root_manifest.kernel("silu_mul")
    args = [replace(spec.args[0], dtype="int16"), replace(spec.args[1], dtype="bool"), *spec.args[2:]]
    spec = replace(spec, args=args)
    arrays = generate_inputs(spec, {"n": 1000}, "large", seed=1)
    assert arrays["gate"].dtype == np.int16 and np.abs(arrays["gate"]).max() > 1000
    assert arrays["up"].dtype == np.bool_
    with pytest.raises(ValueError, match="unknown distribution"):
        generate_inputs(spec, {"n": 4}, "zeros", seed=1)


def test_scalars_come_from_shape_and_values(root_manifest: Manifest) -> None:
    assert scalar_values(root_manifest.kernel("rmsnorm"), {"rows": 3, "cols": 5}) == {
        "rows": 3,
        "cols": 5,
        "eps": pytest.approx(1e-6),
    }


def test_layout_offsets_misalign_each_array_differently(root_manifest: Manifest) -> None:
    layouts = layout_for(root_manifest.kernel("silu_mul"), {"n": 31})
    assert [lay.offset for lay in layouts] == [4, 8, 12]
    for lay in layouts:
        assert lay.front == GUARD_BYTES and lay.back == GUARD_BYTES
        assert lay.start % 16 != 0 and lay.start % 4 == 0
        assert lay.total == lay.front + lay.offset + 31 * 4 + lay.back
    aligned = layout_for(root_manifest.kernel("matmul"), {"m": 3, "n": 5, "k": 7})  # alignment = 16
    assert all(lay.offset == 0 and lay.start % 256 == 0 for lay in aligned)
    assert [lay.shape for lay in aligned] == [(3, 7), (7, 5), (3, 5)]


def test_poison_patterns_are_nan_for_floats() -> None:
    for parity in (0, 1):
        value = np.frombuffer(poison_bytes("float32", parity), dtype=np.float32)[0]
        assert np.isnan(value)
        assert np.isnan(np.frombuffer(poison_bytes("float64", parity), dtype=np.float64)[0])
        assert np.isnan(np.frombuffer(poison_bytes("float16", parity), dtype=np.float16)[0])
    assert poison_bytes("int32", 0) != poison_bytes("int32", 1)
