"""End to end with the real endpoint protocol: a scripted chat-completions server answers kernels that each read a
canary file of the building machine while compiling (every spelling of :func:`attacks`, the one the text checks
cannot see among them); a two-round search through the real static gate (sandboxed nvcc) then sends its feedback
to the server. The canary is in no request the endpoint receives, and nowhere in the cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from r1build.gate.static import StaticGate
from r1build.generate import SearchJob, search
from tests.generate.chat_server import Answer, ChatServer, Reply, Request
from tests.generate.gen_support import Project, answer, env_for, kernel_source
from tests.sandbox.support import needs_sandbox
from tests.sandbox.test_sandbox_compile import CANARY, PASTED, attacks

pytestmark = [pytest.mark.slow, needs_sandbox]


def test_no_request_to_the_endpoint_and_nothing_cached_holds_the_canary(tmp_path: Path) -> None:
    secret = tmp_path / "keys" / "team.pem"
    secret.parent.mkdir()
    secret.write_text(f"{CANARY} the first line of a key\n")
    found = attacks(secret)
    spellings = [found.pop(PASTED), *found.values()]  # the one the text checks miss first: it reaches nvcc
    (tmp_path / "proj").mkdir()
    project = Project(tmp_path / "proj", tmp_path / "cache")
    samples = 4
    manifest = project.write(
        budget={"rounds": 2, "samples": samples, "patience": 2},
        generation={"retry-backoff-s": 0.01, "request-timeout-s": 30},
    )
    served: list[int] = []

    def script(request: Request) -> Reply:
        n = len(served)
        served.append(n)
        return Answer(answer(kernel_source(n, extra=spellings[n % len(spellings)])))

    with ChatServer(script) as server, project.cache() as cache:
        search(
            SearchJob(manifest, manifest.kernel("vadd"), "sm_90", evaluator=StaticGate(cache), cache=cache, seeds=[]),
            environ=env_for(server.url),
        )
        requests = server.chat_requests()
    assert len(requests) > samples  # a second round went out, with the first round's feedback
    sent = "\n".join(json.dumps(r.messages) for r in requests)
    assert CANARY not in sent
    later = "\n".join(json.dumps(r.messages) for r in requests[samples:])
    assert "file not found" in later  # the pasted .incbin's own compile error is fed back, and nothing more
    stored = b"".join(p.read_bytes() for p in project.cache_dir.rglob("*") if p.is_file())
    assert CANARY.encode() not in stored
