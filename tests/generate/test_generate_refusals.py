"""Answers with no content but a ``refusal`` or ``tool_calls``, plain and streamed, against the real local server:
what the model said is kept in the transcript and shown in the warning ``r1build generate`` prints, instead of
an answer reported as "(empty)" and dropped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from r1build.cache.transcript_doc import LINKS_NAMESPACE
from r1build.cli.main import main
from r1build.keys import decision_key
from tests.generate.chat_server import ChatServer, Events, Raw, Reply
from tests.generate.gen_support import KEY, Project

pytestmark = pytest.mark.slow  # a server and a CLI run

REFUSAL = "I cannot help with writing that kernel."
CALL = {"name": "write_file", "arguments": '{"path": "vadd.cu", "text": "__global__ void k() {}"}'}
USAGE = {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30}


def _plain(message: dict[str, Any], finish: str) -> Raw:
    choice = {"index": 0, "message": {"role": "assistant", "content": None, **message}, "finish_reason": finish}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "deepseek-reasoner", "choices": [choice]}
    return Raw(json.dumps({**body, "usage": USAGE}).encode())


def _event(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "c",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "deepseek-reasoner",
        "choices": [choice],
    }


def _streamed(deltas: list[dict[str, Any]], finish: str) -> Events:
    usage = {**_event({}), "choices": [], "usage": USAGE}
    return Events([*(_event(d) for d in deltas), _event({}, finish), usage])


def replies(stream: bool) -> list[Reply]:
    if not stream:
        tool = {"id": "call_1", "type": "function", "function": CALL}
        return [_plain({"refusal": REFUSAL}, "stop"), _plain({"tool_calls": [tool]}, "tool_calls")]
    half = len(CALL["arguments"]) // 2
    head = {"index": 0, "id": "call_1", "type": "function", "function": {"name": CALL["name"], "arguments": ""}}
    calls = [
        {"tool_calls": [head]},
        {"tool_calls": [{"index": 0, "function": {"arguments": CALL["arguments"][:half]}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": CALL["arguments"][half:]}}]},
    ]
    return [_streamed([{"refusal": REFUSAL[:10]}, {"refusal": REFUSAL[10:]}], "stop"), _streamed(calls, "tool_calls")]


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_refusals_and_tool_calls_are_kept_and_shown(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stream: bool
) -> None:
    manifest = project.write(
        budget={"rounds": 1, "samples": 2, "candidates": 2}, generation={"max-concurrency": 1, "stream": stream}
    )
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    with ChatServer(replies(stream)) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        argv = ["generate", "vadd", "--manifest", str(project.root), "--cache-dir", str(project.cache_dir)]
        assert main(argv) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "(empty)" not in err
    assert f"the model refused: {REFUSAL}" in err
    assert f"the model answered with a tool call instead of code: write_file({CALL['arguments']})" in err
    with project.cache() as cache:
        links = cache.get_json(LINKS_NAMESPACE, decision_key(manifest, manifest.kernel("vadd"), "sm_90"))
        assert links is not None
        answers = [json.loads(cache.get_text(d) or "")["answer"] for d in links["transcripts"]]
    assert sorted(a["refusal"] for a in answers) == ["", REFUSAL]
    assert sorted((a["tool_calls"] for a in answers), key=len) == [[], [CALL]]
