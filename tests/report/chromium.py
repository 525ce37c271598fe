"""Headless Chromium (Debian's ``chromium`` package) driven over the DevTools protocol, for the report's tests.

:func:`open_page` starts a fresh browser with its own profile folder and a DevTools port the browser chooses
(read back from ``DevToolsActivePort``), loads one file, and returns what a person would see and what went wrong
while loading: console errors, uncaught exceptions, failed loads and every network request that was not for the
file itself. The protocol goes over a websocket with the ``websockets`` package; nothing else is driven.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

__all__ = ["PageLoad", "chromium", "open_page"]


def chromium() -> str | None:
    """The Chromium binary, if installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class PageLoad:
    """What loading a page showed and did."""

    errors: list[str] = field(default_factory=list)
    """Console errors, uncaught exceptions and log entries of level error."""
    requests: list[str] = field(default_factory=list)
    """URLs of every request made besides the page itself."""
    value: Any = None
    """What the probe expression evaluated to."""
    screenshot: bytes | None = None
    """A PNG of the whole page, when asked for."""


def _port(profile: Path, proc: subprocess.Popen[bytes], timeout: float) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode} before opening its DevTools port")
        with contextlib.suppress(FileNotFoundError, ValueError, IndexError):
            return int(marker.read_text().splitlines()[0])
        time.sleep(0.05)
    raise TimeoutError("chromium opened no DevTools port")


class _Session:
    def __init__(self, ws: Any, timeout: float) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []
        self.timeout = timeout

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        self.ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if msg.get("id") == ident:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return dict(msg.get("result", {}))
            self.events.append(msg)

    def wait_for(self, method: str) -> None:
        if any(e.get("method") == method for e in self.events):
            return
        deadline = time.monotonic() + self.timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            self.events.append(msg)
            if msg.get("method") == method:
                return


def _errors(events: list[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            out.append(f"exception: {d.get('exception', {}).get('description') or d.get('text')}")
        elif e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append(
                "console."
                + p["type"]
                + ": "
                + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
            )
        elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append(f"log: {p['entry'].get('text')} {p['entry'].get('url', '')}".strip())
        elif e.get("method") == "Network.loadingFailed":
            out.append(f"load failed: {p.get('errorText')}")
    return out


def open_page(
    path: Path, probe: str, *, screenshot: bool = False, width: int = 1300, timeout: float = 60.0
) -> PageLoad:
    """Load ``path`` in a fresh headless Chromium, wait for its load event, evaluate ``probe`` (a JavaScript
    expression whose value is returned by value) and report what happened."""
    binary = chromium()
    if binary is None:
        raise RuntimeError("chromium is not installed")
    # the browser's helpers (zygote, crashpad) may still write to the profile as it goes: the whole process group
    # is ended before the folder is removed, and a file one of them left behind does not fail the test
    with tempfile.TemporaryDirectory(prefix="r1build-chromium-", ignore_cleanup_errors=True) as tmp:
        profile = Path(tmp)
        proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},1000",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            port = _port(profile, proc, timeout)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=timeout) as response:
                targets = json.load(response)
            page = next(t for t in targets if t.get("type") == "page")
            with connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=timeout) as ws:
                session = _Session(ws, timeout)
                for domain in ("Runtime", "Log", "Network", "Page"):
                    session.call(f"{domain}.enable")
                url = path.resolve().as_uri()
                session.call("Page.navigate", url=url)
                session.wait_for("Page.loadEventFired")
                result = session.call("Runtime.evaluate", expression=probe, returnByValue=True, awaitPromise=True)
                load = PageLoad(value=result.get("result", {}).get("value"))
                if "exceptionDetails" in result:
                    load.errors.append(f"probe: {result['exceptionDetails'].get('text')}")
                if screenshot:
                    shot = session.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
                    load.screenshot = base64.b64decode(shot["data"])
                load.errors += _errors(session.events)
                load.requests = [
                    str(e["params"]["request"]["url"])
                    for e in session.events
                    if e.get("method") == "Network.requestWillBeSent" and e["params"]["request"]["url"] != url
                ]
                return load
        finally:
            _end_group(proc)


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """End the browser and every helper process it started (its own session, so its process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
