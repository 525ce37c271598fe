"""Rounds versus the continuous search, against a server that answers like R1 (issue 31).

The chat-completions server of the tests (``tests/generate/chat_server.py``, in this process) answers the n-th
request to arrive in 30-300 s (drawn from a generator seeded by n, so both searches get the same durations in the
same order), scaled by ``--scale`` (default 1/100: 0.3-3 s): nine tenths reasoning, then the code and a short
explanation. The n-th answer's kernel takes ``40 - n`` us against a 10 us floor, so the first kernel at the target
share (0.5: 20 us) is the answer to request 21 in both searches: the same winner. The judge emulates the gate and
the GPU: ``--judge-s`` seconds per candidate (default 5 s, scaled), one candidate after another.

For each of ``rounds`` and ``continuous`` (``generation.search``; 8 slots, 8 samples a round, 64 at most, provider
``vllm``): the time to the first judged candidate, the time to the winner (when the judge returned it), the wall
time of the whole search, requests sent, and the judge's busy share from the first candidate to the winner.

With ``--gpu`` (a machine with a GPU of sm_90: the lent H100/H200), the judge is the real one, the static gate and
the GPU evaluator, and the answers are correct ``vadd`` kernels of differing block sizes (the n-th: block 64 << n % 5,
an element a thread or a grid-stride loop), 24 at most, target share ``--target-share`` (default 0.3): the time to
the first validated candidate, to the first at the target, the wall time, and the GPU busy share the search itself
reports (its progress events' ``judge_busy`` and ``gpu_busy``, busy seconds over the seconds since the first
candidate was queued) for both searches (issue 31's goal: GPU busy >= 85 % while candidates wait for it; winner
>= 1.5x sooner continuous).

Writes ``bench/results/continuous_search.json`` and ``.md`` (``continuous_search_gpu.*`` with ``--gpu``).

    python bench/continuous_search.py [--scale 0.01] [--judge-s 5] [--out bench/results]
    python bench/continuous_search.py --gpu [--scale 0.01] [--target-share 0.3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import command_line, host_info, utc_now, write_results  # noqa: E402
from generate_overhead import MANIFEST  # noqa: E402

from r1build.cache import Cache  # noqa: E402
from r1build.events import Event, Progress, sink  # noqa: E402
from r1build.generate import SearchJob, search  # noqa: E402
from r1build.judge import Job  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from r1build.records import Result, Timing  # noqa: E402
from tests.generate.chat_server import Answer, ChatServer, Request, vadd_answer  # noqa: E402

TARGET_US = 20.0
"""The winner's time: 0.5 of the 10 us floor."""


