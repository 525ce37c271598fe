"""Token and money budgets of a search with large answers: what is spent against the budget, and what is kept.

Runs whole searches (8 parallel samples a round) against the chat-completions server of the tests
(``tests/generate/chat_server.py``, in this process), which streams large R1-like answers (about 6,000 tokens of
reasoning, then the kernel) and honours ``max_tokens`` like a real server (an answer over it is cut off with
``finish_reason: length``). The evaluator is trivial (every candidate passes at a constant time, so rounds go on
until a budget ends them). Cases:

- ``tokens``: ``tokens = 25000``, usage reported at the end of each stream;
- ``tokens_small_chunks``: the same with 4-character stream deltas (thousands of chunks per answer);
- ``tokens_no_usage``: the same with a server that reports no usage (counted from the text's length);
- ``money``: ``money-usd = 0.05`` at DeepSeek's prices ($0.55 / $2.19 per million prompt / completion tokens).

For each: the budget, what the search accounted, what the server says it served (the usage it reported, or
would have), requests and their ``max_tokens``, answers, candidates kept, answers cancelled, and the stop with its
cause. Targets: what is accounted never exceeds a token budget, and exceeds a money budget by at most one
request's prompt misestimate; no answer in flight is cancelled; the answers that arrived are candidates.

Writes ``bench/results/generate_budget.json`` and ``.md``; exits 1 when a target is missed.

    python bench/generate_budget.py [--out bench/results]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
from _report import command_line, host_info, utc_now, write_results  # noqa: E402
from generate_overhead import MANIFEST, ConstantJudge  # noqa: E402

from r1build.cache import Cache  # noqa: E402
from r1build.generate import SearchJob, search  # noqa: E402
from r1build.manifest import load_manifest  # noqa: E402
from tests.generate.chat_server import Answer, ChatServer, Request, vadd_answer  # noqa: E402

REASONING_TOKENS = 6000
"""Words of reasoning in each answer (one token each, as the server counts them)."""

PRICES = {"input": 0.55, "output": 2.19}
"""DeepSeek's list prices per million tokens."""

SETTINGS = f"""prices = {{ input-per-mtok = {PRICES["input"]}, output-per-mtok = {PRICES["output"]} }}
max-tokens = 8192"""
"""What differs from the overhead benchmark's manifest in [generation] (its max-tokens is replaced)."""


def manifest_text(budget: str) -> str:
    """The overhead benchmark's manifest (32 candidates, 4 rounds of 8 samples at most 8 in flight) with
    ``budget`` and this benchmark's prices and max-tokens."""
    text = MANIFEST.format(provider="vllm", cap=8, candidates=32, rounds=4, samples=8)
    assert "max-tokens = 4096\n" in text and text.rstrip().endswith("target-share = 1.0")
    return text.replace("max-tokens = 4096\n", SETTINGS + "\n") + budget + "\n"


CASES: dict[str, dict[str, Any]] = {
    "tokens": {"budget": "tokens = 25000", "chunk_chars": 400, "usage": True},
    "tokens_small_chunks": {"budget": "tokens = 25000", "chunk_chars": 4, "usage": True},
    "tokens_no_usage": {"budget": "tokens = 25000", "chunk_chars": 400, "usage": False},
    "money": {"budget": "money-usd = 0.05", "chunk_chars": 400, "usage": True},
}


class Script:
    """Large distinct answers; records the tokens the server served (reported or not)."""

    def __init__(self, *, chunk_chars: int, usage: bool) -> None:
        self.chunk_chars = chunk_chars
        self.usage = usage
        self.lock = threading.Lock()
        self.count = 0
        self.served_tokens = 0
        self.served_prompt_tokens = 0
        self.largest_prompt = 0
        self.max_tokens: list[int] = []

    def __call__(self, request: Request) -> Answer:
        with self.lock:
            n = self.count
            self.count += 1
        prompt = sum(len(str(m.get("content", ""))) for m in request.messages) // 4
        reply = Answer(
            vadd_answer(n),
            reasoning="think " * REASONING_TOKENS,
            prompt_tokens=prompt,
            usage=self.usage,
            honour_max_tokens=True,
            chunk_chars=self.chunk_chars,
        )
        sent = reply.for_request(request)
        with self.lock:
            self.served_tokens += sent.tokens()
            self.served_prompt_tokens += prompt
            self.largest_prompt = max(self.largest_prompt, prompt)
            self.max_tokens.append(int((request.body or {}).get("max_tokens", 0)))
        return reply


