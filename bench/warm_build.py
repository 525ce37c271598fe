"""Warm build of sample_project: r1build's backend against plain scikit-build-core with the same ``.cu`` files.

Both projects are built once cold, then ``--reps`` times warm, interleaved (the order alternates each round),
each in the build directory it used before, so a warm build is what a developer's edit-free rebuild costs:
a fresh Python process runs the backend's ``build_wheel`` hook the way a frontend does, scikit-build-core
re-runs CMake's configure step, Ninja finds nothing to do, and the wheel is packed.

* **r1build**: a copy of ``sample_project/`` built by ``r1build.build`` (r1build a byte-compiled snapshot of the
  checkout, as an installed wheel has it) with ``R1BUILD_LOCKED=1`` and a warm
  cache: the backend's warm-build stamp (``r1build/build/stamp.py``) proves that nothing resolution reads has
  changed, so the generated files are used as they are.
* **r1build, resolving**: the same with the stamp deleted before each build: every kernel × arch is resolved
  from the lock, its gate result found in the cache, and no generated file rewritten (what a warm build costs
  when the stamp cannot be used, e.g. the first build after an edit to the manifest).
* **plain**: the same project with r1build taken out: the generated ``.cu`` files and header checked in under
  ``kernels/``, a ``CMakeLists.txt`` that compiles them directly (same archs, flags and CUDA runtime), and
  ``build-backend = "scikit_build_core.build"``.

The ratio of the medians (r1build / plain) is the cost of r1build on a warm build; target at most 1.10, aim
1.02. On a machine shared with other work the paired figure is the one to read: each round's r1build build over
the plain build of the same round, their median with its quartiles and a 95 % confidence interval (order
statistics, no assumption about the distribution), for the wall time and for the CPU time of the build's
processes (steadier under load). Also measured in the same run: the resolving series, ``prepare_build`` alone
in a fresh process (import included: what a build that cannot use the stamp adds), and the warm path alone in
a fresh process that has already imported scikit-build-core (``import r1build.build`` and the stamp check, in
CPU time: what r1build adds to a warm build). With ``--frontend pip`` the builds go through
``pip wheel --no-build-isolation`` instead of the bare hook.

Writes ``bench/results/warm_build.json`` and ``.md``; exits 1 when the ratio misses the target.

    python bench/warm_build.py [--reps 7] [--frontend hook|pip] [--workdir DIR] [--out bench/results]
"""

from __future__ import annotations

import argparse
import compileall
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import command_line, host_info, utc_now, write_results

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_project"
TARGET = 1.10
AIM = 1.02

PLAIN_CMAKE = """\
# sample_project without r1build: the generated kernels checked in and compiled directly, with the same
# settings r1build's generated CMake file uses (real code for each arch, PIC, static CUDA runtime, C++17, -O3).
cmake_minimum_required(VERSION 3.18...3.31)
project(r1sample LANGUAGES CXX CUDA)

find_package(Python 3.10 REQUIRED COMPONENTS Interpreter Development.Module)
find_package(nanobind CONFIG REQUIRED)
find_package(CUDAToolkit REQUIRED)

add_library(kernels STATIC {sources})
set_target_properties(kernels PROPERTIES
  CUDA_ARCHITECTURES "{archs}"
  POSITION_INDEPENDENT_CODE ON
  CUDA_SEPARABLE_COMPILATION OFF
  CUDA_RUNTIME_LIBRARY None
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_EXTENSIONS OFF
)
target_compile_options(kernels PRIVATE -O3)
target_include_directories(kernels PUBLIC "${{CMAKE_CURRENT_SOURCE_DIR}}/kernels")
target_link_libraries(kernels PUBLIC CUDA::cudart_static)

nanobind_add_module(_ops NB_STATIC src/ext.cpp)
target_link_libraries(_ops PRIVATE kernels)
install(TARGETS _ops LIBRARY DESTINATION r1sample)
"""

PREPARE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "t0 = time.perf_counter()\n"
    "from r1build.resolve import prepare_build\n"
    "prepare_build(Path(sys.argv[1]), locked=True)\n"
    "print(f'prepare_build_s={time.perf_counter() - t0:.6f}')\n"
)


