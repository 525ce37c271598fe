"""What an sdist of an r1build project must carry, as scikit-build-core ``sdist.include`` / ``sdist.exclude``.

A wheel built from the sdist resolves again, with no cache and no network, so the sdist carries everything the
resolver reads: the manifest, the lock, each kernel's reference module, baseline and hand-written candidates,
and the vendored winners. It never carries ``.r1build/`` (generated files of an earlier build).

Those paths are forced in even where a ``.gitignore`` would leave them out. scikit-build-core takes a config
setting *instead of* the pyproject.toml value, so the user's own include / exclude lists (config setting first,
else ``[tool.scikit-build.sdist]``) are kept and ours appended.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..events import Note, emit
from ..manifest import Manifest
from .inputs import manifest_inputs
from .options import ConfigSettings

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = ["GENERATED_DIR", "sdist_settings"]

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
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    section = data.get("tool", {}).get("scikit-build", {}).get("sdist", {})
    return section if isinstance(section, dict) else {}


def _merged(key: str, config: ConfigSettings, pyproject: dict[str, Any], ours: Iterable[str]) -> list[str]:
    name = key.removeprefix("sdist.")
    base = _as_list(key, config[key]) if key in config else _as_list(f"tool.scikit-build.{key}", pyproject.get(name))
    return list(dict.fromkeys([*base, *ours]))


def sdist_settings(project_dir: Path, manifest: Manifest, config: ConfigSettings) -> ConfigSettings:
    """``config`` with the manifest's inputs forced into the sdist and the generated folder kept out of it."""
    project = project_dir.resolve()
    includes: list[str] = []
    for path in manifest_inputs(manifest):
        try:
            rel = path.relative_to(project)
        except ValueError:
            emit(Note("warning", f"{path} is outside the project folder {project}: the sdist cannot carry it, so a "
                                 "wheel built from the sdist will not find it"))
            continue
        includes.append(_pattern(rel, directory=path.is_dir()))
    pyproject = _pyproject_sdist(project)
    merged: ConfigSettings = dict(config)
    merged["sdist.include"] = _merged("sdist.include", config, pyproject, includes)
    generated = _pattern(Path(GENERATED_DIR), directory=True)
    merged["sdist.exclude"] = _merged("sdist.exclude", config, pyproject, [generated])
    return merged
