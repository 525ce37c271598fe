"""What an sdist of an r1build project must carry, as scikit-build-core ``sdist.include`` / ``sdist.exclude``.

A wheel built from the sdist resolves again, with no cache and no network, so the sdist carries everything the
resolver reads: the manifest, the lock, each kernel's reference module, baseline and hand-written candidates,
and the vendored winners. It never carries ``.r1build/`` (generated files of an earlier build), the cache folder
where it lies inside the project, nor a private key file of the name ``r1build key generate`` writes by default
(in whatever folder that command ran); a private key of any other name is taken out of the written sdist by its
content (:mod:`r1build.build.keyfiles`).

Before it writes anything, :func:`check_offline_buildable` makes sure a wheel built from the sdist can be built
with no cache, no network and no opt-in, and refuses (exit 2) an sdist that would not: a current lock entry whose
winner is neither vendored nor one of the manifest's own files (run ``r1build vendor``), or a kernel with no
hand-written source (baseline, candidates) and no usable lock entry. A missing or stale lock with hand-written
sources to fall back on is warned about loudly: such a wheel builds from those, unvalidated.

Those paths are forced in even where a ``.gitignore`` would leave them out. scikit-build-core takes a config
setting *instead of* the pyproject.toml value, so the user's own include / exclude lists (config setting first,
else ``[tool.scikit-build.sdist]``) are kept and ours appended.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, LockError
from ..events import Note, emit
from ..keys import decision_key
from ..lock import lock_path, read_lock
from ..manifest import Manifest
from ..manifest.inputs import manifest_inputs
from ..manifest.tomltext import TomlProblem, parse_toml
from ..trust.signing import DEFAULT_KEY_NAME
from .options import ConfigSettings

__all__ = ["GENERATED_DIR", "check_offline_buildable", "sdist_settings"]

GENERATED_DIR = ".r1build"
"""The per-project folder of generated files (relative to the project); never part of an sdist."""

_GLOB_SPECIAL = re.compile(r"([\[\]*?!#\\])")


def _pattern(rel: Path, *, directory: bool = False) -> str:
    """An anchored gitignore-style pattern matching exactly ``rel``."""
    text = "/" + _GLOB_SPECIAL.sub(r"\\\1", rel.as_posix())
    return text + "/" if directory else text


def _as_list(key: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(";") if part.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConfigError(f"{key} must be a string or a list of strings (got {value!r})")


def _pyproject_sdist(project_dir: Path) -> dict[str, Any]:
    path = project_dir / "pyproject.toml"
    try:
        data = parse_toml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except TomlProblem as exc:
        raise ConfigError(f"{path}:{exc.line}: {exc.message}" if exc.line else f"{path}: {exc.message}") from None
    section: Any = data
    for name in ("tool", "scikit-build", "sdist"):
        section = section.get(name, {}) if isinstance(section, dict) else {}
    return section if isinstance(section, dict) else {}


def _merged(key: str, config: ConfigSettings, pyproject: dict[str, Any], ours: Iterable[str]) -> list[str]:
    name = key.removeprefix("sdist.")
    base = _as_list(key, config[key]) if key in config else _as_list(f"tool.scikit-build.{key}", pyproject.get(name))
    return list(dict.fromkeys([*base, *ours]))


def sdist_settings(
    project_dir: Path, manifest: Manifest, config: ConfigSettings, *, cache_dir: Path | None = None
) -> ConfigSettings:
    """``config`` with the manifest's inputs forced into the sdist and the generated folder kept out of it, and
    the cache folder ``cache_dir`` too where it lies inside the project (``R1BUILD_CACHE_DIR=.r1build-cache``):
    its decisions, transcripts and the build machine's paths are no part of a source distribution. So is a
    private signing key that ``r1build key generate`` left in the project under its default name, in any folder
    (with a warning where one is at the project's top)."""
    project = project_dir.resolve()
    excludes = [_pattern(Path(GENERATED_DIR), directory=True), DEFAULT_KEY_NAME]  # in any folder
    if (project / DEFAULT_KEY_NAME).exists():
        emit(
            Note(
                "warning",
                f"{DEFAULT_KEY_NAME} is a private signing key: left out of the sdist; keep it out of the project "
                "folder (and out of the repository)",
            )
        )
    if cache_dir is not None:
        cache = cache_dir.resolve()
        if project in cache.parents:
            excludes.append(_pattern(cache.relative_to(project), directory=True))
    includes: list[str] = []
    for path in manifest_inputs(manifest, resolve=False):
        try:
            rel = path.relative_to(project)
        except ValueError:
            emit(
                Note(
                    "warning",
                    f"{path} is outside the project folder {project}: the sdist cannot carry it, so a "
                    "wheel built from the sdist will not find it",
                )
            )
            continue
        includes.append(_pattern(rel, directory=path.is_dir()))
    pyproject = _pyproject_sdist(project)
    merged: ConfigSettings = dict(config)
    merged["sdist.include"] = _merged("sdist.include", config, pyproject, includes)
    merged["sdist.exclude"] = _merged("sdist.exclude", config, pyproject, excludes)
    return merged


def check_offline_buildable(project_dir: Path, manifest: Manifest) -> None:
    """Refuse (:class:`~r1build.errors.LockError`, exit 2) an sdist whose wheel could not be built offline with
    no cache; warn where it would build from baselines instead of the lock (see the module doc)."""
    from ..resolve import project_source
    from ..resolve.sources import vendored_mismatch

    project = project_dir.resolve()
    path = lock_path(manifest)
    lock = read_lock(path)
    vendor_dir = (manifest.root / manifest.settings.vendor_dir).resolve()
    carried = vendor_dir == project or project in vendor_dir.parents
    missing: list[str] = []
    unresolvable: list[str] = []
    from_baseline: list[str] = []
    for spec in manifest.kernels:
        for arch in manifest.archs_of(spec):
            entry = lock.entry(spec.name, arch) if lock else None
            if entry is not None and entry.key == decision_key(manifest, spec, arch):
                found = project_source(manifest, spec, entry.source)
                if found is None or (found.where == "vendored" and not carried):
                    edited = vendored_mismatch(manifest, spec, entry.source)
                    missing.append(f"{spec.name}/{arch} ({entry.provenance}, source {entry.source[:16]}){edited}")
                continue
            if spec.baseline is None and not spec.candidates:
                unresolvable.append(f"{spec.name}/{arch}")
            else:
                from_baseline.append(f"{spec.name}/{arch}")
    if missing:
        raise LockError(
            f"{path.name} names winners this sdist would not carry: {', '.join(missing)}. A wheel built from it "
            f"would have to fall back to the baselines or call an LLM; run `r1build vendor` (it writes them into "
            f"{manifest.settings.vendor_dir}) and build the sdist again"
        )
    if unresolvable:
        raise LockError(
            f"no usable lock entry and no hand-written source (baseline, candidates) for {', '.join(unresolvable)}: "
            "a wheel built from this sdist could not be built offline; run `r1build lock` (or `r1build resolve`) "
            "and `r1build vendor` first"
        )
    if from_baseline:
        where = "every kernel" if lock is None else ", ".join(from_baseline)
        what = f"there is no {path.name}" if lock is None else f"{path.name} has no current entry for {where}"
        emit(
            Note(
                "warning",
                f"{what}: a wheel built from this sdist uses the hand-written sources that pass the "
                f"static gate for {where}, unvalidated; run `r1build lock` and `r1build vendor` before "
                "packaging to ship the chosen winners",
            )
        )
