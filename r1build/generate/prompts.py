"""Prompts for R1, built from the spec: everything goes in the user turn (R1 takes no system prompt).

The task prompt states the candidate contract with the exact signature, the arguments (C types, roles, shapes),
the description, the numpy reference's source, the correctness and benchmark shapes, the target arch and its
limits, the limits the gate enforces, the syntax for tunable parameters and, where diversity comes from the
prompt, an optimization direction. The feedback prompt of a later round reports what happened to a kernel (its
time and share of the hardware floor, or its compiler errors, rejection, mismatch summary or sanitizer
findings), the best kernels so far and the other failures, each trimmed to a sensible length. A compile
failure is quoted as the compiler's own messages: without the command line, the return code or this machine's
absolute paths (see :func:`compiler_message`).
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Sequence

from ..convert import field, record
from ..manifest.archs import arch_info
from ..manifest.model import KernelSpec, Manifest
from ..manifest.reference import ReferenceProblem, reference_file
from ..profile.summary import profile_summary
from ..records import Result

__all__ = [
    "DEFAULT_DIRECTIONS",
    "Judged",
    "compiler_message",
    "feedback_prompt",
    "format_shape",
    "signature",
    "task_prompt",
    "trim_log",
    "trim_source",
]

DEFAULT_DIRECTIONS: tuple[str, ...] = (
    "coalesced global memory access",
    "vectorized 128-bit loads and stores",
    "shared-memory tiling",
    "warp shuffles for reductions",
    "fewer passes over memory",
    "several elements per thread for instruction-level parallelism",
    "occupancy: block size and register use",
    "tensor cores where the data types allow",
)
"""Optimization directions used for diversity when the provider ignores temperature and none are configured."""

SOURCE_LIMIT = 16000
"""Most characters of one kernel source quoted in a prompt."""
LOG_LIMIT = 3000
"""Most characters of one compiler log or failure detail quoted in a prompt."""

_INCLUDES = {"float16": "<cuda_fp16.h>", "bfloat16": "<cuda_bf16.h>"}


@record(frozen=True)
class Judged:
    """A judged candidate as a later prompt describes it."""

    label: str
    """How the prompt names it, e.g. ``round 1 sample 3`` or ``the baseline``."""
    source: str
    """Its source."""
    result: Result
    """Its result."""
    defines: dict[str, int | str] = field(default_factory=dict)
    """Tunable values it was judged with."""


def signature(spec: KernelSpec) -> str:
    """The exported function's declaration."""
    params = ", ".join(f"{arg.c_type()} {arg.name}" for arg in spec.args)
    return f'extern "C" cudaError_t {spec.name}({params}, cudaStream_t stream)'


def format_shape(shape: dict[str, int]) -> str:
    """``n=1024, m=7``."""
    return ", ".join(f"{k}={v}" for k, v in shape.items())


def trim_source(source: str, limit: int = SOURCE_LIMIT) -> str:
    """A source cut to ``limit`` characters, marked when cut."""
    if len(source) <= limit:
        return source
    return source[:limit].rstrip() + "\n// ... (cut)\n"


def trim_log(text: str, limit: int = LOG_LIMIT, max_lines: int = 40) -> str:
    """A compiler log or failure detail cut to its most useful part: error lines (with the line after each)
    first, then the rest, at most ``max_lines`` lines and ``limit`` characters."""
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) > max_lines or len(text) > limit:
        keep: list[int] = []
        for i, line in enumerate(lines):
            if "error" in line.lower():
                keep += [i, i + 1]
        chosen = sorted({i for i in keep if i < len(lines)})[:max_lines] or list(range(min(max_lines, len(lines))))
        omitted = len(lines) - len(chosen)
        lines = [lines[i] for i in chosen]
        if omitted > 0:
            lines.append(f"... ({omitted} more lines)")
    out = "\n".join(lines)
    return out if len(out) <= limit else out[:limit] + "\n..."


_ABSOLUTE_PATH = re.compile(r"""(?<![\w.~/-])/(?:[^\s/:"'()<>]+/)+([^\s/:"'()<>]+)""")


