"""Bad command-line input and bad settings from the environment: exit 2, a message naming the flag or variable,
never a traceback, and nothing of the user's replaced. Each case here once failed: a traceback (a header with a
line break, a size beyond SQLite's integers, a path with a name too long for any file system), exit 1 (an
R1BUILD_NVCC naming no nvcc), a misleading error (an arch the manifest lacks blamed on the manifest's archs for
/bin/true), a silent no-op (``--arch`` of an arch no kernel targets, ``--arch ""``), a whole resolve before
refusing ``--out`` naming a file (or a folder under a file), or a device replaced by a plain file
(``cache export /dev/null`` as root)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main

from ..manifest.test_manifest_strict import write_project

OFFLINE = ["--offline", "--no-gpu"]
DIGEST = "ab" * 32
LONG = "@P/" + "x" * 300
"""A path with a name longer than any file system takes: pathlib's ``exists`` and ``is_file`` raise for it."""
TOO_LONG = "is not a usable path: a name in it is 300 bytes long, over the 255 a file system allows"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The small valid project of the manifest tests (sm_90 only), with a cache of its own and no settings."""
    for var in ("R1BUILD_NVCC", "CUDACXX", "R1BUILD_REMOTE_CACHE", "R1BUILD_CLUSTER", "R1BUILD_LOCKED"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "cache"))
    root = write_project(tmp_path / "p").parent
    (root / "notes.txt").write_text("mine\n", encoding="utf-8")
    return root


# (id, argv with @P for the project, environment, a fragment of the error)
CASES: list[tuple[str, list[str], dict[str, str], str]] = [
    ("arch-untargeted", ["resolve", "--arch", "sm_80", *OFFLINE], {}, "--arch sm_80: no kernel targets it"),
    ("arch-untargeted-lock", ["lock", "--arch", "sm_80", *OFFLINE], {}, "(targeted: sm_90)"),
    ("arch-untargeted-kernel", ["resolve", "--kernel", "scale", "--arch", "sm_80", *OFFLINE], {}, "none of scale"),
    ("arch-empty", ["resolve", "--arch", "", *OFFLINE], {}, "--arch: no arch given"),
    ("arch-commas", ["resolve", "--arch", ",", *OFFLINE], {}, "--arch: no arch given"),
    ("out-is-a-file", ["resolve", *OFFLINE, "--out", "@P/notes.txt"], {}, "notes.txt is not a folder"),
    ("nvcc-missing", ["resolve", *OFFLINE], {"R1BUILD_NVCC": "@P/no-nvcc"}, "R1BUILD_NVCC=@P/no-nvcc names no usable"),
    ("nvcc-a-folder", ["resolve", *OFFLINE], {"R1BUILD_NVCC": "@P"}, "R1BUILD_NVCC=@P names no usable nvcc"),
    ("nvcc-not-nvcc", ["resolve", *OFFLINE], {"R1BUILD_NVCC": "/bin/true"}, "/bin/true is not nvcc"),
    ("cudacxx-failing", ["check", "--locked"], {"CUDACXX": "/bin/false"}, "CUDACXX=/bin/false names no usable"),
    ("remote-env", ["status"], {"R1BUILD_REMOTE_CACHE": "ftp://x"}, "R1BUILD_REMOTE_CACHE: 'ftp://x' is not"),
    ("remote-flag", ["status", "--remote-cache", "gopher://x"], {}, "--remote-cache: 'gopher://x' is not"),
    ("cluster-env", ["resolve", *OFFLINE], {"R1BUILD_CLUSTER": "nohost"}, "R1BUILD_CLUSTER: 'nohost' names no port"),
    ("cluster-flag", ["resolve", *OFFLINE, "--cluster", "udp://h:1"], {}, "--cluster: 'udp://h:1'"),
    (
        "header-line-break",
        ["status"],
        {"R1BUILD_REMOTE_CACHE": "http://127.0.0.1:9", "R1BUILD_REMOTE_HEADER": "X-A: a\r\nX-B: b"},
        "R1BUILD_REMOTE_HEADER must be one header",
    ),
    (
        "header-not-latin1",
        ["status"],
        {"R1BUILD_REMOTE_CACHE": "http://127.0.0.1:9", "R1BUILD_REMOTE_HEADER": "X-A: \u2603"},
        "R1BUILD_REMOTE_HEADER must be one header",
    ),
    (
        "token-line-break",
        ["status"],
        {"R1BUILD_REMOTE_CACHE": "http://127.0.0.1:9", "R1BUILD_REMOTE_TOKEN": "abc\ndef"},
        "R1BUILD_REMOTE_TOKEN must be one printable word",
    ),
    ("gc-size-huge", ["cache", "gc", "--max-size", "9" * 30 + "T"], {}, "the size must be below 8 EiB"),
    ("gc-size-inf", ["cache", "gc", "--max-size", "9" * 400], {}, "the size must be below 8 EiB"),
    ("gc-size-unicode", ["cache", "gc", "--max-size", "\uff11G"], {}, "is not a size"),
    ("gc-size-bytes", ["cache", "gc", "--max-size", "1"], {}, "'1' is 1 B: a limit below 64.0 KiB holds nothing"),
    ("gc-size-no-unit", ["cache", "gc", "--max-size", "2"], {}, "a number without a unit is bytes: did you mean 2G?"),
    ("gc-size-small", ["cache", "gc", "--max-size", "10K"], {}, "'10K' is 10.0 KiB: a limit below 64.0 KiB"),
    ("replay-not-a-digest", ["replay", "scale", "--transcript", "zzz"], {}, "--transcript 'zzz' is not a transcript"),
    ("generate-untargeted", ["generate", "scale", "--arch", "sm_80"], {}, "--arch sm_80: scale does not target it"),
    ("replay-untargeted", ["replay", "scale", "--arch", "sm_80"], {}, "(its archs: sm_90)"),
    ("lock-check-refresh", ["lock", "--check", "--refresh"], {}, "--check writes nothing and --refresh judges"),
    ("lock-check-kernel", ["lock", "--check", "--kernel", "nope"], {}, "unknown kernel(s): nope (declared: scale)"),
    ("lock-check-arch", ["lock", "--check", "--arch", "bogus"], {}, "--arch: 'bogus' is not a GPU architecture"),
    ("out-empty", ["resolve", *OFFLINE, "--out", ""], {}, "argument --out: an empty path"),
    ("cache-dir-empty", ["status", "--cache-dir", ""], {}, "argument --cache-dir: an empty path"),
    ("report-empty", ["report", "-o", ""], {}, "argument -o/--output: an empty path"),
    ("out-under-a-file", ["resolve", *OFFLINE, "--out", "@P/notes.txt/gen"], {}, "notes.txt is a file, not a"),
    ("cache-dir-too-long", ["status", "--cache-dir", LONG], {}, TOO_LONG),
    ("repair-cache-dir-too-long", ["cache", "repair", "--cache-dir", LONG], {}, TOO_LONG),
    ("out-too-long", ["resolve", *OFFLINE, "--out", LONG], {}, TOO_LONG),
    ("report-too-long", ["report", "-o", LONG], {}, TOO_LONG),
    ("dataset-too-long", ["export-dataset", "-o", LONG], {}, TOO_LONG),
    ("env-cache-dir-too-long", ["status"], {"R1BUILD_CACHE_DIR": LONG}, TOO_LONG),
    ("doctor-cache-dir-too-long", ["doctor"], {"R1BUILD_CACHE_DIR": LONG}, TOO_LONG),
    ("flag-typo", ["check", "--lockd"], {}, "unrecognized arguments: --lockd (did you mean '--locked'?)"),
    ("flag-typo-value", ["resolve", "--ofline=1"], {}, "(did you mean '--offline'?)"),
    ("flag-typo-subcommand", ["cache", "gc", "--max-sise", "1G"], {}, "(did you mean '--max-size'?)"),
]


@pytest.mark.parametrize(("argv", "env", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_arguments_and_settings_are_exit_2_naming_them(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    env: dict[str, str],
    fragment: str,
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value.replace("@P", str(project)))
    code = main([*(a.replace("@P", str(project)) for a in argv), "-m", str(project)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert fragment.replace("@P", str(project)) in err, err
    assert (project / "notes.txt").read_text(encoding="utf-8") == "mine\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["cache", "export", "@F"],
        ["report", "-o", "@F", "-m", "@P"],
        ["export-dataset", "-o", "@F", "-m", "@P"],
        ["key", "generate", "--out", "@F", "--force"],
    ],
    ids=["bundle", "report", "dataset", "key"],
)
def test_what_r1build_writes_never_replaces_a_fifo_or_device(
    project: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Written to a temporary file renamed over the path: a FIFO (as /dev/null or /dev/stdout for root) would be
    replaced by a plain file."""
    with Cache(Path(os.environ["R1BUILD_CACHE_DIR"])) as cache:
        cache.put_text("an entry to export")
    fifo = project / "pipe"
    os.mkfifo(fifo)
    assert main([a.replace("@F", str(fifo)).replace("@P", str(project)) for a in argv]) == 2
    assert f"{fifo} is not a regular file (a device, a FIFO or a socket)" in capsys.readouterr().err
    assert fifo.is_fifo()


