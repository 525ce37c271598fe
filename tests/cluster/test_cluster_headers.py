"""A cluster worker on another host has none of the project's include folders (``nvcc-flags = ["-Iinc"]``): the
jobs carry those headers, so a compile slot's gate verdict and a GPU job's build are what they are here, not a
missing header."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from r1build.cluster.tasks import _materialize, compile_verdict, header_files, project_files
from r1build.manifest import load_manifest
from r1build.records import Candidate, Origin
from tests.build.test_build_include_flags import _with_header


def test_jobs_carry_the_headers_of_the_projects_include_folders(tmp_path: Path) -> None:
    project = _with_header(tmp_path / "tiny")
    (project / "inc" / "deeper").mkdir()
    (project / "inc" / "deeper" / ".hidden.cuh").write_text("#pragma once\n")  # counted in the folder's digest
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.h").write_text("// not the project's\n")
    toml = project / "kernels.toml"
    toml.write_text(toml.read_text().replace('"-Iinc"', '"-Iinc", "-I../outside", "-I/usr/include", "-I."'))
    manifest = load_manifest(toml)
    headers = header_files(manifest)
    assert sorted(headers.files) == ["inc/deeper/.hidden.cuh", "inc/tiny_factor.cuh"]
    assert set(headers.files) <= set(project_files(manifest, manifest.kernels).files)  # GPU jobs carry them too
    where = _materialize(headers)
    assert (where / "inc" / "tiny_factor.cuh").read_bytes() == (project / "inc" / "tiny_factor.cuh").read_bytes()


@pytest.mark.slow  # two nvcc compiles
def test_a_compile_slot_on_another_host_finds_the_projects_headers(tmp_path: Path) -> None:
    project = _with_header(tmp_path / "tiny")
    manifest = load_manifest(project / "kernels.toml")
    spec = manifest.kernel("scale")
    candidate = Candidate((project / "scale.cu").read_text(), Origin("baseline", "scale.cu"))
    headers = header_files(manifest)
    shutil.rmtree(project / "inc")  # the worker's host: the resolving machine's folder is not there
    alone, _ = compile_verdict(manifest, spec, "sm_90", candidate, 120.0)
    assert alone.status == "compile_error" and "tiny_factor.cuh" in alone.detail
    carried, cacheable = compile_verdict(manifest, spec, "sm_90", candidate, 120.0, headers)
    assert carried.status == "passed" and cacheable, carried.detail


def test_an_include_folder_that_is_a_link_is_carried_under_the_name_the_flag_gives(tmp_path: Path) -> None:
    """``-Iinc`` where ``inc`` links to another folder of the project: the worker's compile looks in ``inc``, so
    the headers travel under it (not under the folder the link points to)."""
    project = _with_header(tmp_path / "tiny")
    (project / "inc").rename(project / "headers")
    (project / "inc").symlink_to("headers")
    headers = header_files(load_manifest(project / "kernels.toml"))
    assert sorted(headers.files) == ["inc/tiny_factor.cuh"]
    assert (_materialize(headers) / "inc" / "tiny_factor.cuh").is_file()


def test_an_include_folder_too_big_to_send_is_refused_before_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from r1build.cluster import tasks
    from r1build.errors import ClusterRefusedError

    project = _with_header(tmp_path / "tiny")
    for i in range(5):  # 5 files of 1 MiB, sparse: cheap to make, large to read
        with (project / "inc" / f"blob{i}.bin").open("wb") as f:
            f.truncate(1 << 20)
    manifest = load_manifest(project / "kernels.toml")
    monkeypatch.setattr(tasks, "_MAX_PROJECT_BYTES", 3 << 20)
    read: list[Path] = []
    real = Path.read_bytes

    def reading(self: Path) -> bytes:
        read.append(self)
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", reading)
    with pytest.raises(ClusterRefusedError, match=r"at least 4 files, 4 MiB: too much to send"):
        header_files(manifest)
    assert read == []  # refused from the sizes on disk, nothing read into memory
