"""The links a search leaves under its decision key, read once for the resolver, replay and the overview; and
transcript documents as read from their blobs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from r1build.cache import Cache
from r1build.cache.transcript_doc import LINKS_NAMESPACE, parse_transcript, read_links
from r1build.records import Candidate, CandidateRef, Origin


def test_links_of_generate_and_of_a_search_and_what_cannot_be_read(tmp_path: Path) -> None:
    generated = Candidate("__global__ void k() {}\n", Origin("generated", model="m", round=0, sample=1), {"B": 64})
    ref = CandidateRef.of(generated)
    with Cache(tmp_path / "cache") as cache:
        assert read_links(cache, "none") is None
        cache.put_json(LINKS_NAMESPACE, "empty", {})
        assert read_links(cache, "empty") is None
        # what `r1build generate` keeps: transcripts and the candidates it judged
        cache.put_json(
            LINKS_NAMESPACE,
            "generate",
            {"transcripts": ["a" * 64, 7], "candidates": [dataclasses.asdict(ref)], "stop_reason": "rounds"},
        )
        links = read_links(cache, "generate")
        assert links is not None and links.transcripts == ["a" * 64] and links.candidates == [ref]
        assert links.stop_reason == "rounds" and links.cause == "" and links.created == ""
        # what a search inside a resolve links: transcripts, no candidates
        cache.put_json(LINKS_NAMESPACE, "search", {"transcripts": ["b" * 64], "cause": "all 1 round(s) ran"})
        links = read_links(cache, "search")
        assert links is not None and links.candidates is None and links.cause == "all 1 round(s) ran"
        # a candidate this version cannot read: none of them, rather than a guess
        cache.put_json(LINKS_NAMESPACE, "odd", {"transcripts": "c", "candidates": [{"digest": 1}]})
        links = read_links(cache, "odd")
        assert links is not None and links.candidates is None and links.transcripts == []


def test_a_transcript_blob_nested_too_deeply_is_no_transcript() -> None:
    """Transcripts are blobs (bytes by their digest, from a bundle or a remote): one of 100,000 nested arrays ended
    `replay`, `report` and `export-dataset` with a RecursionError traceback where it was read as a transcript."""
    assert parse_transcript("[" * 100_000 + "]" * 100_000) is None
    assert parse_transcript('{"a": ' * 50_000 + "1" + "}" * 50_000) is None
