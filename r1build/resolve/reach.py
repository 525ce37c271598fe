"""Whether an HTTP endpoint can be reached at all: one TCP connection, before any request is made.

A resolve that may generate asks this once, at its first miss, so an endpoint that is down (a closed port, a
host that does not resolve, a firewall that drops packets) costs at most ``timeout`` seconds and a warning
instead of every request's retries. Where the environment names a proxy for the URL (``HTTPS_PROXY``,
``ALL_PROXY``, ... minus ``NO_PROXY``, as the HTTP client honours them), the proxy is what must answer.
"""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["PROBE_TIMEOUT_S", "unreachable"]

PROBE_TIMEOUT_S = 3.0
"""Seconds the connection may take."""

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _target(url: str) -> tuple[str, int] | None:
    import urllib.request  # here: its HTTP and e-mail modules cost a warm locked resolve, which never probes

    parts = urlsplit(url)
    host = parts.hostname
    if not host or parts.scheme not in _DEFAULT_PORTS:
        return None
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        via = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if via.hostname:
            return via.hostname, via.port or _DEFAULT_PORTS.get(via.scheme, 80)
    try:
        port = parts.port
    except ValueError:
        return None
    return host, port or _DEFAULT_PORTS[parts.scheme]


def unreachable(url: str, *, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why ``url``'s server (or its proxy) cannot be reached, or None when a TCP connection opens.

    A URL this cannot make sense of is left to the HTTP client (None): its own error is the better message.
    """
    target = _target(url)
    if target is None:
        return None
    host, port = target
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout:g} s"
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