class TimedJudge:
    """Emulates the gate and the GPU: ``seconds`` per candidate, the time written in the source; records when it
    returned the first kernel at the target."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.busy_s = 0.0
        self.won_at: float | None = None

    def evaluate(self, job: Job) -> list[Result]:
        results = []
        for c in job.candidates:
            time.sleep(self.seconds)
            self.busy_s += self.seconds
            t = float(re.search(r"time_us: ([0-9.]+)", c.source).group(1))  # type: ignore[union-attr]
            timing = Timing(median_us=t, spread=0.01, samples=10, floor_us=10.0, share_of_floor=10.0 / t)
            results.append(Result(candidate=c.digest, arch=job.arch, status="passed", stage="evaluate", timing=timing))
        if self.won_at is None and any(r.timing and r.timing.median_us <= TARGET_US for r in results):
            self.won_at = time.monotonic()
        return results


def gpu_answer(n: int) -> str:
    """A correct ``vadd`` answer, distinct for each ``n``: block 64 << n % 5, one element a thread (even ``n // 5``)
    or a grid-stride loop over a quarter of the blocks (odd)."""
    block = 64 << n % 5
    if (n // 5) % 2 == 0:
        body = "  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;\n  if (i < n) o[i] = a[i] + b[i];\n"
        grid = f"(n + {block - 1}) / {block}"
    else:
        body = (
            "  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;"
            " i += (int64_t)gridDim.x * blockDim.x)\n    o[i] = a[i] + b[i];\n"
        )
        grid = f"((n + {block - 1}) / {block} + 3) / 4"
    source = (
        f"// variant {n}\n#include <cuda_runtime.h>\n#include <cstdint>\n"
        "namespace { __global__ void k(const float* a, const float* b, float* o, int64_t n) {\n"
        f"{body}}} }}\n"
        'extern "C" cudaError_t vadd(const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {\n'
        f"  if (n <= 0) return cudaSuccess;\n  k<<<{grid}, {block}, 0, s>>>(a, b, out, n);\n"
        "  return cudaGetLastError(); }\n"
    )
    return f"Here it is.\n\n```cuda\n{source}```\nIt launches on the given stream."


class FirstAtTarget:
    """The real judge (gate and GPU evaluator), noting when it first returned a kernel at the target share."""

    def __init__(self, inner: Any, target: float) -> None:
        self.inner = inner
        self.target = target
        self.won_at: float | None = None

    def evaluate(self, job: Job) -> list[Result]:
        results: list[Result] = self.inner.evaluate(job)
        share = max((r.timing.share_of_floor or 0.0 for r in results if r.ok and r.timing), default=0.0)
        if self.won_at is None and share >= self.target:
            self.won_at = time.monotonic()
        return results


def script(scale: float, answer: Any = None) -> Any:
    counter, lock = iter(range(10**6)), threading.Lock()

    def reply(request: Request) -> Answer:
        with lock:
            n = next(counter)
        seconds = random.Random(n).uniform(30, 300) * scale
        if answer is not None:
            content = answer(n)
        else:
            content = (
                vadd_answer(n).replace(
                    "#include <cuda_runtime.h>", f"// time_us: {max(40 - n, 5)}\n#include <cuda_runtime.h>"
                )
                + "It launches on the given stream."
            )
        return Answer(
            content,
            reasoning="think " * 200,
            chunk_chars=200,
            reasoning_s=0.9 * seconds,
            content_s=0.1 * seconds,
            completion_tokens=2000,
        )

    return reply


@dataclass(frozen=True)
class Searched:
    """One search against the emulating server: its events (with their clock), when it started, its wall time,
    the requests the server was sent, and why it stopped."""

    events: list[tuple[float, Event]]
    start: float
    wall: float
    requests: int
    stop: str


def run_search(
    mode: str,
    scale: float,
    judge: Callable[[Cache], AbstractContextManager[Any]],
    *,
    answer: Callable[[int], str] | None = None,
    candidates: int = 64,
    rounds: int = 8,
    target: float = 0.5,
    arch: str = "sm_90",
) -> Searched:
    """A ``vadd`` search of ``mode`` (``generation.search``; 8 slots, 8 samples a round, provider ``vllm``) against
    the emulating server answering with ``answer`` (:func:`script`), judged by what ``judge`` makes of the cache."""
    events: list[tuple[float, Event]] = []
    with tempfile.TemporaryDirectory() as tmp, ChatServer(script(scale, answer)) as server:
        root = Path(tmp)
        (root / "ref.py").write_text("def vadd(a, b, n):\n    return a + b\n")
        text = MANIFEST.format(provider="vllm", cap=8, candidates=candidates, rounds=rounds, samples=8)
        text = text.replace("retries = 0", f'retries = 0\nsearch = "{mode}"')
        text = text.replace("target-share = 1.0", f"target-share = {target}").replace("sm_90", arch)
        (root / "kernels.toml").write_text(text)
        manifest = load_manifest(root / "kernels.toml")
        start = time.monotonic()
        with (
            Cache(root / "cache") as cache,
            sink(lambda e: events.append((time.monotonic(), e))),
            judge(cache) as evaluator,
        ):
            job = SearchJob(manifest, manifest.kernel("vadd"), arch, evaluator=evaluator, cache=cache, seeds=[])
            outcome = search(job, environ={"R1BUILD_BASE_URL": server.url, "VLLM_API_KEY": "x"})
        wall = time.monotonic() - start
        requests = len(server.chat_requests())
    return Searched(events, start, wall, requests, outcome.stop_reason)


def _first_passed(events: list[tuple[float, Event]]) -> float | None:
    """When the search first counted a passed candidate."""
    return next((t for t, e in events if isinstance(e, Progress) and int(e.fields.get("passed", 0)) > 0), None)


def one(mode: str, scale: float, judge_s: float) -> dict[str, Any]:
    judge = TimedJudge(judge_s * scale)
    done = run_search(mode, scale, lambda _: contextlib.nullcontext(judge))
    first = _first_passed(done.events)
    assert first is not None, "no candidate passed"
    won = judge.won_at or float("nan")
    return {
        "mode": mode,
        "first_judged_s": round(first - done.start, 3),
        "winner_s": round(won - done.start, 3),
        "wall_s": round(done.wall, 3),
        "requests": done.requests,
        "stop": done.stop,
        "judge_busy_share_to_winner": round(judge.busy_s / max(won - first, 1e-9), 3),
    }


def _busy(events: list[tuple[float, Event]], name: str) -> str | None:
    """The last value of a progress field of the search (``judge_busy``: ``busy/since-first-candidate``)."""
    found = [str(e.fields[name]) for _, e in events if isinstance(e, Progress) and name in e.fields]
    return found[-1] if found else None


def _share(text: str | None) -> float | None:
    """``12.0s/14.0s`` as 0.857; None for anything else."""
    m = re.fullmatch(r"([0-9.]+)s/([0-9.]+)s", text or "")
    return round(float(m.group(1)) / float(m.group(2)), 3) if m and float(m.group(2)) > 0 else None


def one_gpu(mode: str, scale: float, target: float) -> dict[str, Any]:
    """One search of ``mode`` judged by the real gate and GPU evaluator (see the module)."""
    from r1build.evaluate import GpuEvaluator, detect_gpus
    from r1build.gate.static import StaticGate

    gpus = detect_gpus()
    if not gpus:
        raise SystemExit("--gpu: no GPU visible here (cupy and a driver are needed)")
    judges: list[FirstAtTarget] = []

    @contextlib.contextmanager
    def real_judge(cache: Cache) -> Iterator[FirstAtTarget]:
        with GpuEvaluator(cache, gpus=gpus[:1], gate=StaticGate(cache)) as evaluator:
            judges.append(FirstAtTarget(evaluator, target))
            yield judges[-1]

    done = run_search(
        mode, scale, real_judge, answer=gpu_answer, candidates=24, rounds=3, target=target, arch=gpus[0].arch
    )
    first = _first_passed(done.events)
    won = judges[0].won_at
    judge_busy, gpu_busy = _busy(done.events, "judge_busy"), _busy(done.events, "gpu_busy")
    return {
        "mode": mode,
        "gpu": gpus[0].name,
        "first_validated_s": round(first - done.start, 3) if first is not None else None,
        "winner_s": round(won - done.start, 3) if won is not None else None,
        "wall_s": round(done.wall, 3),
        "requests": done.requests,
        "stop": done.stop,
        "judge_busy": judge_busy,
        "judge_busy_share": _share(judge_busy),
        "gpu_busy": gpu_busy,
    }


def main_gpu(args: argparse.Namespace, argv: list[str] | None) -> int:
    """``--gpu``: both searches with the real judge (see the module)."""
    rows = [one_gpu(mode, args.scale, args.target_share) for mode in ("rounds", "continuous")]
    r, c = rows
    doc = {
        "date": utc_now(),
        "command": command_line("bench/continuous_search.py", argv),
        "host": host_info(device=rows[0]["gpu"]),
        "scale": args.scale,
        "target_share": args.target_share,
        "rows": rows,
        "winner_speedup": round(r["winner_s"] / c["winner_s"], 2) if r["winner_s"] and c["winner_s"] else None,
        "wall_speedup": round(r["wall_s"] / c["wall_s"], 2) if c["wall_s"] else None,
    }
    write_results(args.out, "continuous_search_gpu", doc, render_gpu(doc))
    return 0


def render_gpu(doc: dict[str, Any]) -> str:
    """The ``--gpu`` table of ``doc`` (also re-rendered from a run's JSON: ``--render FILE``)."""
    rows = doc["rows"]
    lines = [
        "# Rounds versus the continuous search, judged by the gate and the GPU evaluator",
        "",
        f"- date: {doc['date']}; device: {rows[0]['gpu']}; host: {doc['host']['cpu']} ({doc['host']['cpus']} CPUs)",
        f"- command: `{doc['command']}`",
        f"- answers 30-300 s scaled by {doc['scale']:g} (correct vadd kernels of five block sizes, two shapes); 8 "
        f"slots, 8 samples a round, 24 at most, target share {doc['target_share']:g}",
        "",
        "| search | first validated (s) | first at target (s) | wall (s) | requests | stop | judge busy | share | "
        "GPU busy |",
        "|---|---|---|---|---|---|---|---|---|",
        *[
            f"| {x['mode']} | {x['first_validated_s']} | {x['winner_s']} | {x['wall_s']} | {x['requests']} | "
            f"{x['stop']} | {x['judge_busy']} | {x['judge_busy_share']} | {x['gpu_busy']} |"
            for x in rows
        ],
        "",
        f"Wall time until the search returns its winner: {doc.get('wall_speedup')}x lower continuous (goal 1.5x); "
        f"until the judge first saw a kernel at the target: {doc['winner_speedup']}x (both searches judge each "
        "answer as it arrives; rounds then wait for the round's last answer before they return). The judge's busy "
        "share is its busy seconds over the seconds since the first candidate was queued (goal 0.85).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.01, help="factor on every duration (default 1/100)")
    parser.add_argument("--judge-s", type=float, default=5.0, help="unscaled seconds per candidate judged")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--gpu", action="store_true", help="the real gate and GPU evaluator judge (needs a GPU)")
    parser.add_argument("--target-share", type=float, default=0.3, help="with --gpu: the share of the floor to reach")
    parser.add_argument("--render", type=Path, help="re-render a --gpu run's JSON as Markdown (to stdout)")
    args = parser.parse_args(argv)
    if args.render:
        doc = json.loads(args.render.read_text())
        doc.setdefault("wall_speedup", round(doc["rows"][0]["wall_s"] / doc["rows"][1]["wall_s"], 2))
        print(render_gpu(doc))
        return 0
    if args.gpu:
        return main_gpu(args, argv)
    rows = [one(mode, args.scale, args.judge_s) for mode in ("rounds", "continuous")]
    r, c = rows
    doc = {
        "date": utc_now(),
        "command": command_line("bench/continuous_search.py", argv),
        "host": host_info(),
        "scale": args.scale,
        "judge_s": args.judge_s,
        "rows": rows,
        "winner_speedup": round(r["winner_s"] / c["winner_s"], 2),
        "first_judged_speedup": round(r["first_judged_s"] / c["first_judged_s"], 2),
    }
    lines = [
        "# Rounds versus the continuous search (emulated R1 timing)",
        "",
        f"- date: {doc['date']}",
        f"- machine: {doc['host']['cpu']} ({doc['host']['cpus']} CPUs), no GPU; judge emulated",
        f"- command: `{doc['command']}`",
        f"- answers 30-300 s and {args.judge_s:g} s per candidate judged, all scaled by {args.scale:g}; 8 slots, "
        "8 samples a round; times below are scaled seconds (divide by the scale for real ones)",
        "",
        "| search | first judged (s) | winner (s) | wall (s) | requests | stop | judge busy to winner |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['mode']} | {row['first_judged_s']} | {row['winner_s']} | {row['wall_s']} | {row['requests']} "
            f"| {row['stop']} | {row['judge_busy_share_to_winner']:.0%} |"
        )
    lines += [
        "",
        f"Time to the winner: {doc['winner_speedup']}x lower continuous; to the first judged candidate: "
        f"{doc['first_judged_speedup']}x.",
        "",
        "Not measured here: the GPU busy share with the real evaluator; on a machine with a GPU, "
        "`python bench/continuous_search.py --gpu` measures it (`continuous_search_gpu.md`).",
    ]
    write_results(args.out, "continuous_search", doc, "\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
