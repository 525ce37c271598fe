"""``events.Logger``: logging imported only when a message can be seen (a command that configures no logging never
imports it), and then the standard library's behaviour unchanged."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys
    from r1build.events import Logger, Note, emit

    log = Logger("r1build.test")
    log.debug("a debug line %s", 1)
    log.info("an info line")
    emit(Note("info", "a note"))
    print("imported before a warning:", "logging" in sys.modules)
    log.warning("a warning %s", "shown")
    print("imported after it:", "logging" in sys.modules)
    import logging

    logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s: %(message)s")
    log.debug("debug once configured")
    """
)


def test_nothing_imports_logging_until_a_message_can_be_seen() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, timeout=60)
    assert proc.stdout.splitlines() == ["imported before a warning: False", "imported after it: True"]
    err = proc.stderr.splitlines()
    assert err[0] == "a warning shown"  # logging's last-resort handler, as an unconfigured logger does
    assert "DEBUG r1build.test: debug once configured" in err
    assert not any("a debug line" in line or "an info line" in line or "a note" in line for line in err)