def run_case(name: str, case: dict[str, Any], work: Path) -> dict[str, Any]:
    work.mkdir()
    (work / "ref.py").write_text("def vadd(a, b, n):\n    return a + b\n")
    (work / "kernels.toml").write_text(manifest_text(case["budget"]))
    manifest = load_manifest(work / "kernels.toml")
    spec = manifest.kernel("vadd")
    script = Script(chunk_chars=case["chunk_chars"], usage=case["usage"])
    with ChatServer(script) as server, Cache(work / "cache") as cache:
        start = time.perf_counter()
        outcome = search(
            SearchJob(manifest, spec, "sm_90", evaluator=ConstantJudge(), cache=cache, seeds=[]),
            environ={"R1BUILD_BASE_URL": server.url},
        )
        wall = time.perf_counter() - start
    u = outcome.usage
    served_usd = (script.served_prompt_tokens * PRICES["input"] + script.served_tokens * PRICES["output"]) / 1e6
    doc: dict[str, Any] = {
        "case": name,
        "budget": case["budget"],
        "chunk_chars": case["chunk_chars"],
        "usage_reported": case["usage"],
        "requests": u.requests,
        "max_tokens_sent": script.max_tokens,
        "answers": u.answers,
        "candidates_kept": len(outcome.candidates),
        "truncated": u.failures.get("truncated", 0),
        "cancelled": u.failures.get("cancelled", 0),
        "completion_tokens_accounted": u.completion_tokens,
        "completion_tokens_served": script.served_tokens,
        "prompt_tokens_accounted": u.prompt_tokens,
        "cost_usd_accounted": round(u.cost_usd, 6),
        "cost_usd_served": round(served_usd, 6),
        "estimated": u.estimated,
        "stop_reason": outcome.stop_reason,
        "cause": outcome.cause,
        "wall_s": round(wall, 2),
    }
    if name.startswith("tokens"):
        limit = 25000
        doc["tokens_budget"] = limit
        doc["within_budget"] = u.completion_tokens <= limit
    else:
        limit_usd = 0.05
        one_prompt = script.largest_prompt * PRICES["input"] / 1e6  # the most a prompt estimate can be off
        doc["money_budget_usd"] = limit_usd
        doc["within_budget"] = u.cost_usd <= limit_usd + one_prompt
    doc["ok"] = bool(
        doc["within_budget"]
        and doc["cancelled"] == 0
        and doc["candidates_kept"] >= 1
        and doc["candidates_kept"] == u.answers - doc["truncated"]
    )
    return doc


def markdown(result: dict[str, Any]) -> str:
    lines = [
        "# Generation budgets with large answers",
        "",
        f"{result['date']} · {result['host']['cpu']} ({result['host']['cpus']} CPUs) · openai "
        f"{result['host']['openai']} · `{result['command']}`",
        "",
        f"Answers of ~{REASONING_TOKENS:,} reasoning tokens plus a kernel, 8 samples a round, max-concurrency 8, "
        "max-tokens 8192, the server honouring max_tokens.",
        "",
        "| case | budget | accounted | served by the server | requests | answers | kept | truncated | cancelled "
        "| stop | ok |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in result["cases"]:
        if c["case"] == "money":
            accounted = f"${c['cost_usd_accounted']:.4f}"
            served = f"${c['cost_usd_served']:.4f}"
        else:
            approx = "~" if c["estimated"] else ""
            accounted = f"{approx}{c['completion_tokens_accounted']:,} tokens"
            served = f"{c['completion_tokens_served']:,} tokens"
        lines.append(
            f"| {c['case']} | `{c['budget']}` | {accounted} | {served} | {c['requests']} | {c['answers']} "
            f"| {c['candidates_kept']} | {c['truncated']} | {c['cancelled']} | {c['stop_reason']} "
            f"| {'yes' if c['ok'] else 'NO'} |"
        )
    lines += ["", "Stops, in the search's words:", ""]
    lines += [f"- {c['case']}: {c['cause']}; max_tokens sent: {c['max_tokens_sent']}" for c in result["cases"]]
    lines += [
        "",
        "Without usage the count is the text's length (4 characters a token), so it can differ from the "
        "server's own count; it is never the number of stream chunks.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "generate_budget",
        "date": utc_now(),
        "host": host_info(openai=openai.__version__, device="none (a local chat-completions server, no GPU)"),
        "command": command_line(__file__),
        "cases": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in CASES.items():
            result["cases"].append(run_case(name, case, Path(tmp) / name))
    write_results(args.out, "generate_budget", result, markdown(result))
    return 0 if all(c["ok"] for c in result["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
