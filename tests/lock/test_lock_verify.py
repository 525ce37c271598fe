"""A lock is trusted only as far as every field verifies: each case of a tampered lock, through the real CLI.

The project (the ``locked`` fixture of conftest.py) is the root manifest narrowed to silu_mul on sm_90, locked by
`r1build lock` from a real cached decision (the hand-written vec4 file tuned with BLOCK=256, gated by the real
nvcc); each test edits the lock the way the issue's reports did. `check --locked`, `status` and `resolve --locked`
must refuse each edit with exit 2, naming the lock file, the entry and the field, and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from r1build.cli.main import main
from r1build.keys import digest_bytes, variant_digest
from r1build.lock import find_vendored, load_lock, read_lock
from r1build.manifest import load_manifest

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

VEC4 = "kernels/silu_mul_vec4.cu"


def _field(text: str, key: str) -> str:
    m = re.search(rf'^{key} = "([^"]*)"$', text, re.MULTILINE)
    assert m, key
    return m.group(1)


def _set(text: str, key: str, value: str) -> str:
    return re.sub(rf"^{key} = .*$", lambda _: f"{key} = {value}", text, count=1, flags=re.MULTILINE)


def _with_defines(text: str, toml_defines: str, defines: dict[str, int | str], *, fix_winner: bool) -> str:
    text = _set(text, "defines", toml_defines)
    if fix_winner:  # a careful forger recomputes the winner digest
        text = _set(text, "winner", f'"{variant_digest(_field(text, "source"), defines)}"')
    return text


INJECTED = "128\nmessage(WARNING pwned)"
FAKE_SOURCE = digest_bytes(b"__global__ void evil() {}\n")

Edit = Callable[[str], str]
CASES: list[tuple[str, Edit, str, str]] = [
    (
        "cmake-in-define",
        lambda t: _with_defines(t, '{ BLOCK = "128\\nmessage(WARNING pwned)" }', {"BLOCK": INJECTED}, fix_winner=True),
        "defines",
        "is not an integer, a numeric literal or an identifier",
    ),
    (
        "flag-in-define",
        lambda t: _with_defines(t, '{ BLOCK = "128 -DEVIL=1" }', {"BLOCK": "128 -DEVIL=1"}, fix_winner=True),
        "defines",
        "is not an integer, a numeric literal or an identifier",
    ),
    ("block-7", lambda t: _set(t, "defines", "{ BLOCK = 7 }"), "winner", "not the digest of the entry's source"),
    (
        "block-7-forged",
        lambda t: _with_defines(t, "{ BLOCK = 7 }", {"BLOCK": 7}, fix_winner=True),
        "defines",
        "BLOCK=7 is not one of the declared values [64, 128, 192, 256, 384, 512]",
    ),
    ("winner-zeros", lambda t: _set(t, "winner", '"' + "0" * 64 + '"'), "winner", "not the digest"),
    ("source-edited", lambda t: _set(t, "source", f'"{FAKE_SOURCE}"'), "winner", "not the digest"),
    (
        "source-forged",
        lambda t: _set(
            _set(t, "source", f'"{FAKE_SOURCE}"'), "winner", f'"{variant_digest(FAKE_SOURCE, {"BLOCK": 256})}"'
        ),
        "source",
        f"is not the digest of {VEC4}",
    ),
    ("arch", lambda t: _set(t, "arch", '"90"'), "arch", "not canonical"),
    ("gpu-newline", lambda t: _set(t, "gpu", '"H200\\n#error x"'), "gpu", "not one printable line"),
    ("time", lambda t: _set(t, "time-us", "-1.0"), "time-us", "not a positive time"),
    ("provenance", lambda t: _set(t, "provenance", '"file"'), "provenance", "'tuned' is a hand-written source"),
    ("origin", lambda t: _set(t, "origin", '"../../etc/passwd"'), "origin", "not a relative path"),
    # a claim of validation with nothing measured, a checks version from the future, a time past belief
    (
        "validated-unmeasured",
        lambda t: re.sub(r"^(time-us|gpu|speedup-vs-[a-z]+|share-of-floor|idle-gaps-us) = .*\n", "", t, flags=re.M),
        "validation",
        "a validated winner names the GPU that measured it (gpu) and its time (time-us)",
    ),
    ("checks-future", lambda t: _set(t, "checks", "9223372036854775807"), "checks", "is newer than this r1build's"),
    ("time-huge", lambda t: _set(t, "time-us", "9.2e18"), "time-us", "not a positive time of at most an hour"),
    (
        "inputs-misspelt",
        lambda t: t.replace("spec = ", "sqec = ", 1),
        "inputs",
        "is not a 16-character digest of a key part",
    ),
    (
        "inputs-cut",
        lambda t: re.sub(r", spec = \"[0-9a-f]{16}\"", "", t, count=1),
        "inputs",
        "not every key part",
    ),
]


@pytest.mark.parametrize(("edit", "field", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_locked_refuses_every_tampered_field(
    locked: Path, capsys: pytest.CaptureFixture[str], edit: Edit, field: str, message: str
) -> None:
    path = locked / "kernels.lock"
    assert main(["check", "--locked", "-m", str(locked)]) == 0
    assert "kernels.lock: current and verified" in capsys.readouterr().out
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    for command in (["check", "--locked"], ["status"], ["resolve", "--locked", "--no-gpu"]):
        assert main([*command, "-m", str(locked)]) == 2, command
        err = capsys.readouterr().err
        flat = " ".join(err.split())
        assert str(path) in flat and re.search(rf"kernel\[0\] \(silu_mul/(sm_)?90\)\.{field}:", flat), (command, err)
        assert message in flat and "r1build lock" in flat, (command, err)


def test_generated_winner_whose_source_is_nowhere_fails_check_locked(
    locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry consistent in itself (a generated winner, digests recomputed) whose source no cache, vendored
    folder or manifest file holds: `check --locked` fails as the locked build would."""
    path = locked / "kernels.lock"
    text = path.read_text(encoding="utf-8")
    for key in ("origin",):
        text = re.sub(rf"^{key} = .*\n", "", text, flags=re.MULTILINE)
    text = _set(_set(text, "provenance", '"generated"'), "source", f'"{FAKE_SOURCE}"')
    text = _set(text, "winner", f'"{variant_digest(FAKE_SOURCE, {"BLOCK": 256})}"')
    text = text.replace('provenance = "generated"', 'provenance = "generated"\nmodel = "deepseek-reasoner"')
    path.write_text(text, encoding="utf-8")
    code = main(["check", "--locked", "-m", str(locked), "--cache-dir", str(tmp_path / "empty")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 1 and f"names source {FAKE_SOURCE[:16]}, which is neither in the cache" in err, err


def test_committed_sample_lock_verifies_field_by_field() -> None:
    root = Path(__file__).resolve().parents[2] / "sample_project"
    m = load_manifest(root / "kernels.toml", check_references=False)
    lock = load_lock(m)
    assert lock is not None and any(e.defines for e in lock.kernel)


def test_lock_rebuilds_a_truncated_lock_and_others_name_it(locked: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = locked / "kernels.lock"
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.index("winner = ") + 20], encoding="utf-8")  # cut inside the winner digest
    capsys.readouterr()
    for command in (["status"], ["check"], ["resolve", "--offline", "--no-gpu"], ["lock", "--check"], ["vendor"]):
        assert main([*command, "-m", str(locked)]) == 2, command
        err = " ".join(capsys.readouterr().err.split())
        assert "kernels.lock" in err and "rebuild it with `r1build lock`" in err, (command, err)
    assert main(["lock", "-m", str(locked), "--offline", "--no-gpu"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "the lock cannot be used as it is" in err and "kernels.lock:6: dropped" in err, err
    assert path.read_text(encoding="utf-8") == text  # rebuilt from the cache: the same decision, the same bytes
    assert main(["check", "--locked", "-m", str(locked)]) == 0


def test_lock_resolves_a_merge_conflict_keeping_what_verifies(
    locked: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two branches locked silu_mul/sm_90 differently; git left conflict markers. With an empty cache, `r1build
    lock` keeps our verified entry (its source is the manifest's own file) and drops theirs, saying so."""
    import subprocess

    from r1build.lock import Lock, LockEntry
    from r1build.lock.lockfile import render_lock

    path = locked / "kernels.lock"
    ours = path.read_text(encoding="utf-8")
    mine = read_lock(path).entry("silu_mul", "sm_90")  # type: ignore[union-attr]
    assert mine is not None
    base_source = digest_bytes((locked / "kernels/silu_mul.cu").read_bytes())
    theirs_entry = LockEntry(
        name="silu_mul",
        arch="sm_90",
        key=mine.key,
        winner=base_source,
        source=base_source,
        provenance="baseline",
        validation="unvalidated",
        inputs=dict(mine.inputs),
        origin="kernels/silu_mul.cu",
        toolchain=mine.toolchain,
    )
    (tmp_path / "ours").write_text(ours, encoding="utf-8")
    (tmp_path / "base").write_text(render_lock(Lock(manifest="kernels.toml")), encoding="utf-8")
    (tmp_path / "theirs").write_text(render_lock(Lock(manifest="kernels.toml", kernel=[theirs_entry])), "utf-8")
    merged = subprocess.run(
        ["git", "merge-file", "-p", "ours", "base", "theirs"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert merged.returncode > 0 and "<<<<<<<" in merged.stdout, merged
    path.write_text(merged.stdout, encoding="utf-8")
    empty = ["--cache-dir", str(tmp_path / "empty-cache")]
    assert main(["check", "--locked", "-m", str(locked), *empty]) == 2
    assert "invalid TOML" in capsys.readouterr().err

    assert main(["lock", "-m", str(locked), "--offline", "--no-gpu", *empty]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"silu_mul/sm_90: kernels.lock: kept tuned winner {mine.winner[:12]}" in err, err
    assert f"silu_mul/sm_90: the other side of a merge conflict (winner {base_source[:12]})" in err, err
    assert path.read_text(encoding="utf-8") == ours
    assert main(["check", "--locked", "-m", str(locked), *empty]) == 0


STALE_KEY = '"' + "5" * 64 + '"'  # a key no manifest makes: the entry is stale, which --frozen tolerates
FROZEN_CASES: list[tuple[str, Edit, str, str]] = [
    (
        "undeclared-define",
        lambda t: _with_defines(t, '{ BLOCK = 256, tanhf = "sinf" }', {"BLOCK": 256, "tanhf": "sinf"}, fix_winner=True),
        "defines",
        "tanhf is not a tunable parameter of silu_mul (declared: BLOCK, UNROLL)",
    ),
    CASES[3][:1] + CASES[3][1:],  # block-7-forged: a declared tunable, a value it does not allow
    (
        "source-forged",
        lambda t: _set(
            _set(t, "source", f'"{FAKE_SOURCE}"'), "winner", f'"{variant_digest(FAKE_SOURCE, {"BLOCK": 256})}"'
        ),
        "source",
        f"is not the digest of {VEC4}",
    ),
    (
        "origin-not-declared",
        lambda t: _set(t, "origin", '"kernels/silu_mul_other.cu"'),
        "origin",
        "is neither the baseline nor a candidate file of silu_mul",
    ),
]


@pytest.mark.parametrize(("edit", "field", "message"), [c[1:] for c in FROZEN_CASES], ids=[c[0] for c in FROZEN_CASES])
def test_frozen_still_verifies_every_field_of_a_stale_entry(
    locked: Path, capsys: pytest.CaptureFixture[str], edit: Edit, field: str, message: str
) -> None:
    """Frozen uses a stale entry as it is, never one whose fields the manifest contradicts: `check --frozen`,
    `resolve --frozen` and `vendor --frozen` refuse it with exit 2, naming the entry and the field."""
    path = locked / "kernels.lock"
    path.write_text(_set(path.read_text(encoding="utf-8"), "key", STALE_KEY), encoding="utf-8")
    assert main(["check", "--frozen", "-m", str(locked)]) == 0  # a stale key alone: used as it is
    assert "used as it is" in capsys.readouterr().out
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")
    for command in (["check", "--frozen"], ["resolve", "--frozen", "--no-gpu"], ["vendor", "--frozen"]):
        assert main([*command, "-m", str(locked)]) == 2, command
        captured = capsys.readouterr()
        flat = " ".join(captured.err.split())
        assert "verified" not in captured.out, (command, captured.out)
        assert str(path) in flat and re.search(rf"kernel\[0\] \(silu_mul/sm_90\)\.{field}:", flat), (command, flat)
        assert message in flat and "Traceback" not in flat, (command, flat)


def test_frozen_refuses_a_key_naming_another_kernels_decision(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stale key is tolerated by --frozen, but the key still has to be this entry's: one that names the cached
    decision of another kernel × arch (here sm_80's) is refused, never read as this entry's verdict."""
    from dataclasses import replace

    from r1build.cache import Cache

    path = locked / "kernels.lock"
    entry = read_lock(path).entry("silu_mul", "sm_90")  # type: ignore[union-attr]
    assert entry is not None
    other = "6" * 64
    with Cache(cache_dir) as cache:
        decision = cache.get_decision(entry.key)
        assert decision is not None
        cache.put_decision(replace(decision, key=other, arch="sm_80"))
    path.write_text(_set(path.read_text(encoding="utf-8"), "key", f'"{other}"'), encoding="utf-8")
    capsys.readouterr()
    for command in (["check", "--frozen"], ["resolve", "--frozen", "--no-gpu"]):
        assert main([*command, "-m", str(locked)]) == 2, command
        captured = capsys.readouterr()
        flat = " ".join(captured.err.split())
        assert "verified" not in captured.out, (command, captured.out)
        assert f"{path}: silu_mul/sm_90: key {other[:16]} names the cached decision of silu_mul/sm_80" in flat, (
            command,
            flat,
        )


def _sample_copy(tmp_path: Path) -> Path:
    import shutil

    root = Path(__file__).resolve().parents[2] / "sample_project"
    copy = tmp_path / "sample"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", ".r1build"))
    return copy


def test_a_lock_names_its_manifest_by_file_name_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project = _sample_copy(tmp_path)
    lock = project / "kernels.lock"
    for bad in ("../kernels.toml", "/etc/kernels.toml"):
        lock.write_text(_set(lock.read_text(encoding="utf-8"), "manifest", f'"{bad}"'), encoding="utf-8")
        assert main(["check", "--locked", "-m", str(project), "--cache-dir", str(tmp_path / "c")]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"manifest = {bad!r} is not a file name" in err, err


def test_a_vendored_winner_that_is_a_link_is_not_used(tmp_path: Path) -> None:
    """`r1build vendor` writes files: a link in the vendored folder (here to the same bytes outside the project) is
    no vendored source, whatever it points to."""
    project = _sample_copy(tmp_path)
    folder = project / "kernels" / "_r1build"
    vendored = sorted(folder.glob("matmul_tiled__*.cu"))[0]
    digest = digest_bytes(vendored.read_bytes())
    assert find_vendored(folder, "matmul_tiled", digest) == vendored.read_text(encoding="utf-8")
    outside = tmp_path / "elsewhere.cu"
    outside.write_bytes(vendored.read_bytes())
    vendored.unlink()
    vendored.symlink_to(outside)
    assert find_vendored(folder, "matmul_tiled", digest) is None
