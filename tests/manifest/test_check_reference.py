"""``r1build check`` runs every numpy reference on the CPU at every test shape and holds its outputs to the spec:
a reference that raises, or returns the wrong count, shape or dtype, exits 2 naming the kernel, the shape and
the reference (at the kernel's ``reference`` key and line)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from r1build.cli.main import main
from r1build.evaluate.correctness.references import check_references
from r1build.manifest import load_manifest
from r1build.manifest.outputs import reference_outputs
from r1build.manifest.reference import ReferenceProblem

MANIFEST = """\
archs = ["sm_90"]

[[kernel]]
name = "pair"
description = "y = 2 x and z = x > 0 and c = count of positives per row, for a rows x cols matrix x."
args = [
  { name = "x", dtype = "float32", shape = ["rows", "cols"], role = "in" },
  { name = "y", dtype = "float32", shape = ["rows", "cols"], role = "out" },
  { name = "z", dtype = "bool", shape = ["rows", "cols"], role = "out" },
  { name = "c", dtype = "int32", shape = ["rows"], role = "out" },
  { name = "rows", dtype = "int32" },
  { name = "cols", dtype = "int32" },
]
reference = "reference:pair"
test-shapes = [{ rows = 1, cols = 1 }, { rows = 3, cols = 97 }]
bench-shapes = [{ rows = 64, cols = 64 }]
"""

GOOD = """\
import numpy as np


class Odd(Exception):
    def __str__(self):
        raise ValueError("a message that cannot be shown")


def odd():
    raise Odd()


def pair(x, rows, cols):
    y = (2 * x).astype(np.float32)
    z = x > 0
    c = (x > 0).sum(axis=1).astype(np.int32)
    return {BODY}
