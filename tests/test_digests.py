"""What :func:`r1build.digests.path_digest` sees of a folder: names, contents and links, and no walk without end
through links back to a folder the walk is in."""

from __future__ import annotations

import time
from pathlib import Path

from r1build.digests import path_digest


def test_links_back_to_a_folder_being_walked_count_by_where_they_point(tmp_path: Path) -> None:
    """An include folder (``-Iinc``, whose headers key the gate) holding ``a -> .`` and ``b -> .`` had the walk
    follow both at every level: 2^40 paths, then an OSError (ELOOP) traceback from ``r1build lock`` after tens of
    seconds. Each such link now counts by where it points, once."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "h.h").write_text("#define X 1\n", encoding="utf-8")
    (inc / "a").symlink_to(".")
    (inc / "b").symlink_to(".")
    (inc / "up").symlink_to("..")
    started = time.monotonic()
    digest = path_digest(inc)
    assert time.monotonic() - started < 5
    assert digest is not None and digest.startswith("dir:")
    assert path_digest(inc) == digest
    (inc / "b").unlink()
    (inc / "b").symlink_to("h.h")
    assert path_digest(inc) != digest, "where a link points still counts"


def test_a_folder_without_links_back_keeps_its_digest(tmp_path: Path) -> None:
    """Folders as before: the same names and contents, the same digest; a change to a file inside, another."""
    for root in (tmp_path / "one", tmp_path / "two"):
        (root / "sub").mkdir(parents=True)
        (root / "sub" / "x.h").write_text("int x;\n", encoding="utf-8")
        (root / "link.h").symlink_to("sub/x.h")
    assert path_digest(tmp_path / "one") == path_digest(tmp_path / "two")
    (tmp_path / "two" / "sub" / "x.h").write_text("int y;\n", encoding="utf-8")
    assert path_digest(tmp_path / "one") != path_digest(tmp_path / "two")
