"""One options record from the build hook and the command line to the resolver: one name per option."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from r1build.build.options import split_settings
from r1build.cli.main import build_parser
from r1build.cli.project import _options
from r1build.manifest import load_manifest
from r1build.records import ResolveOptions
from r1build.resolve import ResolveOptions as FromResolve

ROOT = Path(__file__).resolve().parents[2]


def test_the_hook_builds_the_record_the_resolver_takes() -> None:
    options, _ = split_settings({"r1build.generate": "1", "r1build.evaluate": "1"}, environ={})
    assert type(options) is ResolveOptions is FromResolve
    assert (options.generate, options.evaluate) == (True, True)
    off, _ = split_settings({}, environ={})
    assert (off.generate, off.evaluate) == (False, False)


def test_the_record_carries_each_option_under_one_name() -> None:
    names = {f.name for f in dataclasses.fields(ResolveOptions)}
    assert {"generate", "evaluate", "locked", "frozen", "cache_dir", "remote_cache"} <= names
    assert not names & {"offline", "use_gpu"}  # the old second names of generate and evaluate


def test_the_command_line_builds_the_same_record() -> None:
    manifest = load_manifest(ROOT / "kernels.toml", check_references=False)
    args = build_parser().parse_args(["resolve", "--offline", "--no-gpu"])
    options = _options(args, manifest, write_lock=True)
    assert type(options) is ResolveOptions
    assert (options.generate, options.evaluate) == (False, False)
    default = _options(build_parser().parse_args(["resolve"]), manifest, write_lock=True)
    assert (default.generate, default.evaluate) == (None, None)
