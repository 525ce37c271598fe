"""The warm path of read-only commands (r1build/cli/fastpath.py) and the nvcc version memo: a command whose inputs
are unchanged answers from its record without importing the resolver; any change to what it read runs it in
full. Each command runs in a process of its own, as a user runs it (the warm path is for the console script)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli import fastpath
from r1build.keys import variant_digest
from r1build.toolchain import nvcc as toolchain_mod

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

ROOT = Path(__file__).resolve().parents[2]


def run(project: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str, bool]:
    """``r1build ARGS -m project`` in a fresh process: exit code, stdout, stderr, and whether the full path ran
    (the resolver or the manifest loader was imported)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "r1build.cli.main", *args, "-m", str(project)],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        cwd=project,
        check=False,
    )
    imported = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    stderr = "\n".join(line for line in proc.stderr.splitlines() if not line.startswith("import time:"))
    return proc.returncode, proc.stdout, stderr, "r1build.manifest.load" in imported


def warm(project: Path, *args: str) -> tuple[int, str, str]:
    """Run twice; the second run must be the warm path, with the same answer as the first."""
    first = run(project, *args)
    second = run(project, *args)
    assert not second[3], f"{args}: the second run imported the full path"
    assert first[:3] == second[:3], (first, second)
    return first[:3]


@pytest.fixture(autouse=True)
def _state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user state folder of these runs (where the key that signs records is kept), away from the user's."""
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state


def _undeclared_define(lock: Path) -> None:
    """The lock's entry given a define silu_mul does not declare, its winner digest recomputed: every command and
    build that reads the lock refuses it."""
    text = lock.read_text(encoding="utf-8")
    source = re.search(r'^source = "([0-9a-f]{64})"$', text, re.MULTILINE).group(1)  # type: ignore[union-attr]
    defines: dict[str, int | str] = {"BLOCK": 256, "tanhf": "sinf"}
    text = re.sub(r"^defines = .*$", 'defines = { BLOCK = 256, tanhf = "sinf" }', text, count=1, flags=re.MULTILINE)
    text = re.sub(r"^winner = .*$", f'winner = "{variant_digest(source, defines)}"', text, count=1, flags=re.M)
    lock.write_text(text, encoding="utf-8")