WARM = (
    "import time\n"
    "import contextlib, hashlib, json, logging, pathlib, shutil\n"  # what scikit-build-core's build_wheel imports too
    "from scikit_build_core import build\n"
    "t0 = time.process_time()\n"
    "import r1build.build as backend\n"
    "settings = backend.warm_kernel_settings({})\n"
    "print(f'warm_s={time.process_time() - t0:.6f} used={settings is not None}')\n"
)
"""The warm path alone, in CPU time (on a shared machine the wall time of a few milliseconds is mostly waiting)."""


def paired(ratios: list[float]) -> dict[str, Any]:
    """The median of per-round ratios, its quartiles, and a 95 % confidence interval of the median from order
    statistics (distribution-free: the interval between the j-th smallest and j-th largest ratio, j the largest
    with P(Binomial(n, 1/2) < j) <= 2.5 %; none for fewer than 6 rounds)."""
    xs = sorted(ratios)
    n = len(xs)
    cumulative, j = 0.0, 0
    while j < n and cumulative + math.comb(n, j) / 2**n <= 0.025:
        cumulative += math.comb(n, j) / 2**n
        j += 1
    quartiles = statistics.quantiles(xs, n=4) if n >= 2 else [xs[0], xs[0], xs[0]]
    return {
        "median": round(statistics.median(xs), 4),
        "q1": round(quartiles[0], 4),
        "q3": round(quartiles[2], 4),
        "ci95": [round(xs[j - 1], 4), round(xs[n - j], 4)] if j else None,
        "min": round(xs[0], 4),
        "max": round(xs[-1], 4),
        "rounds": n,
    }


