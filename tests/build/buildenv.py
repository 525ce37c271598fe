"""Helpers of the build tests: the venv handle, project copies, sdists, cuobjdump (fixtures: conftest.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ROOT / "tests" / "packages"
SAMPLE = ROOT / "sample_project"

# what a project copy leaves out: outputs of earlier builds and caches
_COPY_IGNORE = shutil.ignore_patterns(".r1build", "build", "dist", "__pycache__", ".pytest_cache", "*.egg-info")


@dataclass(frozen=True)
class BuildEnv:
    """A virtual environment with r1build installed, and how to run things in it."""

    root: Path
    """The venv."""
    wheels: Path
    """Folder holding the r1build wheel (a ``--find-links`` target for isolated builds)."""
    cache_dir: Path
    """``R1BUILD_CACHE_DIR`` of every build in this session."""
    isolated: bool
    """Whether frontends build with build isolation (False with ``R1BUILD_TEST_SYSTEM_SITE=1``)."""

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.root / "bin" / "python"

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a command in the venv: its bin first on PATH, nothing of this checkout."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update(
            PATH=f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            VIRTUAL_ENV=str(self.root),
            R1BUILD_CACHE_DIR=str(self.cache_dir),
            R1BUILD_OFFLINE="1",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        # a machine without a package index: where its packages live (never this checkout), see conftest.py
        site_path = os.environ.get("R1BUILD_TEST_SITE_PATH")
        if site_path:
            env["PYTHONPATH"] = site_path
        env.update(extra or {})
        return env

    def run(
        self, args: Sequence[str | Path], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """Run a command in the venv; stdout and stderr together in ``.stdout``."""
        return subprocess.run(
            [str(a) for a in args],
            cwd=cwd,
            env=self.env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )

    def check(
        self, args: Sequence[str | Path], *, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 600
    ) -> str:
        """Run a command that must succeed; its output."""
        proc = self.run(args, cwd=cwd, env=env, timeout=timeout)
        assert proc.returncode == 0, f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout[-6000:]}"
        return proc.stdout

    def pip_wheel(
        self,
        source: Path,
        out: Path,
        *,
        env: Mapping[str, str] | None = None,
        isolated: bool | None = None,
        options: Sequence[str] = (),
    ) -> subprocess.CompletedProcess[str]:
        """``pip wheel`` of a project folder or sdist, as a user would build it (``options``: more of pip's, such as
        ``-Cbuild-dir=build``)."""
        isolation = self.isolated if isolated is None else isolated
        args: list[str | Path] = [self.python, "-m", "pip", "wheel", "-v", "--no-deps", *options, "-w", out, source]
        args += ["--find-links", self.wheels] if isolation else ["--no-build-isolation"]
        return self.run(args, cwd=out.parent, env=env)

    def locked_wheel(
        self, sdist: Path, work: Path, *, isolated: bool | None = None
    ) -> tuple[Path, subprocess.CompletedProcess[str]]:
        """The wheel ``pip wheel`` builds from ``sdist`` as an installer with no GPU, key or cache does
        (``R1BUILD_LOCKED=1``, an empty cache; unpacked, built and cached under ``work``), asserted to build; with
        pip's log."""
        unpacked = unpack_sdist(sdist, work / "unpacked")
        out = work / "wheels"
        out.mkdir()
        env = {"R1BUILD_LOCKED": "1", "R1BUILD_CACHE_DIR": str(work / "empty-cache")}
        proc = self.pip_wheel(unpacked, out, env=env, isolated=isolated)
        assert proc.returncode == 0, proc.stdout[-8000:]
        (wheel,) = out.glob("*.whl")
        return wheel, proc

    def hook(
        self, project: Path, hook: str, out: Path, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Call one PEP 517 hook of ``r1build.build`` the way a frontend does: a fresh process in the project."""
        code = f"import r1build.build as backend; print(backend.{hook}({str(out)!r}))"
        return self.run([self.python, "-c", code], cwd=project, env=env)

    def site_packages(self) -> Path:
        """The venv's site-packages."""
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        out = self.check([self.python, "-c", code], cwd=self.root)
        return Path(out.strip())


def copy_project(source: Path, dest: Path) -> Path:
    """A copy of a project folder without build outputs, so builds never write into this checkout."""
    shutil.copytree(source, dest, ignore=_COPY_IGNORE)
    return dest


def unpack_sdist(sdist: Path, dest: Path) -> Path:
    """Unpack an sdist; its top folder."""
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - Pythons without extraction filters
            tar.extractall(dest)
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


def sdist_names(sdist: Path, top: str) -> set[str]:
    """The paths an sdist holds, relative to its top folder ``top`` (every member must lie in it)."""
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert all(name == top or name.startswith(f"{top}/") for name in names), sorted(names)
    return {name[len(top) + 1 :] for name in names if name != top}


def find_cuobjdump(env: BuildEnv) -> Path | None:
    """cuobjdump from PATH, the CUDA toolkit, or the ``nvidia-cuda-cuobjdump`` wheel in the venv."""
    found = shutil.which("cuobjdump")
    if found:
        return Path(found)
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (Path(home) / "bin" / "cuobjdump").is_file():
            return Path(home) / "bin" / "cuobjdump"
    if Path("/usr/local/cuda/bin/cuobjdump").is_file():
        return Path("/usr/local/cuda/bin/cuobjdump")
    if env.python.exists():
        for candidate in sorted(env.site_packages().glob("nvidia/cu*/bin/cuobjdump")):
            return candidate
    return None


def copy_venv(source: Path, dest: Path) -> Path:
    """A copy of the venv ``source`` at ``dest`` that is a venv of its own, as ``python -m venv`` and the same
    installs there make it: the only files that name the venv's folder, its scripts (their ``#!`` lines) and
    pyvenv.cfg, name ``dest``; its interpreter's links are kept."""
    shutil.copytree(source, dest, symlinks=True)
    old, new = str(source).encode(), str(dest).encode()
    for path in [dest / "pyvenv.cfg", *(dest / "bin").iterdir()]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))
    return dest
