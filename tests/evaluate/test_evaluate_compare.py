"""The verdict on returned bytes: guard bands, unchanged inputs, poison, NaN and tolerance (no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from r1build.evaluate.correctness.compare import check_guards, check_unchanged, compare_output
from r1build.evaluate.correctness.inputs import GUARD_BYTE, ArrayLayout, poison_bytes
from r1build.manifest import Tolerance

TOL = Tolerance(rtol=1e-5, atol=1e-6)


def layout(n: int, dtype: str = "float32", role: str = "out") -> ArrayLayout:
    nbytes = n * np.dtype(dtype).itemsize
    return ArrayLayout(name="y", role=role, dtype=dtype, shape=(n,), nbytes=nbytes, front=64, offset=4, back=64)


def alloc(lay: ArrayLayout, payload: NDArray[np.generic]) -> bytearray:
    data = bytearray([GUARD_BYTE]) * lay.total
    raw = np.ascontiguousarray(payload).tobytes()
    data[lay.start : lay.start + len(raw)] = raw
    return data


def test_guards_catch_writes_after_and_before() -> None:
    lay = layout(10)
    good = alloc(lay, np.ones(10, np.float32))
    assert check_guards(lay, bytes(good)) is None
    after = bytearray(good)
    after[lay.start + 40 + 3] = 0
    found = check_guards(lay, bytes(after))
    assert found is not None and found.kind == "guard" and "past its end" in found.message
    before = bytearray(good)
    before[lay.start - 4] = 1
    found = check_guards(lay, bytes(before))
    assert found is not None and "before its start" in found.message


def test_inputs_must_be_bitwise_unchanged() -> None:
    lay = layout(8, role="in")
    x = np.arange(8, dtype=np.float32)
    assert check_unchanged(lay, bytes(alloc(lay, x)), x) is None
    changed = x.copy()
    changed[5] = -0.0 if x[5] == 0 else 0.0
    found = check_unchanged(lay, bytes(alloc(lay, changed)), x)
    assert found is not None and found.kind == "input" and "[5]" in found.message


def test_unwritten_and_nan_never_pass() -> None:
    lay = layout(6)
    ref = np.linspace(-1, 1, 6).astype(np.float32)
    poison = poison_bytes("float32", 0)
    out = ref.copy()
    raw = bytearray(alloc(lay, out))
    raw[lay.start + 8 : lay.start + 12] = poison
    found = compare_output(lay, bytes(raw), ref, TOL, poison)
    assert found is not None and found.kind == "unwritten" and "[2]" in found.message
    nan = ref.copy()
    nan[4] = np.nan  # the same bytes as poison pattern 0: judged with pattern 1
    other = poison_bytes("float32", 1)
    found = compare_output(lay, bytes(alloc(lay, nan)), ref, TOL, other)
    assert found is not None and found.kind == "nan"
    both_nan = compare_output(lay, bytes(alloc(lay, nan)), nan, TOL, other)
    assert both_nan is None  # NaN where the reference has NaN is right


def test_tolerance_elementwise_and_norm() -> None:
    lay = layout(1000)
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000).astype(np.float32)
    poison = poison_bytes("float32", 1)
    close = (ref.astype(np.float64) * (1 + 1e-7)).astype(np.float32)
    assert compare_output(lay, bytes(alloc(lay, close)), ref, TOL, poison) is None
    off = ref.copy()
    off[17] += 1e-2
    found = compare_output(lay, bytes(alloc(lay, off)), ref, TOL, poison)
    assert found is not None and found.kind == "value" and "[17]" in found.message
    # a reference that is one subnormal (a GPU atomic flushes it to zero): judged by atol, not by a 100% error
    one = layout(1)
    tiny = np.array([-6.3e-43], dtype=np.float32)
    assert compare_output(one, bytes(alloc(one, np.zeros(1, np.float32))), tiny, TOL, poison) is None
    assert compare_output(one, bytes(alloc(one, np.full(1, 1e-3, np.float32))), tiny, TOL, poison) is not None


def test_atol_scales_with_the_output_magnitude_for_large_inputs_only() -> None:
    lay = layout(4)
    ref = np.array([1e6, -1e6, 3.0, 1e6], dtype=np.float32)
    out = ref.copy()
    out[2] = 3.5  # an error of 0.5 at a cancelling element, tiny next to the output's scale
    tol = Tolerance(1e-4, 1e-4)
    assert compare_output(lay, bytes(alloc(lay, out)), ref, tol, b"\xff" * 4, scale_atol=True) is None
    # numpy.allclose semantics otherwise: the tolerance means what the manifest says
    found = compare_output(lay, bytes(alloc(lay, out)), ref, tol, b"\xff" * 4)
    assert found is not None and "tolerance" in found.message
    out[2] = 300.0
    assert compare_output(lay, bytes(alloc(lay, out)), ref, tol, b"\xff" * 4, scale_atol=True) is not None


def test_allclose_semantics_catch_a_half_precision_sum() -> None:
    """A sum rounded to float16 (relative error ~5e-5) fails rtol=1e-5 at any size, n = 1 included."""
    one = layout(1)
    ref = np.array([0.7319], dtype=np.float64)
    got = np.array([np.float16(0.7319)], dtype=np.float32)
    assert compare_output(one, bytes(alloc(one, got)), ref, Tolerance(1e-5, 1e-6), b"\xff" * 4) is not None
    assert not np.allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_exact_tolerance_and_infinities() -> None:
    lay = layout(3)
    ref = np.array([1.0, np.inf, -2.0], dtype=np.float32)
    exact = Tolerance(rtol=0.0, atol=0.0)
    assert compare_output(lay, bytes(alloc(lay, ref)), ref, exact, b"\xff" * 4) is None
    wrong = ref.copy()
    wrong[1] = 3.4e38
    assert compare_output(lay, bytes(alloc(lay, wrong)), ref, TOL, b"\xff" * 4) is not None
    bumped = ref.copy()
    bumped[0] = np.nextafter(np.float32(1.0), np.float32(2.0))
    assert compare_output(lay, bytes(alloc(lay, bumped)), ref, exact, b"\xff" * 4) is not None


def test_integer_outputs() -> None:
    lay = layout(5, "int32")
    ref = np.array([1, 2, 3, 4, 5], dtype=np.int32)
    poison = poison_bytes("int32", 0)
    assert compare_output(lay, bytes(alloc(lay, ref)), ref, Tolerance(0, 0), poison) is None
    raw = bytearray(alloc(lay, ref))
    raw[lay.start : lay.start + 4] = poison
    found = compare_output(lay, bytes(raw), ref, Tolerance(0, 0), poison)
    assert found is not None and found.kind == "unwritten"


def test_the_quick_path_accepts_only_what_the_full_rules_accept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outputs near the tolerance, with NaN, infinities and poison: the verdict with the quick path is the
    verdict of the full rules alone."""
    from r1build.evaluate.correctness import compare
    from r1build.evaluate.correctness.inputs import ArrayLayout, poison_bytes
    from r1build.manifest.model import Tolerance

    rng = np.random.default_rng(7)
    tol = Tolerance(rtol=1e-5, atol=1e-6)
    poison = poison_bytes("float32", 0)
    cases = []
    for k in range(60):
        want = rng.standard_normal(4096)
        got = want.astype(np.float32)
        bump = rng.integers(0, 4)
        i = int(rng.integers(0, want.size))
        if bump == 1:  # just inside or just outside one element's tolerance
            got[i] = np.float32(want[i] + (1.0 + rng.uniform(-0.5, 0.5) * 1e-1) * (1e-6 + 1e-5 * abs(want[i])))
        elif bump == 2:
            got[i] = np.nan if k % 2 else np.inf
        elif bump == 3:
            got = got.copy()
            got.view(np.uint8).reshape(-1, 4)[i] = np.frombuffer(poison, dtype=np.uint8)
        if k % 7 == 0:
            want[i] = np.nan
        cases.append((got, want))
    for got, want in cases:
        data = got.tobytes()
        layout = ArrayLayout(
            name="y", role="out", dtype="float32", shape=want.shape, nbytes=len(data), front=0, offset=0, back=0
        )
        quick = compare.compare_output(layout, data, want, tol, poison)
        with monkeypatch.context() as m:
            m.setattr(compare, "_clearly_matches", lambda *a, **k: False)
            full = compare.compare_output(layout, data, want, tol, poison)
        assert (quick is None) == (full is None)
        assert quick == full
