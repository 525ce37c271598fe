"""Bad input a build can meet, found by calling the hooks with mutated settings and project files: each is a
clean one-line error or is passed over, never a traceback from r1build's code and never a hang.

* ``r1build.cache-dir`` / ``R1BUILD_CACHE_DIR`` of ``~nouser/x`` ended in ``RuntimeError: Could not determine
  home directory.``, a config setting with a NUL in it in ``ValueError: embedded null byte``;
* a ``cmake.define.CMAKE_CUDA_COMPILER`` with a NUL in it ended in ``ValueError: embedded null byte``;
* a FIFO in the place of a vendored winner, of ``.r1build/build-stamp.json`` or of a generated file held the build
  for ever, waiting for a writer; a folder in the place of the stamp or of a generated file ended in
  ``IsADirectoryError``.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from r1build.build.kernels import one_compiler
from r1build.build.options import split_settings
from r1build.build.stamp import STAMP_NAME, forget_stamp, read_warm_stamp
from r1build.build.warm import compiler_path
from r1build.emit.write import _write_if_changed
from r1build.errors import ConfigError, UserError
from r1build.lock import find_vendored, vendor_file_name
from r1build.settings import env_settings

T = TypeVar("T")

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


def _within(seconds: float, call: Callable[[], T]) -> T:
    """``call()``, failing the test (instead of hanging it) where it has not returned within ``seconds``."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        pytest.fail(f"still waiting after {seconds} s (blocked on a FIFO?)")
    if errors:
        raise errors[0]
    return result[0]


@pytest.mark.parametrize("value", ["~no-such-user-r1build/cache", "cache\0dir"])
def test_a_cache_dir_setting_that_names_no_folder_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^r1build\.cache-dir: .* is not a usable path") as info:
        split_settings({"r1build.cache-dir": value}, {})
    assert info.value.exit_code == 2


def test_a_cache_dir_variable_naming_an_unknown_user_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^R1BUILD_CACHE_DIR: .* its ~ names no home folder"):
        env_settings({"R1BUILD_CACHE_DIR": "~no-such-user-r1build/cache"})


def test_a_cuda_compiler_setting_with_a_nul_is_refused_cleanly() -> None:
    assert compiler_path("nv\0cc", "nvcc") is None  # the warm path steps aside
    assert compiler_path(["/usr/bin/true", "nv\0cc"], "nvcc") is None
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    with pytest.raises(ConfigError, match=r"names 'nv\\x00cc' as CMake's CUDA compiler"):
        one_compiler("nv\0cc")


@needs_fifo
def test_a_fifo_in_place_of_a_vendored_winner_is_not_vendored(tmp_path: Path) -> None:
    digest = "ab" * 32
    os.mkfifo(tmp_path / vendor_file_name("scale", digest))
    assert _within(10, lambda: find_vendored(tmp_path, "scale", digest)) is None
    (tmp_path / vendor_file_name("scale", digest)).unlink()
    (tmp_path / vendor_file_name("scale", digest)).mkdir()
    assert find_vendored(tmp_path, "scale", digest) is None


@needs_fifo
def test_a_fifo_in_place_of_the_stamp_is_no_stamp(tmp_path: Path) -> None:
    (tmp_path / ".r1build").mkdir()
    os.mkfifo(tmp_path / ".r1build" / STAMP_NAME)
    assert _within(10, lambda: read_warm_stamp(tmp_path, {"r1build.locked": "1"})) is None


def test_a_folder_in_place_of_the_stamp_is_a_user_error(tmp_path: Path) -> None:
    (tmp_path / ".r1build" / STAMP_NAME).mkdir(parents=True)
    assert read_warm_stamp(tmp_path, {"r1build.locked": "1"}) is None
    with pytest.raises(UserError, match="is a folder where r1build keeps its build stamp") as info:
        forget_stamp(tmp_path)
    assert info.value.exit_code == 2


@needs_fifo
def test_a_fifo_in_place_of_a_generated_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "r1build_kernels.cmake"
    os.mkfifo(path)
    assert _within(10, lambda: _write_if_changed(path, b"data\n")) is True
    assert path.is_file() and path.read_bytes() == b"data\n"
    assert _write_if_changed(path, b"data\n") is False


def test_a_folder_in_place_of_a_generated_file_is_a_user_error(tmp_path: Path) -> None:
    path = tmp_path / "r1build_kernels.cmake"
    path.mkdir()
    with pytest.raises(UserError, match="is a folder where r1build writes a generated file"):
        _write_if_changed(path, b"data\n")
