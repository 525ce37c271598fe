"""Evaluation on a Dask cluster of GPU hosts (``r1build resolve --cluster``, ``r1build worker``).

Dask distributed does the scheduling: each GPU job (one kernel × arch and its candidates) is a task for a worker
whose resources name the arch (``sm_90``), and runs the local GPU evaluator there (:mod:`.tasks`); each gate
compile is a task for a ``compile`` slot (:mod:`.gate`). The resolving machine surveys the workers and refuses a
cluster of other r1build or nvcc versions (:mod:`.facts`), and stays the one writer of its cache and lock
(:mod:`.session`). ``r1build worker`` starts one Dask worker per visible GPU and one for compiles (:mod:`.workers`).

Dask is an optional dependency (``pip install 'r1build[cluster]'``): nothing here imports it until a cluster is
used.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from ..manifest.model import Manifest
from ..settings import env_settings

__all__ = ["cluster_address", "loopback", "plain_tcp", "tls_problem"]


def plain_tcp(address: str) -> bool:
    """Whether a scheduler address is plain TCP (``tcp://`` or no scheme): unencrypted and unauthenticated."""
    return address.startswith("tcp://") or "://" not in address


def loopback(address: str) -> bool:
    """Whether a scheduler address names this machine's loopback interface (``localhost``, ``127.0.0.1``,
    ``[::1]``)."""
    host = address.partition("://")[2] or address
    host = host.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cluster_address(
    manifest: Manifest, flag: str | None, environ: Mapping[str, str] | None = None, *, insecure: bool = False
) -> str | None:
    """The scheduler a resolve evaluates on: ``--cluster``, else ``R1BUILD_CLUSTER``, else ``[evaluation]
    cluster``; None for this machine's GPUs. :class:`~r1build.errors.ClusterRefusedError` naming the flag, the
    variable or the manifest that gives a malformed address (the manifest's was checked when it was loaded), or a
    plain ``tcp://`` address off the loopback interface unless ``insecure`` (``--insecure-cluster``): the
    manifest of a cloned project cannot send a resolve to a scheduler nobody authenticates."""
    from ..errors import ClusterRefusedError
    from ..manifest.addresses import cluster_address_problem

    from_env = env_settings(environ).cluster
    address = flag or from_env
    source = "--cluster" if flag else "R1BUILD_CLUSTER"
    if address:
        problem = cluster_address_problem(address)
        if problem is not None:
            raise ClusterRefusedError(f"{source}: {problem}")
    else:
        address = manifest.settings.evaluation.cluster
        source = f"[evaluation] cluster of {manifest.path}"
    if address and plain_tcp(address) and not loopback(address) and not insecure:
        raise ClusterRefusedError(
            f"{source}: {address} is plain TCP, unencrypted and unauthenticated: anyone who can reach the "
            "scheduler could run code on its workers, and whoever answers there could run code on this machine; "
            "use tls:// with Dask's TLS settings (docs/guides/cluster.md), or --insecure-cluster on a "
            "network you trust alone"
        )
    return address


def tls_problem(address: str, role: str) -> str | None:
    """Why a ``tls://`` ``address`` cannot be reached as ``role`` (``client`` or ``worker``), or None: Dask's
    configuration must give that role a TLS context. Without one, Dask fails with a TypeError deep in its connect
    (and a client then spends 20 s closing itself); a certificate file named there that cannot be read is said
    here too."""
    if not address.startswith("tls://"):
        return None
    from distributed.security import Security

    try:
        configured = Security().get_connection_args(role).get("ssl_context") is not None
    except (OSError, ValueError) as exc:
        return f"Dask's TLS settings cannot be used: {exc}"
    if configured:
        return None
    return (
        f"{address} is a tls:// address, and Dask's configuration holds no TLS settings for a {role} "
        f"(distributed.comm.tls.ca-file, {role}.cert and {role}.key; docs/guides/cluster.md)"
    )
