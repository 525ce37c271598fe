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

from collections.abc import Mapping

from ..manifest.model import Manifest
from ..settings import env_settings

__all__ = ["cluster_address", "tls_problem"]


def cluster_address(manifest: Manifest, flag: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The scheduler a resolve evaluates on: ``--cluster``, else ``R1BUILD_CLUSTER``, else ``[evaluation]
    cluster``; None for this machine's GPUs. :class:`~r1build.errors.ClusterRefusedError` naming the flag or the
    variable that gives a malformed address (the manifest's was checked when it was loaded)."""
    from ..errors import ClusterRefusedError
    from ..manifest.load import cluster_address_problem

    from_env = env_settings(environ).cluster
    address = flag or from_env
    if address:
        problem = cluster_address_problem(address)
        if problem is not None:
            raise ClusterRefusedError(f"{'--cluster' if flag else 'R1BUILD_CLUSTER'}: {problem}")
        return address
    return manifest.settings.evaluation.cluster


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
        f"(distributed.comm.tls.ca-file, {role}.cert and {role}.key; README, Evaluating on a cluster)"
    )
