"""Shared fixtures and the ``gpu`` marker's skip logic."""

from __future__ import annotations

import functools
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from r1build.cache import Cache
from r1build.cli.main import main
from r1build.events import Event, Note, sink
from r1build.keys import decision_key
from r1build.lock import read_lock
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from tests.gate_seed import seed_gate_verdicts
from tests.support.decisions import plant_measured

ROOT = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """Visible CUDA GPUs (0 when cupy is missing or no driver answers)."""
    try:
        import cupy
    except Exception:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker more than the cores this process may use. Many tests wait rather than compute (chat
    and cache servers answering on a timer, a black-holed remote's timeout, processes starting), and with one worker
    a core those waits left a core idle: the whole suite took 356 s with 2 workers and 330 s with 3 on the 2-core
    machine (docs/development.md)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cores + 1


def pytest_configure(config: pytest.Config) -> None:
    """Where no sandbox runs (a fresh machine without bubblewrap), the suite's other tests compile and run the
    model-written candidates they make unconfined (``R1BUILD_SANDBOX=off`` for the session, its subprocesses
    included), and the sandbox's own tests skip, saying why; ``R1BUILD_TEST_REQUIRE_SANDBOX=1`` (``.ci/run``) makes
    that an error instead."""
    from tests.sandbox.support import PROBLEM

    if PROBLEM is not None:
        os.environ["R1BUILD_SANDBOX"] = "off"
    # A run started in the background of a non-interactive shell (`cmd &`, `nohup ... &`) inherits SIGINT ignored,
    # and Python then never raises KeyboardInterrupt, in this process or in the r1build processes the tests start
    # (an ignored signal stays ignored across exec): the Ctrl-C tests need SIGINT as a terminal delivers it.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_report_header(config: pytest.Config) -> str:
    from tests.sandbox.support import PROBLEM

    if PROBLEM is None:
        return "sandbox: bubblewrap works here; model-written candidates are compiled and run confined"
    return f"sandbox: {PROBLEM}: model-written candidates run unconfined (R1BUILD_SANDBOX=off), tests/sandbox skips"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--heavy",
        action="store_true",
        help="also run the tests marked heavy, which a plain run leaves out (CI runs them: -m heavy)",
    )


def runs_heavy(config: pytest.Config) -> bool:
    """Whether this run keeps the tests marked ``heavy``: a plain ``pytest`` (no ``-m``, no paths of its own) leaves
    them out, to stay within six minutes on two cores; ``--heavy``, any ``-m`` expression (``-m heavy`` runs only
    them, ``-m gpu`` every GPU test) or test paths named on the command line keep them."""
    if config.getoption("heavy") or config.option.markexpr:
        return True
    testpaths = set(config.getini("testpaths"))
    return any(arg not in testpaths for arg in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not runs_heavy(config):
        heavy = [item for item in items if "heavy" in item.keywords]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            items[:] = [item for item in items if "heavy" not in item.keywords]
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU visible (cupy missing or no device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def find_cuobjdump() -> str | None:
    """cuobjdump from PATH, the CUDA toolkit, or the ``nvidia-cuda-cuobjdump`` wheel (a test extra)."""
    import os
    import site

    found = shutil.which("cuobjdump")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in homes:
        if home and (Path(home) / "bin" / "cuobjdump").is_file():
            return str(Path(home) / "bin" / "cuobjdump")
    for base in site.getsitepackages():
        for candidate in sorted((Path(base) / "nvidia").glob("cu*/bin/cuobjdump")):
            return str(candidate)
    return None


@pytest.fixture(autouse=True)
def _user_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """r1build's user state folder (the key that signs replay records, and the records) of each test, away from
    the user's own: a command a test runs records nothing in the home folder."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))


@pytest.fixture(autouse=True)
def _signal_handlers(request: pytest.FixtureRequest) -> Iterator[None]:
    """The process's SIGINT and SIGTERM handlers as each test found them: a test (or the library under it) that
    leaves another handler behind fails, naming the signal, instead of the Ctrl-C tests that later run in the same
    worker process (which then never see a KeyboardInterrupt)."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    left = {sig: signal.getsignal(sig) for sig in before}
    changed = [sig.name for sig in before if left[sig] != before[sig]]
    for sig, handler in before.items():
        signal.signal(sig, handler)
    if changed:
        pytest.fail(f"{request.node.nodeid} left another handler for {', '.join(changed)}: {left}", pytrace=False)


@pytest.fixture
def cuobjdump() -> str:
    """Path of cuobjdump; skips the test where none is installed."""
    found = find_cuobjdump()
    if found is None:
        pytest.skip("cuobjdump not installed (the test extra nvidia-cuda-cuobjdump provides it)")
    return found


@pytest.fixture
def root_copy(tmp_path: Path) -> Path:
    """A copy of the root manifest with its references and baselines, in a temp folder."""
    shutil.copy(ROOT / "kernels.toml", tmp_path / "kernels.toml")
    shutil.copytree(ROOT / "kernels", tmp_path / "kernels", ignore=shutil.ignore_patterns("_r1build", "__pycache__"))
    return tmp_path


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty cache directory, also set as R1BUILD_CACHE_DIR."""
    d = tmp_path / "cache"
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(d))
    yield d


VEC4 = "kernels/silu_mul_vec4.cu"


def narrow_root_manifest(root_copy: Path) -> Path:
    """The root manifest copy narrowed to silu_mul on sm_90 (one kernel, one arch: short compiles)."""
    toml = root_copy / "kernels.toml"
    head, _, _ = toml.read_text(encoding="utf-8").partition("# Row softmax")
    toml.write_text(head.replace('archs = ["sm_80", "sm_90"]', 'archs = ["sm_90"]', 1), encoding="utf-8")
    return toml


def _lock_to_vec4(project: Path, cache_dir: Path) -> None:
    """The narrowed ``project`` locked to silu_mul_vec4.cu with BLOCK=256: the decision a GPU run records for it
    stored in ``cache_dir``, then ``r1build lock`` (which gates the winner)."""
    m = load_manifest(project / "kernels.toml")
    spec = m.kernel("silu_mul")
    vec4 = Candidate((project / VEC4).read_text(encoding="utf-8"), Origin("file", VEC4), {"BLOCK": 256})
    with Cache(cache_dir) as cache:
        plant_measured(cache, vec4, key=decision_key(m, spec, "sm_90"), kernel=spec.name, time_us=41.5, samples=200)
    assert main(["lock", "-m", str(project), "--offline", "--no-gpu", "--cache-dir", str(cache_dir)]) == 0
    entry = read_lock(project / "kernels.lock").entry("silu_mul", "sm_90")  # type: ignore[union-attr]
    assert entry is not None and entry.defines == {"BLOCK": 256} and entry.winner == vec4.digest


@pytest.fixture
def locked(root_copy: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The narrowed project, locked to a measured, tuned winner (silu_mul_vec4.cu with BLOCK=256). The cache
    starts with the winner's gate verdict, computed once per process (tests/gate_seed.py)."""
    for var in ("DEEPSEEK_API_KEY", "OPENAI_API_KEY", "R1BUILD_BASE_URL", "NVIDIA_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    narrow_root_manifest(root_copy)
    seed_gate_verdicts(cache_dir, root_copy, _lock_to_vec4)
    _lock_to_vec4(root_copy, cache_dir)
    return root_copy


@pytest.fixture
def notes() -> Iterator[list[Note]]:
    """The notes (warnings, information) emitted while the test runs."""
    seen: list[Note] = []

    def collect(event: Event) -> None:
        if isinstance(event, Note):
            seen.append(event)

    with sink(collect):
        yield seen
