"""Watching the compilers a command runs: an nvcc wrapper that logs when each compile starts and ends (so the
most at once can be counted), and a sampler of the memory held by every process below the command."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")


def nvcc_wrapper(directory: Path, real: str) -> tuple[Path, Path]:
    """An ``nvcc`` in ``directory`` that runs ``real`` and logs ``+ ns`` / ``- ns`` around each compile (``-c``);
    returns the wrapper and its log."""
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "compiles.log"
    wrapper = directory / "nvcc"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" -c "*) c=1;; *) c=0;; esac\n'
        f'[ $c = 1 ] && echo "+ $(date +%s%N)" >> {log}\n'
        f'"{real}" "$@"\nrc=$?\n'
        f'[ $c = 1 ] && echo "- $(date +%s%N)" >> {log}\n'
        "exit $rc\n",
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    return wrapper, log


def peak_concurrency(log: Path) -> tuple[int, int]:
    """(compiles, most running at once) from a wrapper's log."""
    if not log.exists():
        return 0, 0
    events = sorted(
        (int(stamp), 1 if sign == "+" else -1)
        for sign, stamp in (line.split() for line in log.read_text().splitlines() if line.strip())
    )
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return sum(1 for _, s in events if s == 1), peak


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _rss(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


class MemorySampler:
    """Samples, every ``interval`` seconds, the resident memory of all processes below ``pid`` (not ``pid``
    itself: the compilers and their children); :attr:`peak` is the largest sum seen."""

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            tree = _children()
            todo, total = list(tree.get(self.pid, [])), 0
            while todo:
                pid = todo.pop()
                total += _rss(pid)
                todo += tree.get(pid, [])
            self.peak = max(self.peak, total)
            time.sleep(self.interval)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak
