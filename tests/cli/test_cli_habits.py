"""The CLI's habits from uv, cargo and ccache: --frozen, R1BUILD_LOCKED / R1BUILD_FROZEN, the manifest found from a
subfolder, -v / -q anywhere, cache dir / clean / prune, and --json on the commands that report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from r1build.build import KERNELS_DEFINE, kernel_settings, prepare_kernels
from r1build.build.editable import refresh, write_editable
from r1build.cache import Cache
from r1build.cache.prune import prune_cache
from r1build.cli.main import build_parser, main, output_options
from r1build.errors import ConfigError, StaleLockError, UsageError
from r1build.lock import read_lock
from r1build.records import ResolveOptions

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

STALE_FROM = 'description = "out[i] = silu'
STALE_TO = 'description = "Changed: out[i] = silu'


def _make_stale(project: Path) -> None:
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace(STALE_FROM, STALE_TO, 1), encoding="utf-8")
    assert main(["lock", "--check", "-m", str(project)]) == 1


def test_frozen_uses_a_stale_lock_as_it_is(locked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (locked / "kernels.lock").read_bytes()
    _make_stale(locked)
    capsys.readouterr()
    assert main(["resolve", "--locked", "--no-gpu", "-m", str(locked)]) == 2
    assert "silu_mul" in capsys.readouterr().err

    assert main(["resolve", "--frozen", "--no-gpu", "--json", "-m", str(locked)]) == 0
    doc = json.loads(capsys.readouterr().out)
    lock = read_lock(locked / "kernels.lock")
    entry = lock.entry("silu_mul", "sm_90") if lock is not None else None
    assert entry is not None
    assert [(k["kernel"], k["state"], k["winner"]) for k in doc["kernels"]] == [
        ("silu_mul", "locked", entry.winner[:12])
    ]
    assert doc["lock_changed"] is False
    assert (locked / "kernels.lock").read_bytes() == before

    out = locked / "generated"
    assert main(["resolve", "--frozen", "--no-gpu", "--out", str(out), "-m", str(locked)]) == 0
    assert list(out.glob("*.cmake"))
    assert main(["resolve", "--frozen", "--locked", "-m", str(locked)]) == 2


def test_a_frozen_build_and_check_use_a_stale_lock_as_it_is(
    locked: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = read_lock(locked / "kernels.lock")
    entry = lock.entry("silu_mul", "sm_90") if lock is not None else None
    assert entry is not None
    _make_stale(locked)
    with pytest.raises(StaleLockError):
        kernel_settings({"r1build.locked": "1"}, locked)
    rest = kernel_settings({"r1build.frozen": "1"}, locked)
    generated = Path(str(rest[KERNELS_DEFINE])).parent
    # the lock's winner, its BLOCK=256 define and all, not the manifest's stale wish
    sources = [p.read_text(encoding="utf-8") for p in generated.rglob("silu_mul__*.cu")]
    assert [f"variant {entry.winner}" in text for text in sources] == [True]
    monkeypatch.setenv("R1BUILD_FROZEN", "1")
    assert kernel_settings({}, locked)[KERNELS_DEFINE] == rest[KERNELS_DEFINE]
    with pytest.raises(ConfigError, match="choose one"):
        kernel_settings({"r1build.locked": "1", "r1build.frozen": "1"}, locked)
    capsys.readouterr()
    assert main(["check", "--json", "-m", str(locked)]) == 0  # R1BUILD_FROZEN: used as it is
    assert json.loads(capsys.readouterr().out)["lock"] == {
        "current": None,
        "verified": True,
        "frozen": True,
        "stale": [],
    }
    monkeypatch.delenv("R1BUILD_FROZEN")
    assert main(["check", "--frozen", "-m", str(locked)]) == 0
    assert "used as it is" in capsys.readouterr().out
    assert main(["check", "--locked", "-m", str(locked)]) == 2
    assert main(["check", "--locked", "--frozen", "-m", str(locked)]) == 2
    assert "choose one" in capsys.readouterr().err
    # a winner that no longer matches its digest is found even when frozen: entries are still verified
    assert main(["vendor", "--frozen", "-m", str(locked)]) == 0
    (locked / "kernels.lock").write_text(
        (locked / "kernels.lock").read_text(encoding="utf-8").replace(entry.winner, "0" * 64), encoding="utf-8"
    )
    capsys.readouterr()
    assert main(["check", "--frozen", "-m", str(locked)]) == 2
    assert "Traceback" not in capsys.readouterr().err


def test_an_editable_install_keeps_frozen(locked: Path) -> None:
    """An editable install refreshes on import with its build's options: a frozen one goes on using the stale
    lock as it is, where a locked one would fail."""
    lock = read_lock(locked / "kernels.lock")
    entry = lock.entry("silu_mul", "sm_90") if lock is not None else None
    assert entry is not None
    cmake_file = prepare_kernels(locked, ResolveOptions(frozen=True))
    write_editable(locked, ResolveOptions(frozen=True), cmake_file)
    _make_stale(locked)
    refreshed = refresh(locked)
    sources = [p.read_text(encoding="utf-8") for p in refreshed.parent.rglob("silu_mul__*.cu")]
    assert [f"variant {entry.winner}" in text for text in sources] == [True]
    write_editable(locked, ResolveOptions(locked=True), cmake_file)
    with pytest.raises(StaleLockError):
        refresh(locked)


def test_frozen_without_a_lock_or_an_entry_is_an_error(locked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    toml = locked / "kernels.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace('archs = ["sm_90"]', 'archs = ["sm_80", "sm_90"]', 1), encoding="utf-8"
    )
    capsys.readouterr()
    assert main(["resolve", "--frozen", "-m", str(locked)]) == 2
    assert "silu_mul/sm_80: --frozen and kernels.lock has no entry for it" in capsys.readouterr().err
    (locked / "kernels.lock").unlink()
    assert main(["resolve", "--frozen", "-m", str(locked)]) == 2
    assert "--frozen uses" in capsys.readouterr().err
    assert not (locked / "kernels.lock").exists()


def test_the_environment_sets_locked_and_frozen(
    locked: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = (locked / "kernels.lock").read_bytes()
    _make_stale(locked)
    monkeypatch.setenv("R1BUILD_LOCKED", "1")
    capsys.readouterr()
    assert main(["resolve", "--no-gpu", "-m", str(locked)]) == 2
    assert main(["lock", "-m", str(locked)]) == 2
    assert main(["check", "-m", str(locked)]) == 2  # check verifies the lock as --locked does
    assert (locked / "kernels.lock").read_bytes() == before
    # every command that reports from the lock refuses a stale one, naming it; doctor calls it an error
    for argv in (
        ["status"],
        ["report", "-o", str(locked / "report.html")],
        ["export-dataset", "-o", str(locked / "set.jsonl")],
        ["vendor"],
        ["cache", "verify", "--remote", "--remote-cache", "http://127.0.0.1:9/team"],  # refused before any request
    ):
        assert main([*argv, "-m", str(locked)]) == 2, argv
        err = capsys.readouterr().err
        assert "kernels.lock is out of date" in err and "silu_mul" in err and "Traceback" not in err, argv
    assert not (locked / "report.html").exists() and not (locked / "set.jsonl").exists()
    assert main(["doctor", "--json", "-m", str(locked)]) == 1
    findings = {f["name"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert findings["lock"]["level"] == "error" and "R1BUILD_LOCKED" in findings["lock"]["detail"]
    assert (locked / "kernels.lock").read_bytes() == before
    monkeypatch.delenv("R1BUILD_LOCKED")
    assert main(["status", "--locked", "-m", str(locked)]) == 2  # the flag, without the variable
    assert main(["status", "-m", str(locked)]) == 0
    assert main(["report", "--locked", "-o", str(locked / "report.html"), "-m", str(locked)]) == 2
    assert main(["export-dataset", "--locked", "-o", str(locked / "set.jsonl"), "-m", str(locked)]) == 2
    assert main(["doctor", "--json", "-m", str(locked)]) == 0
    monkeypatch.setenv("R1BUILD_LOCKED", "1")
    monkeypatch.setenv("R1BUILD_FROZEN", "1")  # frozen over a locked from the environment
    assert main(["resolve", "--no-gpu", "-m", str(locked)]) == 0
    assert main(["vendor", "-m", str(locked)]) == 0
    assert main(["status", "-m", str(locked)]) == 0
    assert main(["report", "-o", str(locked / "report.html"), "-m", str(locked)]) == 0
    capsys.readouterr()
    assert main(["doctor", "--json", "-m", str(locked)]) == 0
    findings = {f["name"]: f for f in json.loads(capsys.readouterr().out)["findings"]}
    assert findings["lock"]["level"] == "note" and "R1BUILD_FROZEN" in findings["lock"]["detail"]
    assert list((locked / "kernels" / "_r1build").glob("silu_mul__*.cu"))
    capsys.readouterr()
    assert main(["lock", "--no-gpu", "-m", str(locked)]) == 2
    assert "R1BUILD_FROZEN is set: frozen runs never write the lock" in capsys.readouterr().err
    assert main(["resolve", "--refresh", "-m", str(locked)]) == 2
    assert "--frozen (or R1BUILD_FROZEN) uses the lock as it is" in capsys.readouterr().err
    monkeypatch.setenv("R1BUILD_FROZEN", "maybe")
    assert main(["resolve", "-m", str(locked)]) == 2
    assert "R1BUILD_FROZEN must be one of" in capsys.readouterr().err
    monkeypatch.delenv("R1BUILD_FROZEN")
    monkeypatch.delenv("R1BUILD_LOCKED")
    assert main(["resolve", "--no-gpu", "-m", str(locked)]) == 0  # neither: the stale entry is decided again
    assert (locked / "kernels.lock").read_bytes() != before


def test_the_manifest_is_found_from_a_subfolder(
    locked: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = locked / "src" / "deep"
    deep.mkdir(parents=True)
    # a pyproject.toml without [tool.r1build] on the way up is not the manifest
    (locked / "src" / "pyproject.toml").write_text('[project]\nname = "x"\n', encoding="utf-8")
    monkeypatch.chdir(deep)
    capsys.readouterr()
    assert main(["status", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["manifest"] == str(locked / "kernels.toml")
    # an explicit folder is that folder only
    assert main(["status", "-m", str(deep)]) == 2
    assert "no kernels.toml" in capsys.readouterr().err


def test_nothing_above_says_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert f"in {tmp_path} or any folder above it" in err and "Traceback" not in err


def test_verbose_and_quiet_after_the_subcommand(locked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _make_stale(locked)
    capsys.readouterr()
    assert main(["resolve", "--no-gpu", "-m", str(locked), "-v"]) == 0
    loud = capsys.readouterr().err
    assert "gate silu_mul/sm_90" in loud  # stage lines show with -v
    _make_stale_again(locked)
    assert main(["resolve", "-q", "--no-gpu", "-m", str(locked)]) == 0
    captured = capsys.readouterr()
    assert "gate silu_mul/sm_90" not in captured.err
    assert "silu_mul" in captured.out  # results still show
    assert main(["-v", "status", "-q", "-m", str(locked)]) == 2
    assert "choose one" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        (["status"], (0, False)),
        (["-v", "resolve", "-v"], (2, False)),
        (["resolve", "-vv"], (2, False)),
        (["-v", "cache", "-v", "ls", "-v"], (3, False)),
        (["cache", "ls", "--verbose", "-q"], None),
        (["-q", "cache", "ls"], (0, True)),
        (["cache", "-q", "ls", "-q"], (0, True)),
    ],
)
def test_verbose_counts_wherever_it_is_given(argv: list[str], level: tuple[int, bool] | None) -> None:
    args = build_parser().parse_args(argv)
    if level is None:
        with pytest.raises(UsageError, match="choose one"):
            output_options(args)
        return
    assert output_options(args) == level
    assert (args.verbose, args.quiet) == level


def _make_stale_again(project: Path) -> None:
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace("Changed: ", "Changed again: ", 1), encoding="utf-8")


def test_cache_dir_clean_and_prune(locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["cache", "dir"]) == 0
    assert capsys.readouterr().out.strip() == str(cache_dir)
    assert main(["cache", "dir", "--cache-dir", str(locked / "elsewhere")]) == 0
    assert capsys.readouterr().out.strip() == str(locked / "elsewhere")

    with Cache(cache_dir) as cache:
        orphan = cache.put_text("// a blob no record names\n")
        decisions = [e.key for e in cache.entries("decision")]
        named = [e.key for e in cache.entries("blob")]
    assert decisions and named
    # a blob younger than an hour is kept (a resolve may be about to store the decision that names it)
    assert main(["cache", "prune", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blobs"] == 0
    with Cache(cache_dir) as cache:
        pruned = prune_cache(cache, now=time.time() + 7200)
        assert pruned.blobs == 1
        assert cache.get_blob(orphan) is None
        assert all(cache.peek(k) is not None for k in decisions + named if not k.endswith(orphan))
    assert main(["resolve", "--locked", "--no-gpu", "-m", str(locked)]) == 0  # what the lock needs is still there
    capsys.readouterr()

    assert main(["cache", "clean", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["entries"] >= 2 and doc["directory"] == str(cache_dir)
    with Cache(cache_dir) as cache:
        assert cache.entries() == []
    assert main(["cache", "clean", "--cache-dir", str(locked / "nothing-here")]) == 2  # no cache: said, not made
    assert not (locked / "nothing-here").exists()


def test_json_on_every_command_that_reports(locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()

    def doc(argv: list[str], code: int = 0) -> dict[str, object]:
        assert main(argv) == code, capsys.readouterr()
        out = capsys.readouterr().out
        parsed: dict[str, object] = json.loads(out)
        return parsed

    checked = doc(["check", "--locked", "--json", "-m", str(locked)])
    assert checked["kernels"] == ["silu_mul"]
    assert checked["lock"] == {"current": True, "verified": True, "frozen": False, "stale": []}
    vendored = doc(["vendor", "--json", "-m", str(locked)])
    paths = vendored["vendored"]
    assert isinstance(paths, list)
    assert [Path(str(p)).name.startswith("silu_mul__") for p in paths] == [True]
    assert doc(["cache", "verify", "--json"])["problems"] == []
    assert "evicted" in doc(["cache", "gc", "--json"])
    bundle = tmp_path / "team.r1b"
    exported = doc(["cache", "export", str(bundle), "--json"])
    assert exported["entries"]["decision"] == 1 and exported["signed_by"] is None  # type: ignore[index]
    imported = doc(["cache", "import", str(bundle), "--json", "--cache-dir", str(tmp_path / "other")])
    assert len(imported["added"]) == exported["total"]  # type: ignore[arg-type]
    _make_stale(locked)
    capsys.readouterr()
    stale = doc(["check", "--json", "-m", str(locked)])
    assert stale["lock"]["current"] is False and stale["lock"]["stale"]  # type: ignore[index]


def test_lock_and_resolve_out_keep_json_output_one_document(
    locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lock --json``, ``lock --check --json`` and ``resolve --out DIR --json`` print one JSON document on stdout,
    with no human line before or after it."""
    capsys.readouterr()

    def doc(argv: list[str], code: int = 0) -> dict[str, object]:
        assert main(argv) == code
        parsed: dict[str, object] = json.loads(capsys.readouterr().out)
        return parsed

    assert doc(["lock", "--no-gpu", "--json", "-m", str(locked)])["lock_changed"] is False
    assert doc(["lock", "--check", "--json", "-m", str(locked)]) == {
        "lock": str(locked / "kernels.lock"),
        "current": True,
        "stale": [],
    }
    out = tmp_path / "generated"
    resolved = doc(["resolve", "--locked", "--no-gpu", "--out", str(out), "--json", "-m", str(locked)])
    assert resolved["generated"] == str(out / "r1build_kernels.cmake") and (out / "r1build_kernels.cmake").is_file()
    _make_stale(locked)
    capsys.readouterr()
    stale = doc(["lock", "--check", "--json", "-m", str(locked)], code=1)
    assert stale["current"] is False and stale["stale"]


def test_check_says_contradictory_lock_flags_before_running_references_and_counts_in_english(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from r1build.cli.main import main

    project = tmp_path / "tiny"
    shutil.copytree(Path(__file__).resolve().parents[1] / "packages" / "tiny", project)
    assert main(["check", "--locked", "--frozen", "-m", str(project)]) == 2
    out = capsys.readouterr()
    assert ": ok," not in out.out + out.err  # said at once, not after every reference ran and was reported ok
    assert main(["check", "-m", str(project)]) == 0
    assert ": ok, 1 kernel (scale) for sm_90;" in capsys.readouterr().out
