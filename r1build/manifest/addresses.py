"""The addresses a manifest names, checked before anything is sent there: the generation endpoint's URL, the
remote cache's URL and the Dask scheduler's address. A URL is quoted in a message only through :func:`shown_url`,
so a password or token in it is never repeated."""

from __future__ import annotations

import urllib.parse

__all__ = ["cluster_address_problem", "endpoint_url_problem", "remote_url_problem", "shown_url"]


def shown_url(url: str) -> str:
    """``url`` quoted for a message, without what may be a secret: a ``user:password@`` (up to the last ``@``)
    and a query or fragment (a token in ``?key=...``) are shown as ``***``."""
    rest = url
    scheme, sep, after = url.partition("://")
    head = f"{scheme}{sep}" if sep else ""
    if sep:
        rest = after
    if "@" in rest:
        rest = "***@" + rest.rpartition("@")[2]
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=-1)
    if cut >= 0:
        rest = rest[:cut] + rest[cut] + "***"
    return repr(head + rest)


def endpoint_url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) endpoint URL, or None. The URL is quoted only through :func:`shown_url`."""
    shown = shown_url(url)
    if "@" in url:
        return f"{shown}: an endpoint URL holds no credentials (name the key's variable in api-key-env)"
    parts = _split(url, shown)
    if isinstance(parts, str):
        return parts
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{shown} is not an http:// or https:// URL with a host"
    if parts.query or parts.fragment:
        return f"{shown}: an endpoint URL has no query or fragment"
    return None


def _split(url: str, shown: str) -> urllib.parse.SplitResult | str:
    """``url``'s parts, or why it is no URL (whitespace or control characters, a port that is no number in
    0..65535, a bad IPv6 literal); ``shown`` is how a message quotes it."""
    if not url.isprintable() or any(c.isspace() for c in url):
        return f"{shown} is not a URL (it holds whitespace or control characters)"
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as exc:
        return f"{shown} is not a URL: {exc}"
    return parts


def cluster_address_problem(address: str) -> str | None:
    """Why ``address`` is not a Dask scheduler address (``tls://host:port``, ``tcp://host:port`` or ``host:port``),
    or None."""
    if "@" in address:  # never repeated: it would show the password
        return "a scheduler address holds no credentials (Dask's TLS settings authenticate; see docs/guides/cluster.md)"
    if not address.isprintable() or any(c.isspace() for c in address):
        return f"{address!r} is not a scheduler address (it holds whitespace or control characters)"
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    if scheme not in ("tcp", "tls"):
        return f"{address!r}: a scheduler address starts with tls:// or tcp:// (got {scheme}://)"
    try:
        parts = urllib.parse.urlsplit(f"//{rest}")
        port = parts.port
    except ValueError as exc:
        return f"{address!r} is not a scheduler address: {exc}"
    if not parts.hostname or parts.path or parts.query or parts.fragment:
        return f"{address!r} is not a scheduler address: give {scheme}://host:port"
    if port is None:
        return f"{address!r} names no port (the scheduler's default is 8786)"
    return None


def remote_url_problem(url: str) -> str | None:
    """Why ``url`` is not a remote cache URL (``http(s)://host[/prefix]`` or ``s3://bucket[/prefix]``), or None.
    The URL is quoted only through :func:`shown_url`: a password or token in it is never repeated."""
    shown = shown_url(url)
    if "@" in url:
        return (
            f"{shown}: a remote cache URL holds no credentials (R1BUILD_REMOTE_TOKEN or R1BUILD_REMOTE_HEADER "
            "for http(s), boto3's credential chain for s3)"
        )
    parts = _split(url, shown)
    if isinstance(parts, str):
        return parts
    if parts.scheme not in ("http", "https", "s3") or not parts.hostname:
        return f"{shown} is not an http://, https:// or s3:// URL with a host (or bucket)"
    if parts.query or parts.fragment:
        return f"{shown}: a remote cache URL has no query or fragment (a token goes in R1BUILD_REMOTE_TOKEN)"
    if parts.scheme != "s3" and not _host_name_ok(parts.hostname):
        return f"{shown}: its host is no valid host name (an empty label, or one over 63 characters)"
    return None


def _host_name_ok(host: str) -> bool:
    """Whether the socket layer takes ``host`` (it encodes a name with the ``idna`` codec, which raises UnicodeError,
    not OSError, on an empty label or one over 63 characters). An ASCII name is checked label by label as that
    codec does, without importing it (~1 ms of a first run with a remote configured)."""
    if host.isascii():
        return all(0 < len(label) <= 63 for label in host.removesuffix(".").split("."))
    try:
        host.encode("idna")
    except UnicodeError:
        return False
    return True
