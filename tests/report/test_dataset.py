"""``r1build export-dataset`` on a real search (the local chat server, real nvcc, the GPU stand-in's verdicts):
one chat record per generated candidate, the filters, the documented schema, no key and no local path, and a
round trip through a JSON-lines reader (Hugging Face ``datasets`` where installed; json + the schema always)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import jsonschema
import pytest

import r1build
from r1build.cli.main import main
from tests.generate.gen_support import KEY, Project

pytestmark = pytest.mark.slow  # seconds a test: nvcc, resolves, processes or servers

SCHEMA = json.loads((Path(r1build.__file__).parent / "report" / "dataset.schema.json").read_text())


def _export(project: Project, out: Path, *flags: str) -> list[dict[str, object]]:
    argv = ["export-dataset", "-m", str(project.root), "--cache-dir", str(project.cache_dir), "-o", str(out), *flags]
    assert main(argv) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    for record in records:
        jsonschema.validate(record, SCHEMA)
    return records


def test_every_generated_candidate_is_one_chat_record(
    searched: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEEPSEEK_API_KEY", KEY)  # a key in the environment while exporting: never in the file
    records = _export(searched, tmp_path / "all.jsonl")
    seen = [(r["candidate"]["round"], r["candidate"]["sample"], r["verdict"]) for r in records]  # type: ignore[index]
    assert seen == [(0, 0, "passed"), (0, 1, "compile_error"), (0, 2, "incorrect"), (1, 0, "passed"), (1, 1, "passed")]
    by_time = {r["time_us"]: r for r in records}
    best = by_time[20.0]
    assert best["winner"] is True and best["speedup_vs_baseline"] == pytest.approx(2.0)
    assert best["validation"] == "validated" and best["gpu"] == "Test GPU"
    messages = best["messages"]
    assert isinstance(messages, list) and messages[0]["role"] == "user" and "vadd" in messages[0]["content"]
    assert messages[-1]["role"] == "assistant"
    assert messages[-1]["content"].startswith("<think>\nGrid-stride loop, wider blocks.\n</think>\n\n")
    assert "```cuda" in messages[-1]["content"]
    assert len(messages) > 2 or "so far" in messages[0]["content"]  # round 1 carries the feedback
    failed = next(r for r in records if r["verdict"] == "compile_error")
    assert "error" in str(failed["reason"]) and failed["time_us"] is None
    assert records[0]["spec"]["signature"].startswith('extern "C" cudaError_t vadd(')  # type: ignore[index]

    text = (tmp_path / "all.jsonl").read_text(encoding="utf-8")
    assert KEY not in text
    for place in (searched.root, searched.cache_dir, tmp_path, Path.home()):
        assert str(place) not in text
    assert re.search(r"(?<![\w.])/(tmp|home|root|usr)/", text) is None  # no absolute local path at all


def test_the_filters(searched: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    passed = _export(searched, tmp_path / "passed.jsonl", "--passed-only")
    assert sorted(r["time_us"] for r in passed) == [20.0, 25.0, 30.0]  # type: ignore[type-var]
    winners = _export(searched, tmp_path / "winners.jsonl", "--winners-only")
    assert [(r["time_us"], r["winner"]) for r in winners] == [(20.0, True)]
    assert main(["export-dataset", "-m", str(searched.root), "--passed-only", "--winners-only"]) == 2
    capsys.readouterr()
    out = tmp_path / "w.jsonl"
    assert (
        main(
            [
                "export-dataset",
                "-m",
                str(searched.root),
                "--cache-dir",
                str(searched.cache_dir),
                "-o",
                str(out),
                "--winners-only",
                "--json",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {"output": str(out), "records": 1, "filter": "winners"}


def test_the_dataset_round_trips_through_a_json_lines_reader(searched: Project, tmp_path: Path) -> None:
    out = tmp_path / "all.jsonl"
    records = _export(searched, out)
    if importlib.util.find_spec("datasets") is None:
        pytest.skip("Hugging Face datasets is not installed (pip install datasets); json + the schema checked above")
    import datasets

    loaded = datasets.load_dataset("json", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert loaded.num_rows == len(records)
    assert loaded.column_names == sorted(records[0])
    for row, record in zip(loaded, records, strict=True):
        assert row["messages"] == record["messages"]
        assert (row["verdict"], row["time_us"], row["winner"]) == (
            record["verdict"],
            record["time_us"],
            record["winner"],
        )
