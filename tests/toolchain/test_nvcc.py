"""The nvcc r1build uses, and the memo of its version text kept in the cache folder (``nvcc-versions.json``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from r1build.toolchain import nvcc as toolchain_mod


@pytest.mark.parametrize(
    "memo",
    ["[" * 100_000 + "]" * 100_000, '{"a": ' * 50_000 + "1" + "}" * 50_000, "[1, 2", "null"],
    ids=["deep-arrays", "deep-objects", "cut-short", "not-a-table"],
)
def test_a_damaged_version_memo_is_asked_again_and_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memo: str
) -> None:
    """The memo is a file of the cache folder, which a restored CI cache or a bundle's machine may have damaged:
    one nested deeper than the JSON parser goes ended every command that looked nvcc up (`status`, `lock`) with a
    RecursionError traceback. A memo that cannot be read is no memo."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    monkeypatch.setenv("R1BUILD_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "cache" / toolchain_mod.MEMO_NAME
    path.parent.mkdir()
    path.write_text(memo, encoding="utf-8")
    code = "from r1build.toolchain.nvcc import toolchain; print(toolchain().ident)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip(), done.stderr
    assert path.read_text(encoding="utf-8").startswith("{\n"), "the memo is written anew"
