"""A winner that wins in one timing regime only is never shown as a plain win: ``resolve`` says so (a warning, also
in a build's log), the lock records its idle-gaps time and the note, and ``status`` shows them. The decision is
planted as a GPU run records it (no GPU here)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.keys import decision_key
from r1build.manifest import load_manifest

NOTE = "wins back-to-back only: idle-gaps ranks 0123456789ab first (15.00 us against this winner's 20.00 us)"


@pytest.mark.slow
def test_a_winner_that_wins_in_one_regime_only_is_said_locked_and_shown(
    locked: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    m = load_manifest(locked / "kernels.toml")
    key = decision_key(m, m.kernel("silu_mul"), "sm_90")
    with Cache(cache_dir) as cache:
        decision = cache.get_decision(key)
        assert decision is not None and decision.results[0].timing is not None
        result = decision.results[0]
        assert result.timing is not None
        timing = dataclasses.replace(result.timing, regimes={"back-to-back": 41.5, "idle-gaps": 20.0}, regime_note=NOTE)
        cache.put_decision(dataclasses.replace(decision, results=[dataclasses.replace(result, timing=timing)]))
    (locked / "kernels.lock").unlink()
    capsys.readouterr()
    assert main(["resolve", "-m", str(locked), "--offline", "--no-gpu", "--cache-dir", str(cache_dir)]) == 0
    err = capsys.readouterr().err
    assert f"silu_mul/sm_90: the cached winner {NOTE}" in err, err
    text = (locked / "kernels.lock").read_text(encoding="utf-8")
    assert "idle-gaps-us = 20.0" in text and f'regime-note = "{NOTE}"' in text, text
    assert main(["status", "-m", str(locked), "--cache-dir", str(cache_dir), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["kernels"][0]
    assert (row["idle_gaps_us"], row["regime_note"]) == (20.0, NOTE) and NOTE in row["note"], row
