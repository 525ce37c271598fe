"""Nobody's key is spent unless they asked: ``R1BUILD_OFFLINE`` holds for every command, a build never calls
the endpoint without ``R1BUILD_GENERATE``, an endpoint that is down costs seconds, and a cache that cannot keep
results is no reason to pay for them. A real chat server counts the requests; real nvcc gates."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from r1build.build import kernel_settings
from r1build.cli.main import main
from r1build.events import Event, Note, sink
from r1build.lock import read_lock
from tests.damage import wreck_index
from tests.generate.chat_server import Answer, ChatServer
from tests.generate.gen_support import KEY, Project, answer, kernel_source

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers


@pytest.fixture
def keyed_env(monkeypatch: pytest.MonkeyPatch, project: Project) -> pytest.MonkeyPatch:
    """Every key a careless environment holds, and the cache of the project."""
    for name in ("R1BUILD_BASE_URL", "R1BUILD_OFFLINE", "R1BUILD_GENERATE", "R1BUILD_LOCKED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(project.cache_dir))
    return monkeypatch


def _answers() -> list[Answer]:
    return [Answer(answer(kernel_source(i + 1)), reasoning=f"try {i}") for i in range(8)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_r1build_offline_holds_for_every_command(
    project: Project, keyed_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(baseline=True, budget={"rounds": 1, "samples": 2})
    where = ["--manifest", str(project.root)]
    with ChatServer(_answers()) as server:
        keyed_env.setenv("R1BUILD_BASE_URL", server.url)
        keyed_env.setenv("R1BUILD_OFFLINE", "1")
        assert main(["resolve", *where, "--no-gpu"]) == 0
        assert main(["lock", *where, "--no-gpu"]) == 0
        assert main(["status", *where]) == 0
        assert main(["vendor", *where]) == 0
        capsys.readouterr()
        assert main(["generate", "vadd", *where]) == 2
        assert "R1BUILD_OFFLINE is set" in capsys.readouterr().err
        offline_requests = len(server.requests)
        # the control: the same miss, the variable gone, and the model is asked
        keyed_env.delenv("R1BUILD_OFFLINE")
        assert main(["resolve", *where, "--no-gpu", "--refresh"]) == 0
        online_requests = len(server.requests)
        # with what that search stored, every other command, offline again, asks nothing either
        keyed_env.setenv("R1BUILD_OFFLINE", "1")
        out = project.root / "out"
        for argv in (
            ["check", "--locked"],
            ["status", "--json"],
            ["resolve", "--no-gpu", "--refresh"],
            ["lock", "--no-gpu", "--refresh"],
            ["vendor", "--json"],
            ["replay", "vadd", "--no-gpu", "--json"],
            ["report", "-o", str(out.with_suffix(".html"))],
            ["export-dataset", "-o", str(out.with_suffix(".jsonl"))],
            ["doctor", "--json"],
        ):
            assert main([*argv, *where]) in (0, 1), argv  # doctor: 1 where this machine lacks what it needs
        assert main(["cache", "verify", "--json"]) == 0
        assert main(["generate", "vadd", *where]) == 2
        _build(project.root, {})
        after = len(server.requests)
    assert offline_requests == 0
    assert online_requests >= 2
    assert after == online_requests, [r.path for r in server.requests[online_requests:]]


def test_an_unreachable_endpoint_costs_seconds_and_a_warning(
    project: Project, keyed_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the defaults a user has: four retries with backoff from 2 s (half a minute of retries per request)
    project.write(baseline=True, generation={"retries": 4, "retry-backoff-s": 2.0}, budget={"rounds": 1, "samples": 2})
    keyed_env.setenv("R1BUILD_BASE_URL", f"http://127.0.0.1:{_closed_port()}/v1")
    start = time.monotonic()
    assert main(["resolve", "--manifest", str(project.root), "--no-gpu"]) == 0
    took = time.monotonic() - start
    err = capsys.readouterr().err
    assert "is unreachable" in err and "not generating" in err
    assert took < 15, f"resolve took {took:.1f} s with the endpoint down"
    entry = read_lock(project.root / "kernels.lock").entry("vadd", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.provenance == "baseline"


def _build(project: Path, settings: dict[str, str | list[str]]) -> list[Note]:
    seen: list[Event] = []
    with sink(seen.append):
        kernel_settings(settings, project)
    return [e for e in seen if isinstance(e, Note)]


def test_a_build_asks_the_model_only_when_the_person_building_opts_in(
    project: Project, keyed_env: pytest.MonkeyPatch
) -> None:
    project.write(baseline=True, budget={"rounds": 1, "samples": 2})
    with ChatServer(_answers()) as server:
        keyed_env.setenv("R1BUILD_BASE_URL", server.url)
        notes = _build(project.root, {})
        plain = len(server.requests)
        opted_in = _build(project.root, {"r1build.generate": "1"})
        generated = len(server.requests)
    assert plain == 0
    assert any("never calls it unless the person building opts in" in n.message for n in notes)
    assert generated >= 2, opted_in


def test_a_cache_that_cannot_keep_results_is_no_reason_to_pay(
    project: Project, keyed_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project.write(baseline=True, budget={"rounds": 1, "samples": 2})
    from r1build.cache import Cache

    with Cache(project.cache_dir) as cache:
        cache.put_text("something cached")
    wreck_index(project.cache_dir, "random")
    with ChatServer(_answers()) as server:
        keyed_env.setenv("R1BUILD_BASE_URL", server.url)
        assert main(["resolve", "--manifest", str(project.root), "--no-gpu"]) == 0
        requests = len(server.requests)
    err = capsys.readouterr().err
    assert requests == 0
    assert "damaged" in err and "cannot keep what it would cost" in err


def test_an_endpoint_that_never_answers_fails_resolve_but_not_a_build(
    project: Project, keyed_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Reachable but down in all but name (every request a 503): ``r1build resolve`` names the cause and exits
    1; an opted-in build warns and builds with the baseline."""
    from tests.generate.chat_server import Fault

    project.write(
        baseline=True, budget={"rounds": 1, "samples": 2}, generation={"retries": 0, "max-consecutive-failures": 2}
    )
    with ChatServer([Fault(503, "overloaded")] * 40) as server:
        keyed_env.setenv("R1BUILD_BASE_URL", server.url)
        assert main(["resolve", "--manifest", str(project.root), "--no-gpu"]) == 1
        err = capsys.readouterr().err
        assert "503" in err and "Traceback" not in err
        notes = _build(project.root, {"r1build.generate": "1"})
        asked = len(server.requests)
    assert asked >= 2
    assert any("building without generated candidates" in n.message for n in notes), notes
