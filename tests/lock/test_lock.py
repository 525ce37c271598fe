"""kernels.lock: deterministic rendering, round trip, staleness reasons, corrupt locks."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from r1build.errors import LockError, StaleLockError
from r1build.keys import decision_key
from r1build.lock import Lock, LockEntry, check_lock, load_lock, read_lock, require_fresh, write_lock
from r1build.lock.lockfile import LOCK_VERSION, inputs_of, render_lock
from r1build.manifest import Manifest, load_manifest


def _lock_for(m: Manifest) -> Lock:
    entries = []
    for spec in m.kernels:
        for arch in m.archs_of(spec):
            entries.append(
                LockEntry(
                    name=spec.name,
                    arch=arch,
                    key=decision_key(m, spec, arch),
                    winner="b" * 64,
                    source="b" * 64,
                    provenance="baseline",
                    validation="unvalidated",
                    inputs=inputs_of(m, spec),
                    origin=spec.baseline,
                    toolchain="cuda_13.0",
                )
            )
    return Lock(manifest=m.path.name, kernel=list(reversed(entries)))


def test_round_trip_and_determinism(root_copy: Path) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    lock = _lock_for(m)
    path = root_copy / "kernels.lock"
    assert write_lock(path, lock) is True
    first = path.read_bytes()
    assert write_lock(path, lock) is False  # unchanged bytes are not rewritten
    again = read_lock(path)
    assert again is not None
    assert render_lock(again).encode() == first
    names = [(e.name, e.arch) for e in again.kernel]
    assert names == sorted(names)
    assert not check_lock(m, again)
    assert require_fresh(m, again) is again


def test_missing_lock_is_stale(root_copy: Path) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    assert read_lock(root_copy / "kernels.lock") is None
    with pytest.raises(StaleLockError, match="no lock file"):
        require_fresh(m, None)


def test_stale_lock_names_kernel_and_reason(root_copy: Path) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    write_lock(root_copy / "kernels.lock", _lock_for(m))
    ref = root_copy / "kernels" / "reference.py"
    ref.write_text(ref.read_text(encoding="utf-8") + "\n# changed\n", encoding="utf-8")
    base = root_copy / "kernels" / "matmul.cu"
    base.write_text(base.read_text(encoding="utf-8") + "\n// changed\n", encoding="utf-8")
    m2 = load_manifest(root_copy / "kernels.toml")
    staleness = check_lock(m2, read_lock(root_copy / "kernels.lock"))
    text = staleness.render()
    assert "matmul/sm_90: stale: reference, sources changed" in text
    assert "silu_mul/sm_80: stale: reference changed" in text
    with pytest.raises(StaleLockError, match="matmul/sm_80"):
        require_fresh(m2, read_lock(root_copy / "kernels.lock"))


def test_removed_kernel_and_arch_are_reported(root_copy: Path) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    write_lock(root_copy / "kernels.lock", _lock_for(m))
    toml = root_copy / "kernels.toml"
    toml.write_text(
        toml.read_text(encoding="utf-8").replace('archs = ["sm_80", "sm_90"]', 'archs = ["sm_90"]', 1), encoding="utf-8"
    )
    staleness = check_lock(load_manifest(toml), read_lock(root_copy / "kernels.lock"))
    assert ("silu_mul", "sm_80", "locked but no longer declared in the manifest") in staleness.problems


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace(f"version = {LOCK_VERSION}", "version = 7"), "lock version 7 is not supported"),
        (lambda t: t.replace('provenance = "baseline"', "provenance = baseline", 1), "invalid TOML"),
        (
            lambda t: t.replace('provenance = "baseline"', 'provenanse = "baseline"', 1),
            "unknown key 'provenanse' (did you mean 'provenance'?)",
        ),
        (lambda t: t.replace('winner = "' + "b" * 64, 'winner = "' + "z" * 64, 1), "not a sha256 digest"),
        (lambda t: t.replace('name = "matmul"', "name = 3", 1), "expected a string"),
        (lambda t: "\n".join(t.splitlines()[:30]) + '\n[[kernel]]\nname = "x"\n', "missing required key"),
        # tomllib lets these escape as RecursionError / ValueError: once a traceback and exit 1
        (lambda t: t + "x = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
        (
            lambda t: t.replace(f"version = {LOCK_VERSION}", "version = " + "9" * 5000),
            "kernels.lock:3: corrupt lock (invalid TOML: an",
        ),
        (lambda t: "\ufeff" + t, "kernels.lock:1: corrupt lock (invalid TOML: the file starts with a byte-order mark"),
        # read as a lock of no entries before: stale, never said to be damaged
        (lambda t: "", f"corrupt lock (no 'version = {LOCK_VERSION}' line: empty, cut short or not a lock)"),
        (lambda t: t.replace(f"version = {LOCK_VERSION}\n", ""), f"corrupt lock (no 'version = {LOCK_VERSION}' line"),
        # equal to 1 or 2, so read as an old lock and upgraded: accepted as current before
        (lambda t: t.replace(f"version = {LOCK_VERSION}", "version = true"), "version: expected an integer"),
        (lambda t: t.replace(f"version = {LOCK_VERSION}", "version = 2.0"), "version: expected an integer"),
    ],
    ids=[
        "version",
        "toml",
        "unknown-key",
        "digest",
        "type",
        "truncated",
        "deep",
        "huge-integer",
        "bom",
        "empty",
        "no-version",
        "version-bool",
        "version-float",
    ],
)
def test_corrupt_lock(root_copy: Path, edit: object, message: str) -> None:
    m = load_manifest(root_copy / "kernels.toml")
    path = root_copy / "kernels.lock"
    write_lock(path, _lock_for(m))
    path.write_text(edit(path.read_text(encoding="utf-8")), encoding="utf-8")  # type: ignore[operator]
    with pytest.raises(LockError, match=r"kernels\.lock") as info:
        read_lock(path)
    assert message in str(info.value)
    assert info.value.exit_code == 2


@pytest.mark.parametrize("project", [".", "sample_project"])
def test_committed_locks_are_current(project: str) -> None:
    """The repository's own locks fit their manifests: a change to key derivation must come with a re-lock
    (`r1build lock --offline -m PROJECT`, or a GPU run for measured winners)."""
    root = Path(__file__).resolve().parents[2] / project
    m = load_manifest(root / "kernels.toml", check_references=False)
    staleness = check_lock(m, load_lock(m))  # every field verified, current entries against the manifest
    assert not staleness, staleness.render()


def test_salvage_drops_a_table_nested_too_deeply(root_copy: Path) -> None:
    """`r1build lock` reads a damaged lock table by table: one tomllib cannot read without recursing past the limit
    is dropped as unreadable (the others here are dropped too: their made-up sources match no file)."""
    from r1build.lock.salvage import salvage_lock

    m = load_manifest(root_copy / "kernels.toml")
    path = root_copy / "kernels.lock"
    write_lock(path, _lock_for(m))
    text = path.read_text(encoding="utf-8").replace(
        'provenance = "baseline"', "deep = " + "[" * 5000 + "]" * 5000 + '\nprovenance = "baseline"', 1
    )
    path.write_text(text, encoding="utf-8")
    with pytest.raises(LockError) as info:
        read_lock(path)
    salvage = salvage_lock(m, info.value)
    unreadable = [(line, why) for line, why in salvage.dropped if "nested too deeply" in why]
    assert unreadable == [(6, "unreadable (invalid TOML: arrays or inline tables nested too deeply to read)")]


def test_write_lock_makes_its_folder_and_says_when_it_cannot(tmp_path: Path) -> None:
    """lock-file may name a folder not made yet (it once failed with a FileNotFoundError traceback); a lock that
    cannot be written is a LockError naming it."""
    path = tmp_path / "locks" / "kernels.lock"
    assert write_lock(path, Lock()) and read_lock(path) == Lock()
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(LockError, match=r"file/kernels\.lock: cannot write the lock: .*/file is a file, not a folder"):
        write_lock(tmp_path / "file" / "kernels.lock", Lock())


def test_library_verdict_round_trips_and_version_2_locks_still_read(root_copy: Path) -> None:
    """The speedup over the library, the share of the floor and why the library has no time are lock fields
    (version 3); a version 2 lock, without them, reads as it is; a bad value is named by field."""
    m = load_manifest(root_copy / "kernels.toml")
    lock = _lock_for(m)
    first = dataclasses.replace(
        lock.kernel[0],
        validation="validated",
        checks=3,
        gpu="NVIDIA H200",
        time_us=12.5,
        speedup_vs_library=0.8123,
        share_of_floor=0.61,
    )
    second = dataclasses.replace(
        lock.kernel[1], validation="validated", checks=3, gpu="NVIDIA H200", time_us=3.0, library_note="it failed"
    )
    path = root_copy / "kernels.lock"
    write_lock(path, Lock(manifest=lock.manifest, kernel=[first, second, *lock.kernel[2:]]))
    text = path.read_text(encoding="utf-8")
    assert "version = 3" in text and "speedup-vs-library = 0.812" in text and 'library-note = "it failed"' in text
    again = read_lock(path)
    assert again is not None
    entry = again.entry(first.name, first.arch)
    assert entry is not None and (entry.speedup_vs_library, entry.share_of_floor) == (0.812, 0.61)
    old = Lock(manifest=lock.manifest, kernel=lock.kernel)
    write_lock(path, old)
    path.write_text(path.read_text(encoding="utf-8").replace("version = 3", "version = 2"), encoding="utf-8")
    assert (read_lock(path) or Lock()).kernel == sorted(old.kernel, key=lambda e: (e.name, e.arch))
    path.write_text(text.replace("speedup-vs-library = 0.812", "speedup-vs-library = -1.0"), encoding="utf-8")
    with pytest.raises(LockError, match=r"speedup-vs-library: -1\.0 is not a positive ratio"):
        read_lock(path)
