"""``r1build doctor``: one report of nvcc, archs, GPUs, cupy, the endpoint (a real local server), the cache and the
project, as a table or JSON; exit 1 only where something a command needs is broken."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from tests.damage import wreck_index
from tests.generate.chat_server import Answer, ChatServer

ROOT = Path(__file__).resolve().parents[2]


def _doctor(capsys: pytest.CaptureFixture[str], *args: str, code: int = 0) -> dict[str, dict[str, str]]:
    capsys.readouterr()
    assert main(["doctor", "--json", *args]) == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is (code == 0)
    return {f["name"]: f for f in doc["findings"]}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for var in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "R1BUILD_OFFLINE", "R1BUILD_REMOTE_CACHE"):
        monkeypatch.delenv(var, raising=False)
    dest = tmp_path / "tiny"
    shutil.copytree(ROOT / "tests" / "packages" / "tiny", dest)
    monkeypatch.chdir(dest)
    return dest


def test_doctor_reports_each_part(
    project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    found = _doctor(capsys)
    assert list(found)[:3] == ["r1build", "nvcc", "archs"]
    assert found["nvcc"]["level"] == "ok" and "CUDA" in found["nvcc"]["detail"]
    assert "sm_90" in found["archs"]["detail"]
    assert found["cupy"]["level"] in ("ok", "note", "warning")
    assert found["endpoint"]["level"] == "note" and "none configured" in found["endpoint"]["detail"]
    assert found["cache"]["level"] == "note" and str(cache_dir) in found["cache"]["detail"]
    assert found["manifest"]["detail"].startswith(str(project / "kernels.toml"))
    assert found["lock"]["level"] == "warning" and "no lock file" in found["lock"]["detail"]

    with ChatServer([Answer("unused")]) as server:
        monkeypatch.setenv("R1BUILD_BASE_URL", server.url)
        found = _doctor(capsys)
        assert found["endpoint"]["level"] == "ok" and server.url in found["endpoint"]["detail"]
        assert server.chat_requests() == []  # a connection, never a request
        monkeypatch.setenv("R1BUILD_OFFLINE", "1")
        assert "not probed" in _doctor(capsys)["endpoint"]["detail"]
    monkeypatch.delenv("R1BUILD_OFFLINE")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("R1BUILD_BASE_URL", f"http://127.0.0.1:{port}/v1")
    assert _doctor(capsys)["endpoint"]["level"] == "warning"

    with Cache(cache_dir) as cache:
        cache.put_text("x")
    assert "1 entries" in _doctor(capsys)["cache"]["detail"]
    capsys.readouterr()
    assert main(["doctor"]) == 0
    table = capsys.readouterr().out
    assert "r1build doctor" in table and "nvcc" in table and "endpoint" in table


def test_doctor_exits_1_on_what_is_broken(
    project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with Cache(cache_dir) as cache:
        cache.put_text("x")
    wreck_index(cache_dir, "random")
    found = _doctor(capsys, code=1)
    assert found["cache"]["level"] == "error" and "cache repair" in found["cache"]["detail"]
    shutil.rmtree(cache_dir)

    monkeypatch.setenv("R1BUILD_NVCC", str(project / "no-such-nvcc"))
    found = _doctor(capsys, code=1)
    assert found["nvcc"]["level"] == "error" and "no-such-nvcc" in found["nvcc"]["detail"]
    monkeypatch.delenv("R1BUILD_NVCC")

    assert _doctor(capsys, "-m", str(project / "missing"), code=1)["manifest"]["level"] == "error"
    monkeypatch.chdir(project.parent)  # no manifest from here up: only a note
    assert _doctor(capsys)["manifest"]["level"] == "note"


def test_a_broken_manifest_found_from_here_is_an_error(
    project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without -m, finding no manifest is a note; finding one every command refuses was a note too (exit 0)."""
    monkeypatch.setenv("R1BUILD_OFFLINE", "1")
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('name = "scale"', 'nme = "scale"'), encoding="utf-8")
    found = _doctor(capsys, code=1)
    assert found["manifest"]["level"] == "error" and "unknown key 'nme'" in found["manifest"]["detail"]


def test_a_remote_cache_url_with_a_password_is_an_error_that_never_shows_it(
    project: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor printed R1BUILD_REMOTE_CACHE as it was, password and all, and called it ok."""
    monkeypatch.setenv("R1BUILD_REMOTE_CACHE", "https://bob:s3cretpw@cache.example.org/team")
    found = _doctor(capsys, code=1)
    assert found["remote cache"]["level"] == "error", found
    assert "s3cretpw" not in json.dumps(found) and "holds no credentials" in found["remote cache"]["detail"]
    monkeypatch.setenv("R1BUILD_REMOTE_CACHE", "https://cache.example.org/team")
    assert _doctor(capsys)["remote cache"]["detail"].startswith("https://cache.example.org/team")
