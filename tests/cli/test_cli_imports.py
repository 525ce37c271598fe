"""What a command line imports: the CLI imports the module of the sub-command it runs and no other, rich only to
render on a terminal, and a warm read-only command (answered from its record, r1build/cli/fastpath.py) none of
the resolver, the GPU, the LLM or the rendering code. Each command runs in a fresh process, as a user runs it,
under ``python -X importtime``, which lists every module the process imported."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from r1build.cli import main as cli_main

OTHER_COMMANDS = {f"r1build.cli.{name}" for name in set(cli_main.COMMANDS.values())}
"""Every sub-command module (a command may import its own alone)."""
HEAVY = (
    "r1build.resolve",
    "r1build.gate",
    "r1build.evaluate",
    "r1build.generate",
    "r1build.cluster",
    "r1build.resolve.kernel_search",
    "r1build.manifest.load",
    "r1build.cache.store",
    "rich",
    "numpy",
    "diskcache",
    "httpx",
    "openai",
    "distributed",
)
"""The resolver, the GPU evaluator, the LLM client, the cluster, rich: what a warm command must never import."""


IMPORTS = (
    "import atexit, json, runpy, sys\n"
    "out = sys.argv.pop(1)\n"
    "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
    "runpy.run_module('r1build.cli.main', run_name='__main__', alter_sys=True)\n"
)
"""Runs the CLI as ``python -m r1build.cli.main`` does and writes the names in ``sys.modules`` at exit to a file
(``-X importtime`` would miss what ``importlib.import_module`` imports)."""


def imports(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, set[str]]:
    """``r1build ARGS`` in a fresh process (stdout a pipe, not a terminal): exit code, stdout, modules imported."""
    listing = cwd / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", IMPORTS, str(listing), *args],
        capture_output=True,
        text=True,
        env=env or dict(os.environ),
        cwd=cwd,
        check=False,
    )
    modules = set(json.loads(listing.read_text(encoding="utf-8")))
    listing.unlink()
    return proc.returncode, proc.stdout, modules


def under(modules: set[str], *packages: str) -> set[str]:
    """The modules that are one of ``packages`` or inside one."""
    return {m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)}


def test_the_command_table_names_each_module_that_registers_the_command() -> None:
    for module_name in set(cli_main.COMMANDS.values()):
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        __import__(f"r1build.cli.{module_name}", fromlist=["register"]).register(sub)
        registered = set(sub.choices)
        assert registered == {c for c, m in cli_main.COMMANDS.items() if m == module_name}, module_name


def test_a_parser_for_a_command_knows_that_command_and_the_full_parser_every_one() -> None:
    def commands(parser: argparse.ArgumentParser) -> set[str]:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return set(action.choices)

    assert commands(cli_main.build_parser()) == set(cli_main.COMMANDS)
    project = {"check", "status", "resolve", "lock", "vendor"}
    assert commands(cli_main.build_parser(["-q", "status", "--json"])) == project
    assert commands(cli_main.build_parser(["key", "public", "k"])) == {"key"}
    assert commands(cli_main.build_parser(["--version"])) == set()
    assert commands(cli_main.build_parser(["--help", "key"])) == set(cli_main.COMMANDS)  # the main help lists all
    assert commands(cli_main.build_parser(["stauts"])) == set(cli_main.COMMANDS)  # the error lists them


def test_version_and_a_command_help_import_no_other_command(tmp_path: Path) -> None:
    code, out, modules = imports("--version", cwd=tmp_path)
    assert code == 0 and out.startswith("r1build ")
    assert not under(modules, *OTHER_COMMANDS, *HEAVY)
    code, out, modules = imports("key", "--help", cwd=tmp_path)
    assert code == 0 and "generate" in out
    assert under(modules, *OTHER_COMMANDS) == {"r1build.cli.key_cmd"}
    assert not under(modules, *HEAVY)
    code, out, modules = imports("--help", cwd=tmp_path)
    assert code == 0 and all(command in out for command in cli_main.COMMANDS)


@pytest.mark.slow  # a lock (nvcc) and six processes
def test_warm_commands_import_nothing_heavy_and_full_ones_their_own_module(locked: Path) -> None:
    never = ("rich", "r1build.generate", "r1build.resolve.kernel_search", "httpx", "openai", "dask", "distributed")
    for args, gpu_free in (
        (("status",), True),
        (("resolve", "--locked", "--no-gpu"), True),
        (("check", "--locked"), False),  # runs the references on the CPU: numpy and the evaluator's inputs
    ):
        code, first, modules = imports(*args, "-m", str(locked), cwd=locked)
        assert code == 0, args
        # the full run: its own command module, no rich (not a terminal), no LLM client, no cluster, no GPU code
        assert under(modules, *OTHER_COMMANDS) == {"r1build.cli.project"}, args
        assert {"r1build.manifest.load", "r1build.resolve"} <= modules, args
        assert not under(modules, *never), (args, under(modules, *never))
        assert not gpu_free or not under(modules, "r1build.evaluate", "numpy"), args
        # the warm run: the same answer from its record, nothing heavy, no command module
        code, again, modules = imports(*args, "-m", str(locked), cwd=locked)
        assert code == 0 and again == first, args
        assert not under(modules, *OTHER_COMMANDS, *HEAVY), (args, under(modules, *OTHER_COMMANDS, *HEAVY))


FIRST_RUN_NEVER = (
    "numpy",
    "openai",
    "r1build.gate.static",
    "r1build.gate.nvcc",
    "r1build.gate.symbols",
    "r1build.sandbox",
    "r1build.cluster",
    "r1build.cache.remote",
    "r1build.report.page",
    "r1build.profile",
    "platformdirs",
    "difflib",
    "r1build.trust.signing",
    "r1build.lock.salvage",
    "concurrent.futures",
    "diskcache",
)
"""What the full path of ``resolve --locked`` and ``status`` never needs where the lock and the local cache
answer (issue 29): the numpy references, the LLM client, the gate's compile machinery (its cached verdicts are
read without it), the cluster, the remote cache (none configured), the report's page; nor platformdirs (the
fast path's key folder is named by :func:`r1build.settings.user_state_dir`), difflib (no unknown ``R1BUILD_*``
variable to match), the signing code (no trusted keys named), the lock's salvage (the lock is whole), a thread
pool (every gate verdict cached), diskcache (the cache is read with SQLite alone; diskcache opens it at the first
write, and the run's record is written beside the key that signs it, not into the cache)."""


@pytest.mark.slow  # a lock (nvcc) and four processes
def test_the_first_run_on_a_new_machine_imports_only_what_a_lock_and_the_local_cache_need(
    locked: Path, tmp_path: Path
) -> None:
    """The first run where no record answers (a CI job's fresh machine: no state folder; the manifest edited):
    the full path, which imports none of :data:`FIRST_RUN_NEVER`."""
    manifest = locked / "kernels.toml"
    for args in (("status",), ("resolve", "--locked", "--no-gpu")):
        for edit in ("a", "b"):
            manifest.write_text(manifest.read_text(encoding="utf-8") + f"\n# an unrelated edit {edit}\n")
            env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / f"state-{args[0]}-{edit}"))
            code, out, modules = imports(*args, "-m", str(locked), cwd=locked, env=env)
            assert code == 0 and "silu_mul" in out, args
            assert "r1build.resolve.lookup" in modules, args  # the full path, not a replay
            assert not under(modules, *FIRST_RUN_NEVER), (args, sorted(under(modules, *FIRST_RUN_NEVER)))
