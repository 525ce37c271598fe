"""``r1build worker``: the Dask workers of this host for ``r1build resolve --cluster``."""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..errors import UsageError
from .render import Console

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the ``worker`` command."""
    p = sub.add_parser("worker", help="start this host's Dask workers: one per visible GPU, and one for compiles")
    p.add_argument(
        "--scheduler",
        required=True,
        metavar="ADDRESS",
        help="the Dask scheduler (tls://host:8786; TLS from Dask's configuration, as for `dask worker`)",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="accept a plain tcp:// scheduler: unauthenticated, so anyone who can reach it or this host's worker "
        "ports can run code on this host",
    )
    p.add_argument(
        "--gpus",
        metavar="LIST",
        help="only these device ordinals, comma-separated (default: every visible GPU of a known arch)",
    )
    p.add_argument(
        "--compile-slots",
        type=int,
        metavar="N",
        help="static-gate compiles at once on this host (default: the CPU count; 0: none)",
    )
    p.add_argument(
        "--jobs-per-gpu",
        type=int,
        default=2,
        metavar="N",
        help="GPU jobs a GPU worker takes at once: 2 (the default) lets the next job compile while the "
        "GPU checks and times the current one, one at a time",
    )
    p.add_argument(
        "--timeout-s",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds to wait for the scheduler at the start (default 60)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the workers and the equivalent `dask worker` commands, start nothing",
    )
    # given by the process itself when it re-executes with the scrubbed environment (cluster.workers.exec_scrubbed)
    p.add_argument("--environment-scrubbed", dest="scrubbed", action="store_true", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_worker)


def _check_args(args: argparse.Namespace) -> None:
    """:class:`UsageError` for arguments no worker can start with: a malformed (or plain TCP, unless
    ``--insecure``) scheduler address, a count out of range."""
    from ..cluster import plain_tcp
    from ..manifest.addresses import cluster_address_problem

    problem = cluster_address_problem(args.scheduler)
    if problem is not None:  # before anything is printed: --dry-run would show a malformed (or secret) address
        raise UsageError(f"--scheduler: {problem}")
    if plain_tcp(args.scheduler) and not args.insecure:
        raise UsageError(
            f"--scheduler: {args.scheduler} is plain TCP, unencrypted and unauthenticated: anyone who can reach "
            "the scheduler or this host's worker ports could run code on this host; use tls:// with Dask's TLS "
            "settings (docs/guides/cluster.md), or --insecure on a network you trust alone"
        )
    if args.jobs_per_gpu < 1:
        raise UsageError("--jobs-per-gpu must be at least 1")
    if args.compile_slots is not None and args.compile_slots < 0:
        raise UsageError("--compile-slots must not be negative")


def _scrubbed_argv(args: argparse.Namespace) -> list[str]:
    """The command line this command re-executes itself with (:func:`~r1build.cluster.workers.exec_scrubbed`)."""
    argv = ["worker", "--scheduler", args.scheduler, "--jobs-per-gpu", str(args.jobs_per_gpu)]
    argv += ["--timeout-s", repr(args.timeout_s), "--environment-scrubbed"]
    if args.gpus:
        argv += ["--gpus", args.gpus]
    if args.compile_slots is not None:
        argv += ["--compile-slots", str(args.compile_slots)]
    if args.insecure:
        argv.append("--insecure")
    return argv + ["-v"] * args.verbose + ["-q"] * args.quiet


def cmd_worker(args: argparse.Namespace, console: Console) -> int:
    from ..cluster import plain_tcp
    from ..cluster.workers import check_scheduler, exec_scrubbed, plan_workers, run_workers
    from ..evaluate.devices import detect_gpus

    _check_args(args)
    if not args.dry_run and not args.scrubbed:  # tasks must find no credential of this environment
        check_scheduler(args.scheduler)
        exec_scrubbed(_scrubbed_argv(args))
    if args.insecure and plain_tcp(args.scheduler):
        console.warning(
            f"--insecure: the scheduler at {args.scheduler} is plain TCP, unencrypted and unauthenticated: anyone "
            "who can reach it or this host's worker ports can run code on this host, as this user"
        )
    gpus = detect_gpus()
    if args.gpus:
        try:
            wanted = {int(x) for x in args.gpus.split(",") if x.strip()}
        except ValueError:
            raise UsageError(f"--gpus: {args.gpus!r} is not a comma-separated list of device ordinals") from None
        missing = wanted - {g.index for g in gpus}
        if missing:
            raise UsageError(
                f"--gpus: no visible GPU {', '.join(map(str, sorted(missing)))} (visible: "
                f"{', '.join(str(g.index) for g in gpus) or 'none'})"
            )
        gpus = [g for g in gpus if g.index in wanted]
    slots = args.compile_slots if args.compile_slots is not None else (os.cpu_count() or 1)
    plans = plan_workers(gpus, compile_slots=slots, jobs_per_gpu=args.jobs_per_gpu)
    console.table(
        ["worker", "threads", "resources", "GPU"],
        [[p.name, p.nthreads, ", ".join(f"{k}={v:g}" for k, v in p.resources.items()), p.gpu or "-"] for p in plans],
        title=f"r1build workers for {args.scheduler}",
    )
    if not gpus:
        console.warning("no GPU visible here (cupy missing, no driver, or none): compile slots only")
    if args.dry_run:
        for p in plans:
            console.print(p.dask_command(args.scheduler))
        return 0
    run_workers(
        args.scheduler,
        plans,
        timeout_s=args.timeout_s,
        ready=lambda: console.err_line(f"connected to {args.scheduler}; serving until Ctrl-C"),
    )
    return 0
