"""The timing worker's device copies of input files: exact bytes, a changed copy uploaded again, a changed file
read again, a memory limit (on the GPU)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from r1build.evaluate.child.pristine import PristineInputs

pytestmark = pytest.mark.gpu


def _file(path: Path, size: int, seed: int) -> bytes:
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    return data


def _filled(cp: Any, inputs: PristineInputs, path: Path, size: int, stream: Any) -> bytes:
    raw = cp.full(size, 0xAB, dtype=cp.uint8)
    inputs.copy_into(str(path), raw, stream)
    stream.synchronize()
    return bytes(raw.get())


def test_copies_are_exact_and_a_changed_copy_is_uploaded_again(tmp_path: Path) -> None:
    cp = pytest.importorskip("cupy")
    stream = cp.cuda.Stream(non_blocking=True)
    inputs = PristineInputs(cp, limit_bytes=1 << 30)
    a = tmp_path / "a.bin"
    data = _file(a, 1_000_003, 1)  # not a whole number of 8-byte words
    assert _filled(cp, inputs, a, len(data), stream) == data
    assert _filled(cp, inputs, a, len(data), stream) == data
    assert inputs.uploads == 1 and inputs.repaired == 0

    # a candidate's kernel writing into the kept copy (one bit, then two words swapped): found, uploaded again
    kept = inputs._copies[str(a)].data
    kept[7] ^= np.uint64(1)
    assert _filled(cp, inputs, a, len(data), stream) == data
    assert inputs.repaired == 1
    kept = inputs._copies[str(a)].data
    first, second = int(kept[10]), int(kept[11])
    if first != second:
        kept[10], kept[11] = np.uint64(second), np.uint64(first)
        assert _filled(cp, inputs, a, len(data), stream) == data
        assert inputs.repaired == 2

    # the file itself changed (size or time): read again
    changed = _file(a, 999, 2)
    os.utime(a, ns=(1, 1))
    assert _filled(cp, inputs, a, len(changed), stream) == changed


def test_the_least_recently_used_copy_goes_past_the_limit(tmp_path: Path) -> None:
    cp = pytest.importorskip("cupy")
    stream = cp.cuda.Stream(non_blocking=True)
    inputs = PristineInputs(cp, limit_bytes=3 << 20)
    files = [tmp_path / f"{k}.bin" for k in range(3)]
    datas = [_file(f, 1 << 20, k) for k, f in enumerate(files)]
    for f, d in zip(files, datas, strict=True):
        assert _filled(cp, inputs, f, len(d), stream) == d
    assert _filled(cp, inputs, files[0], len(datas[0]), stream) == datas[0]  # most recent now
    extra = tmp_path / "extra.bin"
    _file(extra, 1 << 20, 9)
    _filled(cp, inputs, extra, 1 << 20, stream)
    assert str(files[1]) not in inputs._copies and str(files[0]) in inputs._copies
    uploads = inputs.uploads
    assert _filled(cp, inputs, files[1], len(datas[1]), stream) == datas[1]
    assert inputs.uploads == uploads + 1


def test_holds_tells_an_array_that_still_holds_its_file_from_one_written_into(tmp_path: Path) -> None:
    """Issue 27: after the timed calls the worker asks whether each ``in`` array still holds its file (a compare on
    the device) and sends only those that do not. A kept copy a candidate changed, or none kept, is never taken as
    the truth: the answer is then False and the parent compares the bytes with its own."""
    cp = pytest.importorskip("cupy")
    stream = cp.cuda.Stream(non_blocking=True)
    inputs = PristineInputs(cp, limit_bytes=1 << 30)
    a = tmp_path / "a.bin"
    data = _file(a, 4099 * 4, 3)
    raw = cp.full(len(data), 0xAB, dtype=cp.uint8)
    inputs.copy_into(str(a), raw, stream)
    stream.synchronize()
    assert inputs.holds(str(a), raw, stream)
    with stream:
        raw[4 * 5] ^= np.uint8(1)  # one element of the input written into (on the stream, as a candidate writes)
    assert not inputs.holds(str(a), raw, stream)
    with stream:
        raw[4 * 5] ^= np.uint8(1)
    assert inputs.holds(str(a), raw, stream)
    assert not inputs.holds(str(a), raw[:-4], stream)  # not the file's size
    kept = inputs._copies[str(a)].data
    with stream:
        kept[0] ^= np.uint64(1)  # the kept copy changed by a candidate, to match what it wrote: never trusted
        raw[0] ^= np.uint8(1)  # the same bit (little-endian): the array now matches the changed copy
    assert not inputs.holds(str(a), raw, stream)
    assert not inputs.holds(str(tmp_path / "never.bin"), raw, stream)


def test_holds_reads_its_answer_on_the_stream_that_computed_it(tmp_path: Path) -> None:
    """The compare runs on the worker's non-blocking stream, which the legacy default stream does not wait for.
    Read there, the answer of a compare still running is whatever its memory held before: the True an earlier
    compare left in the pool's block, and an input a candidate wrote into (``bench_input_scratch`` of the cheat
    corpus, on an H100) was taken as unchanged. 256 MB take the compare long enough to lose that race every time."""
    cp = pytest.importorskip("cupy")
    stream = cp.cuda.Stream(non_blocking=True)
    inputs = PristineInputs(cp, limit_bytes=1 << 30)
    a = tmp_path / "big.bin"
    size = 1 << 28
    np.random.default_rng(4).integers(0, 256, size, dtype=np.uint8).tofile(a)
    with stream:
        raw = cp.empty(size, dtype=cp.uint8)
    inputs.copy_into(str(a), raw, stream)
    stream.synchronize()
    for k in range(3):
        assert inputs.holds(str(a), raw, stream), k  # a True left in this stream's small blocks of the pool
        with stream:
            raw[size - 1 - k] ^= np.uint8(0x10)
        assert not inputs.holds(str(a), raw, stream), k
        with stream:
            raw[size - 1 - k] ^= np.uint8(0x10)
