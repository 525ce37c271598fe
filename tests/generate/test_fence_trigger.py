"""A streamed answer is read for finished code only when a delta completes a fence (three backticks or tildes,
split across deltas or not), not at every backtick: an 840 KB answer full of inline code spans was read again at
each, 54 s of work that outlasted the request's time and lost the answer."""

from __future__ import annotations

from r1build.generate.exchange import Meter


def _fires(pieces: list[str]) -> list[int]:
    meter = Meter()
    return [i for i, piece in enumerate(pieces) if meter.fence_closed(piece)]


def test_a_fence_split_across_deltas_fires_once_at_its_last_character() -> None:
    assert _fires(["text\n`", "`", "`cuda\ncode\n", "``", "`\n"]) == [2, 4]
    assert _fires(["~~", "~\n"]) == [1]


def test_inline_code_spans_never_fire() -> None:
    pieces = ["use `x` and `y`, ", "then ``z`` ", "`", "a", "`"] * 2000
    assert _fires(pieces) == []
