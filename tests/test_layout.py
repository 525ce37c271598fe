"""The package faces: outside ``cache/`` and ``lock/``, modules import from the package (``r1build.cache``,
``r1build.lock``), never from the modules inside it; ``cache.remote`` is a package with a face of its own."""

from __future__ import annotations

import re
from pathlib import Path

import r1build

_NOT_YET: set[str] = set()


def test_no_module_reaches_into_the_cache_or_lock_package() -> None:
    package = Path(r1build.__file__).parent
    inner = re.compile(r"^\s*from\s+\.+(?:cache|lock)\.(?!remote\b)\w+\s+import\b", re.M)
    offenders = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] not in ("cache", "lock") and inner.search(path.read_text())
    ]
    assert sorted(set(offenders) - _NOT_YET) == []