"""

# (id, what the function returns (or a statement replacing the return), fragment of the message)
CASES = [
    (
        "raises",
        "1 / 0 if rows == 3 else (y, z, c)",
        "at test shape rows=3, cols=97 (signed inputs): raised ZeroDivisionError",
    ),
    ("raises-on-large-inputs", "(y, z, c) if np.abs(x).max() < 50 else x[99999]", "(large inputs): raised IndexError"),
    ("exits", "__import__('sys').exit(3)", "raised SystemExit: 3"),
    # os._exit ended r1build itself with status 0: `check` passed with nothing checked
    ("ends-the-process", "__import__('os')._exit(0)", "raised ProcessExitCalled: called os._exit(0)"),
    # an exception whose message raises in turn was a traceback (exit 1)
    ("unprintable-exception", "odd()", "raised Odd: (its message cannot be shown: ValueError)"),
    # a BaseException that is no KeyboardInterrupt (GeneratorExit, a class of its own) was a traceback (exit 1)
    ("generator-exit", "(_ for _ in ()).throw(GeneratorExit('g'))", "raised GeneratorExit: g"),
    ("base-exception", "(_ for _ in ()).throw(type('Halt', (BaseException,), {})('stop'))", "raised Halt: stop"),
    (
        "unprintable-array-failure",
        "(y, z, type('A', (), {'__array__': lambda self, *a, **k: odd()})())",
        "output 'c' is not an array: Odd: (its message cannot be shown: ValueError)",
    ),
    ("too-few", "(y, z)", "returned 2 values for 3 outputs (y, z, c)"),
    ("too-many", "(y, z, c, c)", "returned 4 values for 3 outputs"),
    ("one-for-three", "y", "returned one value for 3 outputs"),
    ("none", "(y, None, c)", "returned nothing for output 'z'"),
    ("unknown-dict-key", "{'y': y, 'z': z, 'count': c}", "returned a dict with count, which are not outputs"),
    ("missing-dict-key", "{'y': y, 'z': z}", "returned nothing for output 'c'"),
    (
        "wrong-shape",
        "(y[:, :-1], z, c)",
        "at test shape rows=1, cols=1 (signed inputs): output 'y' has shape (1, 0), the spec declares (1, 1)",
    ),
    ("transposed", "(y.T, z, c)", "output 'y' has shape (97, 3), the spec declares (3, 97)"),
    ("flattened", "(y.reshape(-1), z, c)", "output 'y' has shape (291,), the spec declares (3, 97)"),
    ("int-for-float", "(y.astype(np.int64), z, c)", "output 'y' has dtype int64, the spec declares float32"),
    ("complex-for-float", "(y.astype(np.complex64), z, c)", "output 'y' has dtype complex64"),
    ("float-for-bool", "(y, z.astype(np.float32), c)", "output 'z' has dtype float32, the spec declares bool"),
    ("float-for-int", "(y, z, c.astype(np.float64))", "output 'c' has dtype float64, the spec declares int32"),
    ("object", "(y, z, [object()] * rows)", "output 'c' has dtype object"),
    ("string", "(y, z, 'abc')", "output 'c' has dtype <U3"),
    # the evaluator wants NaN exactly where the reference has one: a NaN-everywhere output passes only NaN writers
    (
        "nan-everywhere",
        "(np.full_like(y, np.nan), z, c)",
        "(signed inputs): output 'y' is NaN in every element: no kernel can be checked against it",
    ),
    ("nan-at-large-inputs", "(y if np.abs(x).max() < 50 else y * np.nan, z, c)", "(large inputs): output 'y' is NaN"),
]


def project(root: Path, body: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "kernels.toml").write_text(MANIFEST, encoding="utf-8")
    (root / "reference.py").write_text(GOOD.replace("{BODY}", body), encoding="utf-8")
    return root / "kernels.toml"


@pytest.mark.parametrize(("body", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_check_runs_the_reference_and_names_kernel_shape_and_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, fragment: str
) -> None:
    path = project(tmp_path / "p", body)
    code = main(["check", "-m", str(path)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    assert "Traceback" not in text
    line = next(ln for ln in text.splitlines() if ln.startswith("error:"))
    lineno = MANIFEST.splitlines().index('reference = "reference:pair"') + 1
    assert f"{path}:{lineno}: kernel[0].reference: the reference reference:pair of kernel 'pair'" in line, line
    assert fragment in line, line
    assert type(os._exit).__name__ == "builtin_function_or_method"  # the guard is gone once check returns


# (a busy loop of 4 s, not one for ever: the thread left behind would spin in this test process to its end)
@pytest.mark.parametrize(
    "body",
    [
        "exec('import time\\nt = time.monotonic()\\nwhile time.monotonic() - t < 4: pass')",
        "__import__('time').sleep(60)",
    ],
    ids=["loops", "waits"],
)
def test_a_reference_that_never_returns_is_reported_within_its_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, body: str
) -> None:
    import time

    monkeypatch.setenv("R1BUILD_REFERENCE_TIMEOUT", "0.5")
    path = project(tmp_path / "p", body)
    start = time.monotonic()
    code = main(["check", "-m", str(path)])
    text = "".join(capsys.readouterr())
    assert code == 2 and "Traceback" not in text, text
    assert "at test shape rows=1, cols=1 (signed inputs): did not return within 0.5 s" in text, text
    assert time.monotonic() - start < 10


def test_a_bad_reference_timeout_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("R1BUILD_REFERENCE_TIMEOUT", "soon")
    path = project(tmp_path / "p", "(y, z, c)")
    assert main(["check", "-m", str(path)]) == 2
    assert "R1BUILD_REFERENCE_TIMEOUT must be a number of seconds" in "".join(capsys.readouterr())


@pytest.mark.parametrize(
    "body",
    [
        "(y, z, c)",
        "[y, z, c]",
        "{'c': c, 'z': z, 'y': y}",
        "(y.astype(np.float64), z, c.astype(np.int64))",
        "(y[:, :, None], z, c)",
        "(np.where(x > 0, y, np.nan).astype(np.float32), z, c)",  # NaN in some elements: the reference's business
    ],
)
def test_good_references_pass(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str) -> None:
    path = project(tmp_path / "p", body)
    assert main(["check", "-m", str(path)]) == 0, capsys.readouterr()
    # every distribution at every test shape
    assert check_references(load_manifest(path)) == 2 * 5


def test_one_element_output_may_come_back_as_a_scalar(tmp_path: Path) -> None:
    path = project(tmp_path / "p", "(y, z, c)")
    spec = load_manifest(path).kernels[0]
    one = {"rows": 1, "cols": 1}
    got = reference_outputs(spec, one, (np.float32(2.0), np.True_, np.int32(1)))
    assert got["y"].shape == (1, 1) and got["c"].shape == (1,)
    with pytest.raises(ReferenceProblem, match="shape"):
        reference_outputs(
            spec, {"rows": 2, "cols": 1}, (np.zeros((2, 1), np.float32), np.zeros((2, 1), bool), np.int32(1))
        )


def test_the_repository_references_pass(capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parents[2]
    for manifest in (root / "kernels.toml", root / "sample_project" / "kernels.toml"):
        assert main(["check", "-m", str(manifest)]) == 0, capsys.readouterr()


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("import sys\nsys.exit(1)\n", "failed: SystemExit: 1"),
        ("import os\nos._exit(0)\n", "failed: ProcessExitCalled: called os._exit(0)"),
        ("class Halt(BaseException):\n    pass\n\n\nraise Halt('stop')\n", "failed: Halt: stop"),
    ],
    ids=["sys-exit", "os-exit", "base-exception"],
)
def test_a_reference_module_that_exits_on_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str, said: str
) -> None:
    path = project(tmp_path / "p", "(y, z, c)")
    (path.parent / "reference.py").write_text(source, encoding="utf-8")
    code = main(["check", "-m", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "kernel[0].reference: importing" in err and said in err, err


def test_a_reference_module_whose_getattr_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A module-level ``__getattr__`` that raises something else than AttributeError was a traceback (exit 1)."""
    path = project(tmp_path / "p", "(y, z, c)")
    (path.parent / "reference.py").write_text("def __getattr__(name):\n    raise RuntimeError('lazy')\n")
    code = main(["check", "-m", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "kernel[0].reference: looking up 'pair' in reference.py raised RuntimeError: lazy" in err, err


def test_a_reference_module_that_raises_an_unprintable_exception_on_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project(tmp_path / "p", "(y, z, c)")
    reference = path.parent / "reference.py"
    reference.write_text(reference.read_text(encoding="utf-8") + "\nodd()\n", encoding="utf-8")
    code = main(["check", "-m", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    assert "failed: Odd: (its message cannot be shown: ValueError)" in err, err


def test_a_reference_that_lowers_the_recursion_limit_leaves_check_working(tmp_path: Path) -> None:
    """It returns the right outputs; r1build's own code after it ran under its limit of 30 (a RecursionError
    traceback, exit 1). In a process of its own: the limit is the process's, and a test runner's stack is deeper."""
    done = _check_in_a_process(tmp_path, "__import__('sys').setrecursionlimit(30)")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "every reference checked" in done.stdout


def _check_in_a_process(tmp_path: Path, statement: str) -> subprocess.CompletedProcess[str]:
    """``r1build check`` in a process of its own, of a project whose right reference runs ``statement`` first."""
    path = project(tmp_path / "p", "(y, z, c)")
    reference = path.parent / "reference.py"
    text = reference.read_text(encoding="utf-8").replace(
        "def pair(x, rows, cols):\n", f"def pair(x, rows, cols):\n    {statement}\n"
    )
    assert statement in text
    reference.write_text(text, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "r1build.cli.main", "check", "-m", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "statement",
    [
        "__import__('sys').stdout.close()",
        "__import__('sys').stderr.close()",
        "setattr(__import__('sys'), 'stdout', open(__import__('os').devnull, 'w'))",
    ],
    ids=["closes-stdout", "closes-stderr", "replaces-stdout"],
)
def test_a_reference_that_closes_or_replaces_a_standard_stream_leaves_check_working(
    tmp_path: Path, statement: str
) -> None:
    """It returns the right outputs; r1build's next line to a closed stream was a ValueError traceback (exit 1), and
    to a replaced one was lost. In a process of its own: the streams are the process's."""
    done = _check_in_a_process(tmp_path, statement)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "every reference checked" in done.stdout, done.stdout + done.stderr


def test_a_process_forked_while_a_reference_runs_ends_with_its_own_exit() -> None:
    """The guard is this process's: a child forked meanwhile (a reference's multiprocessing pool ends its forked
    workers with os._exit) exits with its status instead of raising and running on as a second r1build."""
    import warnings

    from r1build.manifest.reference import EXIT_GUARD, ProcessExitCalled

    with EXIT_GUARD.held():
        with warnings.catch_warnings():  # Python 3.12 warns of fork() in a process with threads (pytest-xdist's)
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child
            os._exit(7)
        _, status = os.waitpid(pid, 0)
        with pytest.raises(ProcessExitCalled):
            os._exit(0)  # this process: refused
    assert os.waitstatus_to_exitcode(status) == 7


def test_references_are_staged_with_their_neighbours_where_a_confined_worker_reads_them(tmp_path: Path) -> None:
    """The GPU worker runs confined: it reads the evaluator's folder, not the project. The references it runs on
    cupy or torch travel as copies of their modules and the ``.py`` files beside them (a reference importing a
    neighbour works, as on a cluster worker), at their paths relative to the manifest, and nothing else of the
    project does (an H200 resolve of a project in /tmp found no module and timed no library)."""
    from r1build.manifest.reference import load_reference, stage_references

    project = tmp_path / "project"
    (project / "kernels" / "__pycache__").mkdir(parents=True)
    (project / "kernels" / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    reference = "from helpers import twice\n\n\ndef double(x):\n    return twice(x)\n"
    (project / "kernels" / "reference.py").write_text(reference)
    (project / "kernels" / "__pycache__" / "stale.py").write_text("raise SystemExit\n")
    (project / "torchref").mkdir()
    (project / "torchref" / "__init__.py").write_text("def double(x):\n    return x + x\n")
    (project / "kernels" / "secret.txt").write_text("not for the worker")
    (project / "notes.py").write_text("TOKEN = 'not for the worker'\n")
    into = tmp_path / "evaluator" / "references"
    refs = ["kernels.reference:double", "torchref:double", "kernels.reference:double"]

    staged = stage_references(project, refs, into)
    assert staged.parent == into
    found = sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file())
    assert found == ["kernels/helpers.py", "kernels/reference.py", "torchref/__init__.py"]
    assert load_reference(staged, "kernels.reference:double")(3) == 6
    assert load_reference(staged, "torchref:double")(4) == 8
    assert stage_references(project, refs, into) == staged  # the same bytes: the same folder, written once
    assert [p.name for p in into.iterdir()] == [staged.name]  # no scratch folder left behind

    (project / "kernels" / "helpers.py").write_text("def twice(x):\n    return x * 2\n")
    again = stage_references(project, refs, into)
    assert again != staged and (again / "kernels" / "helpers.py").read_text().endswith("x * 2\n")
    with pytest.raises(ReferenceProblem, match="not found next to the manifest"):
        stage_references(project, ["missing.module:f"], into)
