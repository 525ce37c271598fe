"""The race the worker's input check had (fixed in r1build/evaluate/child/pristine.py), shown on a GPU.

``PristineInputs.holds`` compares an ``in`` array with its kept copy on the worker's non-blocking stream. Reading
the answer with ``bool(same)`` copies it on the current stream (the legacy default one), which does not wait for
a non-blocking stream: the read can come before the compare wrote it, and returns what the memory held (a True an
earlier compare left there). ``same.get(stream=stream)`` reads it on the stream that computed it.

Runs TRIALS rounds of: a compare of an unchanged array (True), one byte of the array written on the stream, a
compare that must be False; counts the wrong Trues of each way of reading. Prints one line per way; with --out,
writes bench/results/pristine_race.md (device, date, command).

    python bench/pristine_race.py --trials 20 --out bench/results
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import Any

import numpy as np


def _compare(cp: Any, raw: Any, kept: Any, stream: Any, on_stream: bool) -> bool:
    with stream:
        same = cp.array_equal(raw, kept)
    return bool(same.get(stream=stream)[()]) if on_stream else bool(same)


def wrong_answers(cp: Any, size: int, trials: int, on_stream: bool) -> int:
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        kept = cp.asarray(np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8))
        raw = kept.copy()
    stream.synchronize()
    wrong = 0
    for k in range(trials):
        assert _compare(cp, raw, kept, stream, on_stream=True)  # a True left in the stream's small blocks
        with stream:
            raw[size - 1 - k] ^= np.uint8(0x10)
        wrong += _compare(cp, raw, kept, stream, on_stream)
        with stream:
            raw[size - 1 - k] ^= np.uint8(0x10)
    stream.synchronize()
    return wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--mb", type=int, default=256, help="array size in MB (the compare's duration)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    import cupy as cp

    size = args.mb << 20
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    lines = []
    for label, on_stream in (("bool(same) (before the fix)", False), ("same.get(stream=stream) (now)", True)):
        wrong = wrong_answers(cp, size, args.trials, on_stream)
        lines.append(f"| {label} | {args.mb} MB | {args.trials} | {wrong} |")
        print(f"{label}: {wrong} of {args.trials} changed arrays taken as unchanged")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        text = (
            f"# The input check's read race (bench/pristine_race.py)\n\n{name}, "
            f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
            f"`python bench/pristine_race.py --trials {args.trials} --mb {args.mb}`\n\n"
            "| read | array | trials | changed arrays taken as unchanged |\n| --- | ---: | ---: | ---: |\n"
            + "\n".join(lines)
            + "\n"
        )
        (args.out / "pristine_race.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