def compiler_message(detail: str) -> str:
    """What the compiler said about a candidate, for a prompt: the output of a failed compile without the command
    line, the return code or local absolute paths (each is cut to its file name)."""
    text = detail
    if text.lstrip().startswith("command:") or "\noutput:\n" in text:
        head, sep, output = text.partition("\noutput:\n")
        kept = [ln for ln in head.splitlines() if ln.strip() and not ln.startswith(("command:", "return code:"))]
        text = "\n".join([*kept, textwrap.dedent(output)]) if sep else "\n".join(kept)
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith(("command:", "return code:"))]
    return _ABSOLUTE_PATH.sub(r"\1", "\n".join(lines)).strip()


def _reference_source(manifest: Manifest, spec: KernelSpec) -> str | None:
    try:
        path = reference_file(manifest.root, spec.reference)
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (ReferenceProblem, OSError, UnicodeDecodeError, SyntaxError):
        return None
    func = spec.reference.partition(":")[2]
    imports = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    body = next(
        (
            ast.get_source_segment(text, n)
            for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == func
        ),
        None,
    )
    if body is None:
        return None
    head = "\n".join(i for i in imports if i and "__future__" not in i)
    return f"{head}\n\n{body}\n" if head else f"{body}\n"


def _arg_rows(spec: KernelSpec) -> list[str]:
    rows = ["| parameter | C type | kind | shape / value |", "|---|---|---|---|"]
    for arg in spec.args:
        if arg.is_array:
            dims = " x ".join(str(d) for d in arg.shape or [])
            kind = {
                "in": "input array (read only)",
                "out": "output array (write every element)",
                "inout": "array read and written",
            }[arg.role or "in"]
            rows.append(f"| {arg.name} | {arg.c_type()} | {kind} | [{dims}] ({arg.dtype}, row-major, contiguous) |")
        elif arg.is_size:
            rows.append(f"| {arg.name} | {arg.c_type()} | size | any value >= 1 |")
        else:
            rows.append(f"| {arg.name} | {arg.c_type()} | scalar | {arg.value} in tests and benchmarks |")
    rows.append("| stream | cudaStream_t | stream | launch every kernel on it |")
    return rows


def _limits(manifest: Manifest, spec: KernelSpec, arch: str) -> list[str]:
    info = arch_info(arch)
    limits = spec.limits
    regs = limits.registers or info.regs_per_thread
    spills = (
        "no spilling at all (0 bytes)"
        if limits.spill_bytes == 0
        else "spilling allowed"
        if limits.spill_bytes is None
        else f"at most {limits.spill_bytes} bytes of spills"
    )
    shared = limits.shared_bytes or info.smem_per_block
    return [
        f"- at most {regs} registers per thread (ptxas report); {spills};",
        f"- at most {shared} bytes of shared memory per block "
        "(above 48 KiB of dynamic shared memory needs cudaFuncSetAttribute with "
        "cudaFuncAttributeMaxDynamicSharedMemorySize);",
        f"- compiled with: nvcc {' '.join(manifest.settings.nvcc_flags)} -arch={arch}",
    ]


def task_prompt(manifest: Manifest, spec: KernelSpec, arch: str, *, direction: str | None = None) -> str:
    """The first user turn: the whole task."""
    info = arch_info(arch)
    lines = [
        f"Write a fast CUDA kernel for an NVIDIA {info.family} GPU ({arch}). It will be compiled, checked "
        "against a reference and timed automatically.",
        "",
        "## Task",
        spec.description.strip(),
        "",
        *_contract_section(spec),
        "## Parameters",
        *_arg_rows(spec),
        "",
    ]
    reference = _reference_source(manifest, spec)
    if reference:
        lines += ["## Reference (numpy, the ground truth)", "```python", reference.rstrip(), "```", ""]
    lines += [*_checks_section(spec), "", *_target_section(manifest, spec, arch), *_tunables_section(spec)]
    if direction:
        lines += ["## Focus", f"Optimization direction for this attempt: {direction}.", ""]
    lines += [
        "## Answer",
        "Think as long as you need. Then answer with the complete .cu file in one ```cuda fenced block, as the "
        "last thing in your answer.",
    ]
    return "\n".join(lines) + "\n"