def tool_version(cmd: list[str]) -> str:
    """First line of a tool's version output (``unknown`` when it cannot run)."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1] if cmd[0].endswith("nvcc") else (lines[0] if lines else "unknown")


def build_host() -> dict[str, Any]:
    """The host, and the versions of every tool in the build."""
    import nanobind
    import scikit_build_core

    return host_info(
        scikit_build_core=scikit_build_core.__version__,
        nanobind=nanobind.__version__,
        cmake=tool_version(["cmake", "--version"]),
        ninja=tool_version(["ninja", "--version"]),
        nvcc=tool_version(["nvcc", "--version"]),
        device="none: a build compiles on the host CPU, no GPU involved",
    )


def make_plain(r1_project: Path, dest: Path, archs: list[str]) -> Path:
    """The plain scikit-build-core copy of the sample, from the r1build copy's generated files."""
    generated = r1_project / ".r1build" / "generated"
    shutil.copytree(r1_project / "src", dest / "src")
    kernels = dest / "kernels"
    kernels.mkdir()
    sources = sorted(generated.glob("*.cu"))
    for path in [*sources, generated / "r1build_kernels.h"]:
        shutil.copy2(path, kernels / path.name)
    pyproject = (r1_project / "pyproject.toml").read_text(encoding="utf-8")
    pyproject = pyproject.replace('requires = ["r1build", ', "requires = [")
    pyproject = pyproject.replace('build-backend = "r1build.build"', 'build-backend = "scikit_build_core.build"')
    assert "r1build.build" not in pyproject, "the sample's pyproject.toml changed shape: update make_plain"
    (dest / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    shutil.copy2(r1_project / "README.md", dest / "README.md")
    # the code r1build embeds by default: machine code of each arch, and PTX of the highest too ("90")
    numbers = [a.removeprefix("sm_") for a in archs]
    cuda_archs = ";".join([f"{n}-real" for n in numbers[:-1]] + numbers[-1:])
    listed = " ".join(f"kernels/{p.name}" for p in sources)
    (dest / "CMakeLists.txt").write_text(PLAIN_CMAKE.format(sources=listed, archs=cuda_archs), encoding="utf-8")
    return dest


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Builder:
    """Builds one project into one persistent build directory and times it."""

    def __init__(
        self,
        name: str,
        project: Path,
        build_dir: Path,
        wheel_dir: Path,
        env: dict[str, str],
        frontend: str,
        *,
        forget: Path | None = None,
    ) -> None:
        self.name = name
        self.forget = forget
        self.project = project
        self.build_dir = build_dir
        self.wheel_dir = wheel_dir
        self.env = env
        self.frontend = frontend
        self.backend = re.search(
            r'build-backend = "([^"]+)"', (project / "pyproject.toml").read_text(encoding="utf-8")
        ).group(1)  # type: ignore[union-attr]
        self.times: list[float] = []
        self.cpu: list[float] = []
        """CPU seconds of each timed build's process tree (user + system): on a machine shared with other work,
        far steadier than the wall time."""
        self.compiles: list[int] = []
        self.reused = 0

    def command(self) -> list[str]:
        """The build command: the backend's hook in a fresh process, or pip wheel without isolation."""
        if self.frontend == "pip":
            return [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-v",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(self.wheel_dir),
                "--config-settings",
                f"build-dir={self.build_dir}",
                str(self.project),
            ]
        code = (
            f"import sys, {self.backend} as backend; "
            "print(backend.build_wheel(sys.argv[1], {'build-dir': sys.argv[2]}))"
        )
        return [sys.executable, "-c", code, str(self.wheel_dir), str(self.build_dir)]

    def build(self, *, record: bool) -> str:
        if self.forget is not None:
            self.forget.unlink(missing_ok=True)
        cpu0 = _children_cpu()
        start = time.perf_counter()
        proc = subprocess.run(
            self.command(),
            cwd=self.project,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=1200,
            check=False,
        )
        elapsed = time.perf_counter() - start
        cpu = _children_cpu() - cpu0
        if proc.returncode != 0:
            sys.exit(f"{self.name} build failed ({proc.returncode}):\n{proc.stdout[-6000:]}")
        if record:
            self.times.append(elapsed)
            self.cpu.append(cpu)
            self.compiles.append(len(re.findall(r"Building (?:CUDA|CXX) object", proc.stdout)))
            self.reused += "unchanged since the last locked build" in proc.stdout
        return proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11, help="warm builds of each kind (default 11)")
    parser.add_argument(
        "--frontend",
        choices=["hook", "pip"],
        default="hook",
        help="how to invoke the backend (default: its hook in a fresh process)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="where the copies and build dirs go (temp)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="results folder")
    args = parser.parse_args(argv)

    load_start = os.getloadavg()[0]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="r1build-warm-build-"))
    work.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns(".r1build", "build", "dist", "__pycache__", "tests")
    r1_project = work / "r1build" / "sample_project"
    if r1_project.exists():
        shutil.rmtree(work / "r1build")
    shutil.copytree(SAMPLE, r1_project, ignore=ignore)

    # a snapshot of r1build, as an installed copy would be: edits to the checkout during the run change nothing
    python_dir = work / "python"
    shutil.rmtree(python_dir, ignore_errors=True)
    shutil.copytree(ROOT / "r1build", python_dir / "r1build", ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(str(python_dir / "r1build"), quiet=1)  # byte-compiled, as pip installs a wheel
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(python_dir), env.get("PYTHONPATH", "")) if p)
    env["R1BUILD_CACHE_DIR"] = str(work / "cache")
    env["R1BUILD_LOCKED"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"

    r1 = Builder("r1build", r1_project, work / "r1build" / "build", work / "r1build" / "wheels", env, args.frontend)
    resolving = Builder(
        "r1build, resolving",
        r1_project,
        work / "r1build" / "build",
        work / "r1build" / "wheels",
        env,
        args.frontend,
        forget=r1_project / ".r1build" / "build-stamp.json",
    )
    # the committed lock is used as it is when current; otherwise the copy is locked anew (no GPU: baselines)
    lock = subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", "lock", "--offline", "-m", str(r1_project)],
        env=env | {"R1BUILD_LOCKED": ""},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if lock.returncode != 0:
        sys.exit(f"r1build lock failed ({lock.returncode}):\n{lock.stdout}{lock.stderr}")
    lock_refreshed = "updated" in lock.stdout + lock.stderr
    print(f"cold build of the r1build copy in {work} ...", file=sys.stderr)
    r1.build(record=False)  # fills the cache, the build dir and .r1build/generated

    sys.path.insert(0, str(ROOT))
    from r1build.manifest import find_manifest, load_manifest

    manifest = load_manifest(find_manifest(r1_project))
    archs = sorted({a for spec in manifest.kernels for a in manifest.archs_of(spec)})
    plain_project = work / "plain" / "sample_project"
    if plain_project.exists():
        shutil.rmtree(work / "plain")
    make_plain(r1_project, plain_project, archs)
    plain_env = {k: v for k, v in env.items() if not k.startswith("R1BUILD_")}
    plain = Builder(
        "plain", plain_project, work / "plain" / "build", work / "plain" / "wheels", plain_env, args.frontend
    )
    print("cold build of the plain copy ...", file=sys.stderr)
    plain.build(record=False)

    # one untimed warm build each, then interleaved timed ones (the order rotates every round)
    r1.build(record=False)
    plain.build(record=False)
    prepare: list[float] = []
    warm: list[float] = []
    builders = [r1, plain, resolving]
    for rep in range(args.reps):
        for builder in builders[rep % 3 :] + builders[: rep % 3]:
            builder.build(record=True)
        out = subprocess.run(
            [sys.executable, "-c", PREPARE, str(r1_project)],
            cwd=r1_project,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout
        prepare.append(float(out.strip().rpartition("=")[2]))
        out = subprocess.run(
            [sys.executable, "-c", WARM], cwd=r1_project, env=env, capture_output=True, text=True, check=True
        ).stdout
        if not out.strip().endswith("used=True"):
            sys.exit(f"the warm path did not use the stamp: {out}")
        warm.append(float(out.split()[0].partition("=")[2]))
        print(
            f"rep {rep + 1}/{args.reps}: r1build {r1.times[-1]:.3f} s, plain {plain.times[-1]:.3f} s, "
            f"resolving {resolving.times[-1]:.3f} s, prepare_build {prepare[-1]:.3f} s, warm path "
            f"{warm[-1] * 1000:.2f} ms",
            file=sys.stderr,
        )

    r1_median = statistics.median(r1.times)
    plain_median = statistics.median(plain.times)
    resolving_median = statistics.median(resolving.times)
    ratio = r1_median / plain_median
    result = {
        "benchmark": "warm_build",
        "date": utc_now(),
        "command": command_line(__file__, argv),
        "host": build_host(),
        "load_average_1min": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
        "frontend": args.frontend,
        "reps": args.reps,
        "kernels": [spec.name for spec in manifest.kernels],
        "archs": archs,
        "r1build_s": [round(t, 4) for t in r1.times],
        "plain_s": [round(t, 4) for t in plain.times],
        "r1build_median_s": round(r1_median, 4),
        "plain_median_s": round(plain_median, 4),
        "ratio": round(ratio, 4),
        "target": TARGET,
        "aim": AIM,
        "stamp_reused": f"{r1.reused}/{len(r1.times)}",
        "lock_refreshed_in_copy": lock_refreshed,
        "paired_ratio": round(statistics.median(a / b for a, b in zip(r1.times, plain.times, strict=True)), 4),
        "paired_wall": paired([a / b for a, b in zip(r1.times, plain.times, strict=True)]),
        "paired_cpu": paired([a / b for a, b in zip(r1.cpu, plain.cpu, strict=True)]),
        "r1build_cpu_s": [round(t, 4) for t in r1.cpu],
        "plain_cpu_s": [round(t, 4) for t in plain.cpu],
        "cpu_ratio": round(statistics.median(r1.cpu) / statistics.median(plain.cpu), 4),
        "paired_cpu_ratio": round(statistics.median(a / b for a, b in zip(r1.cpu, plain.cpu, strict=True)), 4),
        "resolving_s": [round(t, 4) for t in resolving.times],
        "resolving_median_s": round(resolving_median, 4),
        "resolving_ratio": round(resolving_median / plain_median, 4),
        "prepare_build_s": [round(t, 4) for t in prepare],
        "prepare_build_median_s": round(statistics.median(prepare), 4),
        "warm_path_ms": [round(t * 1000, 3) for t in warm],
        "warm_path_median_ms": round(statistics.median(warm) * 1000, 3),
        "warm_compiles": {
            "r1build": max(r1.compiles),
            "plain": max(plain.compiles),
            "resolving": max(resolving.compiles),
        },
        "passed": ratio <= TARGET and r1.reused == len(r1.times),
    }
    cis = [result["paired_wall"]["ci95"], result["paired_cpu"]["ci95"]]
    result["aim_met"] = all(ci is not None and ci[1] <= AIM for ci in cis)
    """The aim, reliably: the upper end of the 95 % interval of the paired median, wall and CPU, at most 1.02."""
    write_results(args.out, "warm_build", result, render_markdown(result))
    return 0 if result["passed"] else 1


def _interval(ci: list[float] | None) -> str:
    return "-" if ci is None else f"{ci[0]:.3f} - {ci[1]:.3f}"


def render_markdown(r: dict[str, Any]) -> str:
    """The results as a short Markdown report."""
    host = r["host"]
    verdict = "meets" if r["passed"] else "MISSES"
    lines = [
        "# Warm build: r1build backend vs plain scikit-build-core",
        "",
        f"- date: {r['date']}",
        f"- command: `{r['command']}`",
        f"- host: {host['cpu']}, {host['cpus']} CPUs, {host['os']}; {host['device']}; 1-minute load average "
        f"{r['load_average_1min']['start']} at the start, {r['load_average_1min']['end']} at the end (a shared "
        "machine: single runs vary by 10-30 %, hence interleaving and medians)",
        f"- tools: Python {host['python']}, scikit-build-core {host['scikit_build_core']}, nanobind "
        f"{host['nanobind']}, {host['cmake']}, ninja {host['ninja']}, nvcc `{host['nvcc']}`",
        f"- project: sample_project, kernels {', '.join(r['kernels'])} for {', '.join(r['archs'])}; "
        f"frontend: {r['frontend']}; {r['reps']} warm builds each, interleaved",
        "",
        "| build | median (s) | all runs (s) | objects recompiled |",
        "|---|---|---|---|",
        f"| r1build (`r1build.build`, locked, warm cache) | {r['r1build_median_s']:.3f} | "
        f"{', '.join(f'{t:.3f}' for t in r['r1build_s'])} | {r['warm_compiles']['r1build']} |",
        f"| plain (`scikit_build_core.build`, same .cu checked in) | {r['plain_median_s']:.3f} | "
        f"{', '.join(f'{t:.3f}' for t in r['plain_s'])} | {r['warm_compiles']['plain']} |",
        f"| r1build, resolving (stamp deleted before each build) | {r['resolving_median_s']:.3f} | "
        f"{', '.join(f'{t:.3f}' for t in r['resolving_s'])} | {r['warm_compiles']['resolving']} |",
        "",
        f"**ratio r1build / plain: {r['ratio']:.3f}** ({verdict} the target <= {r['target']:.2f}; aim {r['aim']:.2f}); "
        f"the warm-build stamp was used in {r['stamp_reused']} r1build builds. Median of the per-round ratios "
        f"(each r1build build over the plain build of the same round): {r['paired_ratio']:.3f}.",
        "",
        f"CPU time of each build's process tree (user + system; on a shared machine far steadier than the wall "
        f"time): r1build median {statistics.median(r['r1build_cpu_s']):.3f} s, plain "
        f"{statistics.median(r['plain_cpu_s']):.3f} s, **ratio {r['cpu_ratio']:.3f}**; median of the per-round "
        f"ratios {r['paired_cpu_ratio']:.3f}.",
        "",
        "Paired, each round's r1build build over the plain build of the same round (the figure to read on a shared "
        "machine):",
        "",
        "| r1build ÷ plain, per round | median | quartiles | 95 % interval of the median | min - max | rounds |",
        "|---|---:|---:|---:|---:|---:|",
        *[
            f"| {label} | **{q['median']:.3f}** | {q['q1']:.3f} - {q['q3']:.3f} | "
            f"{_interval(q['ci95'])} | "
            f"{q['min']:.3f} - {q['max']:.3f} | {q['rounds']} |"
            for label, q in (("wall time", r["paired_wall"]), ("CPU time of the build's processes", r["paired_cpu"]))
        ],
        "",
        f"Aim 1.02 reliably (the upper end of both intervals at most {r['aim']:.2f}): "
        f"{'met' if r['aim_met'] else 'not met'}.",
        "",
        f"Resolving on every build instead: ratio {r['resolving_ratio']:.3f}.",
        "",
        f"`prepare_build` alone in a fresh process (import, resolve from the lock, cached gate, emit): median "
        f"{r['prepare_build_median_s']:.3f} s ({', '.join(f'{t:.3f}' for t in r['prepare_build_s'])}).",
        "",
        f"The warm path alone in a fresh process that has imported scikit-build-core and the standard modules its "
        f"build imports (`import r1build.build` and the stamp check, what r1build adds to a warm build), CPU time: "
        f"median {r['warm_path_median_ms']:.2f} ms "
        f"(min {min(r['warm_path_ms']):.2f}, max {max(r['warm_path_ms']):.2f}).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