def test_check_refuses_an_arch_the_nvcc_in_use_lacks(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check` said ok to archs nvcc does not compile for (sm_70 on CUDA 13; sm_99 on any), which every resolve
    and build then refused."""
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('archs = ["sm_90"]', 'archs = ["sm_90", "sm_99"]'))
    assert main(["check", "-m", str(project)]) == 2
    err = capsys.readouterr().err
    assert f"error: {toml}:1: archs[1]: sm_99 is not supported by the installed CUDA: nvcc " in err, err


def test_cache_import_refuses_a_fifo_or_device_without_reading_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """zipfile would block opening a FIFO and read /dev/zero until memory ran out (a MemoryError traceback)."""
    fifo = project / "pipe"
    os.mkfifo(fifo)

    def unblock() -> None:  # so that a regression fails the test instead of hanging it
        with fifo.open("wb"):
            pass

    timer = threading.Timer(10, unblock)
    timer.daemon = True
    timer.start()
    started = time.monotonic()
    try:
        assert main(["cache", "import", str(fifo)]) == 2
    finally:
        timer.cancel()
    assert time.monotonic() - started < 5
    assert f"{fifo}: not a readable bundle (not a regular file" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "export-dataset"])
@pytest.mark.parametrize("target", ["kernels.toml", "reference.py", "scale.cu", "kernels.lock", "@C/cache.db"])
def test_an_output_never_replaces_the_project_or_the_cache(
    project: Path, capsys: pytest.CaptureFixture[str], command: str, target: str
) -> None:
    """``report -o kernels.toml`` replaced the manifest with the HTML page (and ``export-dataset -o kernels.lock``
    the lock with JSON lines), exit 0; so did an output into the cache folder (its index)."""
    cache_dir = Path(os.environ["R1BUILD_CACHE_DIR"])
    with Cache(cache_dir) as cache:
        cache.put_text("an entry")
    (project / "kernels.lock").write_text("# a lock of mine\n", encoding="utf-8")
    path = Path(target.replace("@C", str(cache_dir))) if target.startswith("@C") else project / target
    before = path.read_bytes()
    assert main([command, "-m", str(project), "-o", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--output {path}: that is " in err, err
    assert "Traceback" not in err
    if target.startswith("@C"):  # the command reads the cache, which changes its index: still the cache
        with Cache(cache_dir) as cache:
            assert len(cache.entries()) == 1
    else:
        assert path.read_bytes() == before