def _contract_section(spec: KernelSpec) -> list[str]:
    """What the function must be: its signature, its stream, concurrency, linkage, includes, sizes, alignment."""
    extra = sorted({_INCLUDES[a.dtype] for a in spec.args if a.dtype in _INCLUDES})
    includes = ["<cuda_runtime.h>", "<cstdint>", *extra]
    alignment = (
        f"Every array pointer is aligned to {spec.alignment} bytes."
        if spec.alignment
        else "Array pointers are only aligned to their element size (arrays may start at an offset): check "
        "the alignment before using vector loads, or handle an unaligned head."
    )
    return [
        "## Contract",
        "Write one complete CUDA C++ translation unit (a .cu file) that defines exactly this function:",
        "",
        "```cuda",
        f"{signature(spec)};",
        "```",
        "",
        "- It launches all its work on `stream` and returns `cudaGetLastError()` after launching (or "
        "`cudaSuccess` when there is nothing to do). No synchronization, no allocation, no host-device copies, "
        "no printing. The call must be capturable into a CUDA graph on `stream`: no device or stream syncs, no "
        "default stream, no streams of its own (the verifier replays one captured graph with new inputs).",
        "- It may be called concurrently on different streams: no state in `__device__` variables across calls; "
        "each call computes every output whatever the outputs hold, and reads nothing past an array's end.",
        "- Everything except this function is internal: kernels, helpers and constants are `static` or in an "
        "anonymous namespace, because several variants are linked into one library.",
        f"- Include what it uses ({', '.join(includes)}); no other libraries (no cuBLAS, CUTLASS, Thrust, PyTorch).",
        "- Pointers are device pointers; arrays are row-major and contiguous. Every size can be any value >= 1: "
        "handle tails (1, primes, non-multiples of 32).",
        f"- {alignment}",
        "",
    ]


def _checks_section(spec: KernelSpec) -> list[str]:
    """How the answer is checked (tolerance, test shapes) and timed (benchmark shapes, the work per call)."""
    tol = spec.tolerance
    lines = [
        "## Checks and timing",
        f"- Correctness: every output element within rtol={tol.rtol:g}, atol={tol.atol:g} of the reference, "
        "on the shapes " + "; ".join(format_shape(s) for s in spec.test_shapes) + ". Inputs must not be "
        "modified; outputs are checked for out-of-bounds writes.",
        "- Timing: " + "; ".join(format_shape(s) for s in spec.bench_shapes) + " (the first shape ranks kernels, "
        "by time and by its share of the hardware floor: the time the GPU's memory bandwidth and arithmetic "
        "throughput cannot beat).",
    ]
    if spec.flops:
        lines.append(f"- Arithmetic per call: {spec.flops} operations.")
    return lines


def _target_section(manifest: Manifest, spec: KernelSpec, arch: str) -> list[str]:
    """The GPU: its resources, and the limits the compiler's report is checked against."""
    info = arch_info(arch)
    return [
        f"## Target: {arch} ({info.family}, e.g. {info.example_gpu})",
        f"- {info.sm_count} SMs; {info.smem_per_sm // 1024} KiB shared memory per SM, at most "
        f"{info.smem_per_block // 1024} KiB per block; {info.regs_per_sm} registers per SM, at most "
        f"{info.regs_per_thread} per thread; at most {info.max_threads_per_block} threads per block.",
        f"- Tensor cores: {info.tensor_cores}.",
        "",
        "## Limits the compiler report is checked against (a kernel over any is rejected)",
        *_limits(manifest, spec, arch),
        "",
    ]


def _tunables_section(spec: KernelSpec) -> list[str]:
    """The manifest's tunable values, and how the answer may declare its own."""
    lines = ["## Tunable parameters"]
    for name, values in (spec.tunables or {}).items():
        lines.append(
            f"- `{name}` is tried with the values {', '.join(str(v) for v in values)} "
            f"(`-D{name}=value`); if you use it, guard a default with `#ifndef {name}`."
        )
    return [
        *lines,
        "- You may expose your own compile-time parameters: guard each with `#ifndef NAME` / `#define NAME "
        "default` / `#endif` and declare the values to try on one line, `// @tunable NAME: 128, 256, 512`. "
        "Each value set is compiled with `-DNAME=value`, and the fastest is kept.",
        "",
    ]


