"""``r1build export-dataset``: a manifest's searches as a chat fine-tuning set, one JSON line per candidate.

Each generated candidate whose transcript is in the cache becomes one record (schema ``r1build.dataset/1``):

- ``messages``: the conversation as sent (``user`` turns, and for a later round the parent's ``assistant``
  answer and the feedback), then the model's turn: ``{"role": "assistant", "content": "<think>\\n{reasoning}\\n
  </think>\\n\\n{answer}"}``, the way DeepSeek-R1 writes its reasoning before its answer, so tools that read
  chat ``messages`` (role and content strings) take it as it is;
- ``kernel``, ``arch``, ``spec`` (description, C signature, arguments, shapes, tolerance, flops, tunables);
- ``candidate``: variant digest, source digest, tunable values, model, round, sample;
- ``verdict`` (the result's status: ``passed``, ``compile_error``, ``rejected``, ``incorrect``, ``crashed``,
  ``timed_out``), ``stage`` (``gate`` or ``evaluate``), ``validation``, ``reason`` (one line, empty when passed),
  ``time_us``, ``speedup_vs_baseline``, ``share_of_floor``, ``floor_us``, ``gpu``, ``profile`` (Nsight Compute's
  findings in one line, for a profiled finalist), ``winner``; optional: ``speedup_vs_library`` (the library's time
  over this one's) and ``library_note`` (why the library has no time), ``speedup_vs_torch`` and ``torch_note``
  (the same against torch, where the kernel names a ``torch-reference``), for a timed candidate.

No record holds an API key or a local path: transcripts are stored scrubbed of every configured secret, and each
string of a record is scrubbed again of the key variables set now and of this machine's absolute paths (the
project's folder, the cache's, the home folder; any other absolute path is cut to its file name).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ..cache import Cache
from ..convert import record
from ..filemode import DATASET_SCHEMA_PREFIX
from ..generate.prompts import signature
from ..generate.providers import PROFILES, redact
from ..manifest import Manifest
from ..profile.summary import profile_summary
from .overview import KernelRecords, SampleRecord, project_records
from .summary import first_line

__all__ = ["SCHEMA", "DatasetFilter", "dataset_records", "unjudged_searches", "write_dataset"]

SCHEMA = DATASET_SCHEMA_PREFIX + "1"
"""The ``schema`` field of every record; bumped when a field changes meaning or goes away."""

DatasetFilter = Literal["all", "passed", "winners"]
"""Which candidates: ``all``, those that ``passed`` every check of their judge, or only the ``winners``."""

_ABSOLUTE_PATH = re.compile(r"""(?<![\w.~/-])/(?:[^\s/:"'()<>`]+/)+([^\s/:"'()<>`]+)""")


@record(frozen=True)
class _Scrubber:
    secrets: tuple[str, ...]
    places: tuple[tuple[str, str], ...]
    """(absolute path, what stands for it), longest first."""

    def text(self, value: str) -> str:
        value = redact(value, self.secrets)
        for path, name in self.places:
            value = value.replace(path, name)
        return _ABSOLUTE_PATH.sub(r"\1", value)

    def any(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.any(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.any(v) for v in value]
        return value


def _scrubber(manifest: Manifest, cache: Cache, environ: Mapping[str, str]) -> _Scrubber:
    names = {n for p in PROFILES.values() for n in p.key_envs}
    if manifest.settings.generation.api_key_env:
        names.add(manifest.settings.generation.api_key_env)
    secrets = tuple(sorted({environ[n] for n in names if environ.get(n)}, key=len, reverse=True))
    places = {
        str(manifest.root.resolve()): "<project>",
        str(manifest.root): "<project>",
        str(Path(cache.directory).resolve()): "<cache>",
        str(Path.home()): "~",
    }
    return _Scrubber(
        secrets, tuple(sorted(((p, n) for p, n in places.items() if len(p) > 1), key=lambda x: len(x[0]), reverse=True))
    )


def _spec(records: KernelRecords) -> dict[str, Any]:
    spec = records.spec
    return {
        "name": spec.name,
        "description": spec.description,
        "signature": signature(spec),
        "args": [
            {
                "name": a.name,
                "dtype": a.dtype,
                "shape": list(a.shape) if a.shape is not None else None,
                "role": a.role if a.is_array else None,
            }
            for a in spec.args
        ],
        "test_shapes": [dict(s) for s in spec.test_shapes],
        "bench_shapes": [dict(s) for s in spec.bench_shapes],
        "tolerance": {"rtol": spec.tolerance.rtol, "atol": spec.tolerance.atol},
        "flops": spec.flops,
        "tunables": {k: list(v) for k, v in spec.tunables.items()},
    }


def _turn(sample: SampleRecord) -> str:
    answer = sample.content or ""
    return f"<think>\n{sample.reasoning.strip()}\n</think>\n\n{answer.strip()}" if sample.reasoning else answer


def _records_of(records: KernelRecords, which: DatasetFilter) -> Iterator[dict[str, Any]]:
    decision, search = records.decision, records.search
    if decision is None or search is None:
        return
    samples = {s.digest: s for s in search.samples}
    winner = records.winner_result()
    base = records.baseline_result()
    spec = _spec(records)
    for ref in decision.candidates:
        sample = samples.get(ref.origin.transcript or "")
        result = decision.result_of(ref.digest)
        if ref.origin.kind != "generated" or sample is None or sample.content is None or result is None:
            continue
        is_winner = winner is not None and winner.candidate == ref.digest
        if (which == "passed" and not result.ok) or (which == "winners" and not is_winner):
            continue
        timing = result.timing if result.ok else None
        speedup = timing.speedup_vs_baseline if timing else None
        if speedup is None and timing and base and base.timing:
            speedup = base.timing.median_us / timing.median_us
        yield {
            "schema": SCHEMA,
            "messages": [*sample.messages, {"role": "assistant", "content": _turn(sample)}],
            "kernel": records.spec.name,
            "arch": records.arch,
            "spec": spec,
            "candidate": {
                "digest": ref.digest,
                "source": ref.source,
                "defines": dict(ref.defines),
                "model": ref.origin.model,
                "round": ref.origin.round,
                "sample": ref.origin.sample,
            },
            "verdict": result.status,
            "stage": result.stage,
            "validation": decision.validation(ref),
            "reason": "" if result.ok else first_line(result.detail, 500),
            "time_us": timing.median_us if timing else None,
            "speedup_vs_baseline": speedup,
            "share_of_floor": timing.share_of_floor if timing else None,
            "floor_us": timing.floor_us if timing else None,
            "gpu": result.device if timing else None,
            "profile": profile_summary(result.profile) if result.profile else None,
            "winner": is_winner,
            **(
                {
                    "speedup_vs_library": timing.speedup_vs_reference,
                    "library_note": timing.library_note,
                    "speedup_vs_torch": timing.speedup_vs_torch,
                    "torch_note": timing.torch_note,
                }
                if timing
                else {}
            ),
        }


def dataset_records(
    manifest: Manifest, cache: Cache, *, which: DatasetFilter = "all", environ: Mapping[str, str] = os.environ
) -> list[dict[str, Any]]:
    """The dataset's records for ``manifest`` from ``cache`` (see the module docstring), in manifest order,
    then search order."""
    scrub = _scrubber(manifest, cache, environ)
    out: list[dict[str, Any]] = []
    for records in project_records(manifest, cache, transcripts=True):
        out += (scrub.any(r) for r in _records_of(records, which))
    return out


def unjudged_searches(manifest: Manifest, cache: Cache) -> list[str]:
    """Kernels whose stored answers (from ``generate``) no resolve judged yet, with how many: the dataset holds
    judged candidates only (``vadd/sm_90: 3 stored answer(s)``)."""
    return [
        f"{r.spec.name}/{r.arch}: {len(r.search.samples)} stored answer(s)"
        for r in project_records(manifest, cache, searches=True)
        if r.decision is None and r.search is not None and r.search.samples
    ]


def write_dataset(records: Sequence[dict[str, Any]], path: Path) -> None:
    """Write ``records`` as JSON lines (UTF-8) to ``path``, atomically."""
    from ..filemode import write_atomically

    write_atomically(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records))