def _forge_records(cache_dir: Path, lock: Path, state: Path) -> int:
    """What a writer of the cache can do: store a record where earlier releases looked for one (``json/replay/``),
    naming the lock as it is now and keeping what the run printed; and, without the secret, what a writer of the
    records' folder can do: rewrite each record the same way. The number of records forged."""
    lock_state = fastpath._file_state(lock)
    forged = 0
    with Cache(cache_dir) as cache:
        for path in sorted((state / "r1build" / "replay").glob("*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            record["files"][str(lock)] = lock_state
            cache.put_json(fastpath.NAMESPACE, path.stem, record)
            path.write_text(json.dumps(record), encoding="utf-8")
            forged += 1
    return forged


@pytest.mark.parametrize(
    "command", [("check", "--locked"), ("resolve", "--locked", "--no-gpu"), ("status",)], ids=lambda c: c[0]
)
def test_a_forged_record_never_answers(
    locked: Path, cache_dir: Path, _state_home: Path, command: tuple[str, ...]
) -> None:
    """A record a cache writer forged (here: one naming a lock every full run refuses) is never replayed: the
    command runs in full and fails as the build does, instead of printing the old answer."""
    code, out, _ = warm(locked, *command)
    assert code == 0
    lock = locked / "kernels.lock"
    _undeclared_define(lock)
    assert _forge_records(cache_dir, lock, _state_home) >= 1
    code, out2, err, full = run(locked, *command)
    assert full and code == 2, (code, out2, err)
    assert "current and verified" not in out2 and out2 != out
    assert "tanhf is not a tunable parameter of silu_mul" in " ".join(err.split())


def test_status_replays_and_sees_every_change(locked: Path, cache_dir: Path) -> None:
    code, out, _ = warm(locked, "status")
    assert code == 0 and "locked" in out and "silu_mul" in out

    # a cache entry the answer read: the decision behind the lock is removed
    with Cache(cache_dir) as cache:
        keys = [e.key for e in cache.entries("decision")]
        assert keys
        for key in keys:
            cache.delete(key)
    code, out, _, full = run(locked, "status")
    assert full and code == 0
    assert not run(locked, "status")[3]

    # the manifest: a comment, blank lines or keys in another order change no answer (the record still answers);
    # a changed value is a change, though the full path finds the same answer for this one
    toml = locked / "kernels.toml"
    text = toml.read_text(encoding="utf-8")
    toml.write_text("# edited\n\n" + text + "\n# edited\n", encoding="utf-8")
    code, out2, _, full = run(locked, "status")
    assert not full and code == 0 and out2 == out
    assert "rtol = 1e-5" in text
    toml.write_text(text.replace("rtol = 1e-5", "rtol = 1.0e-5", 1), encoding="utf-8")  # the same number
    assert not run(locked, "status")[3]
    toml.write_text(text.replace('"float32"', "'float32'", 1), encoding="utf-8")  # the same string
    assert not run(locked, "status")[3]
    toml.write_text(text + "\n[bindings]\n", encoding="utf-8")  # an empty table more: another manifest
    code, out2, _, full = run(locked, "status")
    assert full and code == 0 and out2 == out
    assert not run(locked, "status")[3]  # recorded again

    # a file the lock's winner comes from
    source = locked / "kernels" / "silu_mul_vec4.cu"
    source.write_text(source.read_text(encoding="utf-8") + "\n// edited\n", encoding="utf-8")
    assert run(locked, "status")[3]
    assert not run(locked, "status")[3]

    # the lock
    lock = locked / "kernels.lock"
    saved = lock.read_bytes()
    lock.unlink()
    code, out3, _, full = run(locked, "status")
    assert full and "not locked" in out3
    lock.write_bytes(saved)
    assert run(locked, "status")[3]

    # the cache itself
    shutil.rmtree(cache_dir)
    assert run(locked, "status")[3]


def test_locked_resolve_fails_at_once_when_the_lock_goes_stale(locked: Path) -> None:
    code, out, _ = warm(locked, "resolve", "--locked", "--no-gpu")
    assert code == 0 and "silu_mul" in out
    # the tolerance is part of the decision key: the lock no longer answers the manifest
    toml = locked / "kernels.toml"
    text = toml.read_text(encoding="utf-8")
    assert "rtol = 1e-5" in text
    toml.write_text(text.replace("rtol = 1e-5", "rtol = 2e-5", 1), encoding="utf-8")
    code, _, err, full = run(locked, "resolve", "--locked", "--no-gpu")
    assert full and code == 2 and "silu_mul" in err


def test_check_locked_watches_the_references(locked: Path) -> None:
    code, out, _ = warm(locked, "check", "--locked")
    assert code == 0 and "current and verified" in out
    reference = locked / "kernels" / "reference.py"
    reference.write_text(
        reference.read_text(encoding="utf-8").replace(
            "def silu_mul(", "def silu_mul(*_a, **_k):\n    raise RuntimeError('broken')\n\n\ndef _old_silu_mul(", 1
        ),
        encoding="utf-8",
    )
    code, _, err, full = run(locked, "check", "--locked")
    assert full and code == 2 and "broken" in err


def test_output_and_failures_are_never_recorded_wrongly(locked: Path) -> None:
    # a failing command is not recorded: it runs in full every time
    lock = locked / "kernels.lock"
    lock.write_text("garbage = [\n", encoding="utf-8")
    first = run(locked, "resolve", "--locked", "--no-gpu")
    second = run(locked, "resolve", "--locked", "--no-gpu")
    assert first[0] == second[0] == 2 and first[3] and second[3]
    # a command that writes (resolve without --locked) is never answered from a record
    lock.unlink()
    for _ in range(2):
        code, _, _, full = run(locked, "resolve", "--offline", "--no-gpu")
        assert code == 0 and full


def test_nvcc_version_is_remembered_by_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which("nvcc")
    if real is None:
        pytest.skip("nvcc not installed")
    calls = tmp_path / "calls"
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\necho x >> {calls}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("R1BUILD_NVCC", str(wrapper))
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "cache"))
    code = "from r1build.toolchain.nvcc import toolchain; print(toolchain().ident)"
    idents = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        for _ in range(3)
    ]
    assert len(set(idents)) == 1 and idents[0].strip()
    assert calls.read_text().count("x") == 1  # one process ran nvcc; the others remembered it
    # another nvcc behind the same path (here: the wrapper rewritten) is asked again
    wrapper.write_text(
        f'#!/bin/sh\necho x >> {calls}\n[ "$1" = --version ] && {{ {real} --version; echo patched; '
        f'exit 0; }}\nexec {real} "$@"\n'
    )
    out = subprocess.run(
        [sys.executable, "-c", "from r1build.toolchain.nvcc import toolchain; print(toolchain().version_text)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "patched" in out and calls.read_text().count("x") == 2
    # a memo whose text does not match its digest is not used
    memo = tmp_path / "cache" / toolchain_mod.MEMO_NAME
    memo.write_text(memo.read_text().replace("patched", "tampered"))
    out = subprocess.run(
        [sys.executable, "-c", "from r1build.toolchain.nvcc import toolchain; print(toolchain().version_text)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "patched" in out and "tampered" not in out and calls.read_text().count("x") == 3


def test_a_secret_others_may_read_signs_nothing(locked: Path, _state_home: Path) -> None:
    """The secret that signs records is this user's alone: readable by others (a forger could sign with it), no
    record is replayed or stored; made private again, the records it signed replay."""
    warm(locked, "status")
    (secret,) = _state_home.rglob("*.key")
    assert secret.stat().st_mode & 0o777 == 0o600
    secret.chmod(0o644)
    assert run(locked, "status")[3] and run(locked, "status")[3]
    secret.chmod(0o600)
    assert not run(locked, "status")[3]


def test_a_new_unrelated_variable_still_replays(locked: Path) -> None:
    """A CI job's own variables (a new ``CI_JOB_ID`` every job) change no answer: the record still answers. A
    variable r1build or the toolchain lookup reads still runs the command in full."""
    code, out, _ = warm(locked, "resolve", "--locked", "--no-gpu")
    assert code == 0
    env = dict(os.environ, CI_JOB_ID="123", GITHUB_RUN_ID="456")
    code2, out2, _, full = run(locked, "resolve", "--locked", "--no-gpu", env=env)
    assert (code2, out2) == (code, out) and not full
    for name, value in (("R1BUILD_REFERENCE_TIMEOUT", "30"), ("CUDA_HOME", "/nonexistent-cuda")):
        assert run(locked, "resolve", "--locked", "--no-gpu", env=dict(env, **{name: value}))[3], name


def test_the_full_locked_path_imports_no_http_client(locked: Path) -> None:
    """The first run of ``resolve --locked`` (no record: a new r1build variable) never probes an endpoint, so it
    imports neither urllib's HTTP client nor the e-mail parser beneath it (12 ms of the full path), nor, without
    ``-v``, :mod:`logging` (~2.5 ms: nothing on the path logs what a user sees)."""
    env = dict(os.environ, R1BUILD_TEST_FIRST_RUN="1")
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "r1build.cli.main", "resolve", "--locked", "--no-gpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=locked,
        check=False,
    )
    imported = {line.rpartition("|")[2].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert proc.returncode == 0 and "r1build.manifest.load" in imported, proc.stderr[-2000:]
    assert not imported & {"urllib.request", "http.client", "email.parser", "ssl", "logging"}
    verbose = subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", "resolve", "--locked", "--no-gpu", "-vv"],
        capture_output=True,
        text=True,
        env=env,
        cwd=locked,
        check=False,
    )
    assert verbose.returncode == 0 and "DEBUG r1build.resolve: resolve:" in verbose.stderr, verbose.stderr[-2000:]


@pytest.mark.slow  # a lock (nvcc) and two processes under strace
@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace to count the syncs")
def test_a_first_run_syncs_the_cache_index_once_not_on_each_open_and_close(locked: Path, tmp_path: Path) -> None:
    """The full path of ``status`` (no record): the cache index's write-ahead log is made and checkpointed once
    (its other connections close while the recorder holds one), not on each open and close of a connection:
    at most 6 fsyncs (it was 12: each of 3 cycles made the log anew and checkpointed it, two syncs each)."""
    for edit in ("a", "b"):  # each on a new machine (no record answers): the full path
        counts = tmp_path / f"strace-{edit}.txt"
        strace = ["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", str(counts)]
        proc = subprocess.run(
            [*strace, sys.executable, "-m", "r1build.cli.main", "status", "-m", str(locked)],
            capture_output=True,
            text=True,
            env=dict(os.environ, XDG_STATE_HOME=str(tmp_path / f"state-{edit}")),
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        syncs = sum(
            int(m.group(1))
            for m in re.finditer(
                r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?f(?:data)?sync$", counts.read_text(), re.M
            )
        )
        assert 0 < syncs <= 6, counts.read_text()


def test_what_is_no_record_file_is_passed_over_at_once(_state_home: Path, tmp_path: Path) -> None:
    """A FIFO, a folder or a file too large where a record or the secret would be: no record (the command runs in
    full), and nothing blocks on it."""
    records = _state_home / "r1build" / "replay"
    records.mkdir(parents=True)
    cache = tmp_path / "cache"
    os.mkfifo(records / f"{'a' * 64}.json")
    (records / f"{'b' * 64}.json").mkdir()
    with open(records / f"{'c' * 64}.json", "wb") as f:  # noqa: PTH123
        f.truncate(fastpath._MOST_BYTES + 1)  # sparse: no disk used
    for key in ("a" * 64, "b" * 64, "c" * 64, "d" * 64):
        assert fastpath._load_record(cache, key) is None
    os.mkfifo(_state_home / "r1build" / "replay-record.key")  # where the secret would be: none, at once
    assert fastpath._secret(cache, create=True) is None


def test_a_pyproject_manifest_replays_after_an_edit_outside_its_table(tmp_path: Path, cache_dir: Path) -> None:
    """A manifest in ``[tool.r1build]`` of pyproject.toml: a new version of the project (the edit every release
    makes) changes no answer, so the record still answers; an edit inside the table is a change."""
    project = tmp_path / "tiny"
    shutil.copytree(ROOT / "tests" / "packages" / "tiny", project, ignore=shutil.ignore_patterns("__pycache__"))
    table = (project / "kernels.toml").read_text(encoding="utf-8")
    (project / "kernels.toml").unlink()
    table = table.replace('archs = ["sm_90"]', '[tool.r1build]\narchs = ["sm_90"]').replace(
        "[[kernel]]", "[[tool.r1build.kernel]]"
    )
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text(encoding="utf-8") + "\n" + table, encoding="utf-8")
    assert run(project, "lock", "--offline", "--no-gpu")[0] == 0
    code, out, _ = warm(project, "status")
    assert code == 0 and "scale" in out
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace('version = "0.1.0"', 'version = "0.2.0"'))
    code, out2, _, full = run(project, "status")
    assert not full and (code, out2) == (0, out)
    pyproject.write_text(pyproject.read_text(encoding="utf-8").replace("{ n = 97 }", "{ n = 98 }"))
    assert run(project, "status")[3]  # inside the table: the full path (the lock is stale now)


def test_holding_an_index_it_cannot_reach_holds_none(tmp_path: Path) -> None:
    """A cache folder whose index cannot even be looked at (a name longer than the file system takes; a folder
    this user may not search fails the same way, as root cannot show) holds no connection and raises nothing: the
    command then says what is wrong with the folder itself."""
    assert fastpath._hold(tmp_path / ("x" * 300)) is None
    assert fastpath._hold(tmp_path) is None  # no index there yet
