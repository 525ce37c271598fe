"""Damaged transcripts on disk: ``replay``, ``export-dataset`` and ``report`` say what is damaged and where."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from r1build.cache import Cache
from r1build.cache.transcript_doc import LINKS_NAMESPACE, read_links
from r1build.cli.main import main
from r1build.keys import decision_key
from r1build.manifest import Manifest
from tests.generate.chat_server import Answer, ChatServer
from tests.generate.gen_support import Project, answer, kernel_source, search_vadd


def _setup(project: Project) -> tuple[Manifest, str, list[str]]:
    manifest = project.write(budget={"rounds": 1, "samples": 2, "candidates": 2})
    replies = [Answer(answer(kernel_source(1))), Answer(answer(kernel_source(2)))]
    with ChatServer(replies) as server, project.cache() as cache:
        search_vadd(manifest, cache, server.url)
    key = decision_key(manifest, manifest.kernel("vadd"), "sm_90")
    with project.cache() as cache:
        links = read_links(cache, key)
    assert links is not None and len(links.transcripts) == 2
    return manifest, key, links.transcripts


def _relink(cache: Cache, key: str, transcripts: list[str]) -> None:
    doc = cache.get_json(LINKS_NAMESPACE, key)
    assert isinstance(doc, dict)
    cache.put_json(LINKS_NAMESPACE, key, {**doc, "transcripts": transcripts})


def _raw(cache: Cache, digest: str) -> bytes:
    raw = cache._stored(f"blob/{digest}")
    assert isinstance(raw, bytes)
    return raw


def _cli(project: Project, *args: str) -> int:
    return main([*args, "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)])


def _run_all(project: Project, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[int, str, str]]:
    """``replay``, ``export-dataset`` and ``report`` on the project: each one's exit code, stdout and stderr."""
    capsys.readouterr()
    out = project.root / "out"
    done = {}
    for argv in (
        ["replay", "vadd", "--no-gpu"],
        ["export-dataset", "-o", str(out.with_suffix(".jsonl"))],
        ["report", "-o", str(out.with_suffix(".html"))],
    ):
        code = _cli(project, *argv)
        o, e = capsys.readouterr()
        done[argv[0]] = (code, o, e)
    return done


def truncated(cache: Cache, key: str, ts: list[str]) -> str:
    raw = _raw(cache, ts[0])
    cache._set(f"blob/{ts[0]}", raw[: len(raw) // 2])
    return ts[0]


def flipped(cache: Cache, key: str, ts: list[str]) -> str:
    raw = bytearray(_raw(cache, ts[0]))
    raw[len(raw) // 2] ^= 0xFF
    cache._set(f"blob/{ts[0]}", bytes(raw))
    return ts[0]


def non_utf8(cache: Cache, key: str, ts: list[str]) -> str:
    digest = cache.put_blob(b"\xff\xfe{not utf8 \x80\x81}")
    _relink(cache, key, [*ts, digest])
    return digest


def missing(cache: Cache, key: str, ts: list[str]) -> str:
    _relink(cache, key, [*ts, "0" * 64])
    return "0" * 64


ATTACKS: dict[str, Callable[[Cache, str, list[str]], str]] = {
    f.__name__: f for f in (truncated, flipped, non_utf8, missing)
}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_unreadable_transcript_is_named_and_the_rest_replayed(
    project: Project, attack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, key, ts = _setup(project)
    with project.cache() as cache:
        damaged = ATTACKS[attack](cache, key, ts)
    done = _run_all(project, capsys)
    assert all(code == 0 for code, _, _ in done.values()), done
    _, out, err = done["replay"]
    assert f"transcript {damaged[:12]} is missing or unreadable" in err
    assert "1 generated candidate(s)" in out or "2 generated candidate(s)" in out
    assert "Traceback" not in out + err


def test_a_transcript_of_the_wrong_shape_is_skipped_not_a_crash(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """A transcript whose round is 1e400 (OverflowError) or whose token counts are strings (ValueError) crashed
    replay, export-dataset and report with a traceback: it is skipped, the rest replayed."""
    _, key, ts = _setup(project)
    head = '{"kind": "r1build.transcript", "kernel": "vadd", "arch": "sm_90", '
    with project.cache() as cache:
        huge_round = cache.put_text(head + '"round": 1e400, "sample": 5, "answer": {"content": "hi"}}')
        bad_usage = cache.put_text(
            head + '"round": 1, "sample": 6, "answer": {"content": "hi", "prompt_tokens": "many", '
            '"completion_tokens": [1], "reasoning_tokens": NaN}}'
        )
        _relink(cache, key, [*ts, huge_round, bad_usage])
    done = _run_all(project, capsys)
    assert all(code == 0 for code, _, _ in done.values()), done
    _, out, err = done["replay"]
    assert f"transcript {huge_round[:12]} is missing or unreadable" in err
    assert "4 transcript(s), 2 generated candidate(s), 2 passed" in out, out  # the skipped one named above


def test_a_transcript_linked_twice_counts_once(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    """Two links to one blob counted its sample, tokens and cost twice in replay and the dataset's hint."""
    _, key, ts = _setup(project)
    with project.cache() as cache:
        _relink(cache, key, [ts[0], ts[0], ts[1]])
    done = _run_all(project, capsys)
    assert all(code == 0 for code, _, _ in done.values()), done
    assert "2 transcript(s), 2 generated candidate(s)" in done["replay"][1]
    assert "vadd/sm_90: 2 stored answer(s)" in done["export-dataset"][2]
    with project.cache() as cache:  # nothing else in the cache lost
        assert all(cache.get_text(t) is not None for t in ts)