def describe(judged: Judged, spec: KernelSpec) -> str:
    """What happened to one candidate, for a prompt."""
    r = judged.result
    defines = (" with " + ", ".join(f"-D{k}={v}" for k, v in judged.defines.items())) if judged.defines else ""
    gate = ""
    if r.gate is not None:
        g = r.gate
        gate = (
            f" ptxas: {g.registers} registers per thread, {g.spill_stores + g.spill_loads} bytes of spills, "
            f"{g.shared_bytes} bytes of static shared memory."
        )
    if r.status == "passed" and r.timing is not None:
        t = r.timing
        shape = format_shape(spec.bench_shapes[0]) if spec.bench_shapes else "the ranking shape"
        text = f"It is correct and takes {t.median_us:.2f} us on {shape}"
        text += f" ({r.device})" if r.device else ""
        if t.share_of_floor is not None and t.floor_us is not None:
            text += f", {t.share_of_floor:.0%} of the hardware floor ({t.floor_us:.2f} us)"
        if t.speedup_vs_baseline is not None:
            text += f", {t.speedup_vs_baseline:.2f}x the baseline's speed"
        profiled = f" Nsight Compute: {profile_summary(r.profile)}." if r.profile is not None else ""
        return f"{text}{defines}.{gate}{profiled}"
    if r.status == "passed":
        return f"It compiled for {r.arch} and passed the static checks{defines} (not timed on a GPU yet).{gate}"
    detail = trim_log(compiler_message(r.detail)) if r.detail else "(no detail)"
    head = {
        "compile_error": f"It did not compile for {r.arch}{defines}:",
        "rejected": f"It was rejected{defines}:",
        "incorrect": f"It compiled but its results are wrong{defines}:",
        "crashed": f"It crashed on the GPU{defines}:",
        "timed_out": f"It did not finish in time{defines}:",
    }.get(r.status, f"It failed ({r.status}){defines}:")
    return f"{head}\n```\n{detail}\n```{gate}"


def _summary(judged: Judged, spec: KernelSpec, limit: int = 400) -> str:
    """One line on a failed candidate: what happened and the first error lines of its detail."""
    text = [ln.strip() for ln in describe(judged, spec).replace("```", "").splitlines() if ln.strip()]
    head, rest = text[:1], text[1:]
    errors = [ln for ln in rest if "error" in ln.lower()]
    return " ".join(head + (errors or rest)[:3])[:limit]


def feedback_prompt(
    spec: KernelSpec,
    *,
    parent: Judged | None,
    parent_in_conversation: bool,
    best: Sequence[Judged],
    failures: Sequence[Judged],
    notes: Sequence[str],
    direction: str | None,
) -> str:
    """A later round's request: what happened to ``parent`` (the kernel this conversation continues from),
    the best kernels so far, the other failures, and what to do next."""
    lines: list[str] = []
    if parent is not None:
        lines += [
            f"## Result of {'your kernel' if parent_in_conversation else parent.label}",
            describe(parent, spec),
            "",
        ]
        if not parent_in_conversation:
            lines += ["```cuda", trim_source(parent.source).rstrip(), "```", ""]
    others = [b for b in best if parent is None or b.source != parent.source]
    if best:
        lines.append("## Best kernels so far")
        for i, b in enumerate(best, 1):
            summary = describe(b, spec).split("\n", 1)[0]
            lines.append(f"{i}. {b.label}: {summary}")
        lines.append("")
        if others:
            top = others[0]
            lines += [f"The source of {top.label}:", "```cuda", trim_source(top.source).rstrip(), "```", ""]
    shown = [f for f in failures if parent is None or f.source != parent.source]
    if shown or notes:
        lines.append("## Other failures in this search")
        for f in shown:
            lines.append(f"- {f.label}: {_summary(f, spec)}")
        lines += [f"- {note}" for note in notes]
        lines.append("")
    focus = f", focusing on {direction}" if direction else ""
    verb = "Write the kernel"
    if parent is not None:
        verb = "Fix it" if parent.result.status != "passed" else "Make it faster"
    lines += [
        "## Next",
        f"{verb}{focus}. Keep the same contract: `{signature(spec)}`, all work on `stream`, everything else "
        "internal. Answer with the complete .cu file in one ```cuda fenced block, as the last thing in your "
        "answer.",
    ]
    return "\n".join(lines) + "\n"
