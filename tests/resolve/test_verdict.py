"""Never silent when slower: a winner measured slower than the library is said by ``resolve`` (a warning, also in
a build's log) and recorded in the lock; under ``must-beat = "library"`` a winner short of the margin fails its
kernel × arch as when no candidate may win. The decisions are planted as a GPU run records them
(tests/conftest.py's ``locked`` fixture plants its winner the same way); no GPU measures here."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.errors import NoWinnerError
from r1build.keys import decision_key
from r1build.lock import read_lock
from r1build.manifest import load_manifest

OFFLINE = ["--offline", "--no-gpu"]


def _replant(project: Path, cache_dir: Path, speedup: float | None, note: str | None = None) -> None:
    """The ``locked`` project's cached decision given a speedup over the library (or why it has none), its lock
    removed so that resolve takes the decision."""
    m = load_manifest(project / "kernels.toml")
    key = decision_key(m, m.kernel("silu_mul"), "sm_90")
    with Cache(cache_dir) as cache:
        decision = cache.get_decision(key)
        assert decision is not None
        result = decision.results[0]
        assert result.timing is not None
        timing = dataclasses.replace(
            result.timing, speedup_vs_reference=speedup, share_of_floor=0.42, library_note=note
        )
        cache.put_decision(dataclasses.replace(decision, results=[dataclasses.replace(result, timing=timing)]))
    (project / "kernels.lock").unlink()


def _settle(project: Path, must_beat: str | None = None, margin: float | None = None) -> None:
    toml = project / "kernels.toml"
    extra = (f'\nmust-beat = "{must_beat}"' if must_beat else "") + (f"\nmargin = {margin}" if margin else "")
    text = toml.read_text(encoding="utf-8")
    toml.write_text(text.replace('target = "r1build::kernels"', 'target = "r1build::kernels"' + extra, 1))


def _resolve(project: Path, cache_dir: Path) -> int:
    return main(["resolve", "-m", str(project), *OFFLINE, "--cache-dir", str(cache_dir)])


@pytest.mark.slow
def test_slower_than_the_library_warns_and_is_locked(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _replant(locked, cache_dir, 0.8)
    assert _resolve(locked, cache_dir) == 0
    err = capsys.readouterr().err
    assert "silu_mul/sm_90" in err and "slower than the library: 0.80x the library (slower)" in err
    entry = (read_lock(locked / "kernels.lock") or pytest.fail("no lock")).entry("silu_mul", "sm_90")
    assert entry is not None and (entry.speedup_vs_library, entry.share_of_floor) == (0.8, 0.42)
    assert main(["resolve", "--locked", "-m", str(locked), *OFFLINE, "--cache-dir", str(cache_dir)]) == 0
    assert "0.80x the library (slower)" in capsys.readouterr().err  # the locked winner says it too


@pytest.mark.slow
def test_slower_than_the_library_fails_under_must_beat(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _settle(locked, must_beat="library")
    _replant(locked, cache_dir, 0.8)
    assert _resolve(locked, cache_dir) == NoWinnerError.exit_code
    err = capsys.readouterr().err
    assert "silu_mul" in err and "sm_90" in err and "must-beat" in err and "0.80x the library" in err
    lock = read_lock(locked / "kernels.lock")
    assert lock is None or lock.entry("silu_mul", "sm_90") is None  # nothing locked for it


@pytest.mark.slow
@pytest.mark.parametrize(("speedup", "code"), [(1.06, 0), (1.04, NoWinnerError.exit_code)])
def test_margin(locked: Path, cache_dir: Path, speedup: float, code: int) -> None:
    _settle(locked, must_beat="library", margin=0.05)
    _replant(locked, cache_dir, speedup)
    assert _resolve(locked, cache_dir) == code


@pytest.mark.slow
def test_must_beat_without_a_library_time_says_why(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _settle(locked, must_beat="library")
    _replant(locked, cache_dir, None, note="the reference does not run on cupy (AttributeError: errstate)")
    assert _resolve(locked, cache_dir) == NoWinnerError.exit_code
    err = capsys.readouterr().err
    assert "errstate" in err and "gpu-reference" in err


@pytest.mark.slow
def test_status_shows_the_library_verdict(locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``status`` and ``status --json`` show the speedup over the library, the share of the floor and why a
    winner is short of the bar, from the lock and from a cached decision alike."""
    import json

    _settle(locked, must_beat="library", margin=0.05)
    _replant(locked, cache_dir, 1.04)
    status = ["status", "-m", str(locked), "--cache-dir", str(cache_dir)]
    capsys.readouterr()
    assert main([*status, "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["kernels"] if r["arch"] == "sm_90")
    assert (row["state"], row["speedup_vs_library"], row["share_of_floor"]) == ("cached", 1.04, 0.42)
    assert "fails must-beat library (margin 0.05): 1.04x the library (faster)" in row["note"]
    _settle(locked)  # no must-beat: lock it, then a slower one is said from the lock
    toml = locked / "kernels.toml"
    toml.write_text(toml.read_text(encoding="utf-8").replace('\nmust-beat = "library"\nmargin = 0.05', ""))
    assert _resolve(locked, cache_dir) == 0  # locks it
    text = (locked / "kernels.lock").read_text(encoding="utf-8")
    (locked / "kernels.lock").write_text(text.replace("speedup-vs-library = 1.04", "speedup-vs-library = 0.9"))
    capsys.readouterr()
    assert main([*status, "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["kernels"] if r["arch"] == "sm_90")
    assert (row["state"], row["speedup_vs_library"]) == ("locked", 0.9)
    assert "slower than the library (0.90x)" in row["note"]
    assert main(status) == 0
    out = capsys.readouterr().out
    assert "0.90x" in out and "42%" in out


TORCH_REF = """import torch


def silu_mul(gate: torch.Tensor, up: torch.Tensor, n: int) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up
"""


def _torch_bar(project: Path, cache_dir: Path, library: float, torch: float | None, note: str | None = None) -> None:
    """silu_mul names a torch-reference (kernels/torch_ref.py) and its cached decision is replanted with speedups
    over the library and over torch (or why torch has none), as a GPU run records them."""
    (project / "kernels" / "torch_ref.py").write_text(TORCH_REF, encoding="utf-8")
    toml = project / "kernels.toml"
    text = toml.read_text(encoding="utf-8")
    ref = 'reference = "kernels.reference:silu_mul"'
    toml.write_text(text.replace(ref, ref + '\ntorch-reference = "kernels.torch_ref:silu_mul"', 1), encoding="utf-8")
    _replant(project, cache_dir, library)
    m = load_manifest(toml)
    key = decision_key(m, m.kernel("silu_mul"), "sm_90")
    with Cache(cache_dir) as cache:
        decision = cache.get_decision(key)
        assert decision is not None
        result = decision.results[0]
        assert result.timing is not None
        timing = dataclasses.replace(result.timing, speedup_vs_torch=torch, torch_mode="compile", torch_note=note)
        cache.put_decision(dataclasses.replace(decision, results=[dataclasses.replace(result, timing=timing)]))


@pytest.mark.slow
def test_slower_than_torch_warns_and_is_locked(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _torch_bar(locked, cache_dir, library=1.5, torch=0.7)
    assert _resolve(locked, cache_dir) == 0
    err = capsys.readouterr().err
    assert "silu_mul/sm_90" in err and "slower than torch: 0.70x torch (slower)" in err
    assert "slower than the library" not in err
    entry = (read_lock(locked / "kernels.lock") or pytest.fail("no lock")).entry("silu_mul", "sm_90")
    assert entry is not None and (entry.speedup_vs_library, entry.speedup_vs_torch) == (1.5, 0.7)
    assert "speedup-vs-torch = 0.7" in (locked / "kernels.lock").read_text(encoding="utf-8")
    assert main(["resolve", "--locked", "-m", str(locked), *OFFLINE, "--cache-dir", str(cache_dir)]) == 0
    assert "0.70x torch (slower)" in capsys.readouterr().err  # the locked winner says it too
    import json

    assert main(["status", "-m", str(locked), "--cache-dir", str(cache_dir), "--json"]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out)["kernels"] if r["kernel"] == "silu_mul")
    assert (row["state"], row["speedup_vs_torch"]) == ("locked", 0.7)
    assert "slower than torch (0.70x)" in row["note"] and "slower than the library" not in row["note"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("must_beat", "library", "torch", "said"),
    [
        ("torch", 1.5, 1.04, '1.04x torch (faster); must-beat = "torch" with margin 0.05 needs at least 1.05x torch'),
        ("library-and-torch", 0.9, 1.5, '0.90x the library (slower); must-beat = "library-and-torch"'),
        ("library-and-torch", 1.5, 0.9, '0.90x torch (slower); must-beat = "library-and-torch"'),
    ],
)
def test_short_of_the_torch_bar_fails_under_must_beat(
    locked: Path,
    cache_dir: Path,
    capsys: pytest.CaptureFixture[str],
    must_beat: str,
    library: float,
    torch: float,
    said: str,
) -> None:
    _settle(locked, must_beat=must_beat, margin=0.05)
    _torch_bar(locked, cache_dir, library=library, torch=torch)
    assert _resolve(locked, cache_dir) == NoWinnerError.exit_code
    err = capsys.readouterr().err
    assert "silu_mul" in err and said in err
    lock = read_lock(locked / "kernels.lock")
    assert lock is None or lock.entry("silu_mul", "sm_90") is None


@pytest.mark.slow
def test_must_beat_torch_without_a_torch_time_says_why(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _settle(locked, must_beat="torch")
    note = "the torch-reference kernels.torch_ref:silu_mul could not be timed (torch is not installed)"
    _torch_bar(locked, cache_dir, library=1.5, torch=None, note=note)
    assert _resolve(locked, cache_dir) == NoWinnerError.exit_code
    err = capsys.readouterr().err
    assert "torch is not installed" in err and "install torch in the GPU worker" in err
