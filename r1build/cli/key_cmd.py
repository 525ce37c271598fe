"""``r1build key``: ``generate`` a signing key pair, print the ``public`` key of a private key file.

A private key file is an unencrypted PKCS#8 PEM file written with mode 0600; ``R1BUILD_SIGNING_KEY`` may hold the
same PEM text or the base64 of the key's 32 raw bytes (:mod:`r1build.trust.signing`). The public key line printed goes
into the manifest's ``[cache] trusted-keys``. Exit codes: 0 ok; 2 for a file that exists, cannot be written, or
holds no Ed25519 private key.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..trust.signing import DEFAULT_KEY_NAME, KeyPair, read_private_key_file, write_private_key
from .render import Console

__all__ = ["DEFAULT_KEY_FILE", "register"]

DEFAULT_KEY_FILE = Path(DEFAULT_KEY_NAME)
"""Where ``key generate`` writes without ``--out`` (in the current folder)."""


def register(sub: Any) -> None:
    """Add ``key`` and its sub-commands."""
    key = sub.add_parser("key", help="Ed25519 keys that sign shared decisions and bundles")
    commands = key.add_subparsers(dest="key_command", metavar="SUBCOMMAND", parser_class=type(key))
    commands.required = True

    p = commands.add_parser("generate", help="write a new private key file (mode 0600), print its public key")
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_KEY_FILE,
        metavar="FILE",
        help=f"private key file to write (default: ./{DEFAULT_KEY_FILE}); never commit it",
    )
    p.add_argument("--force", action="store_true", help="replace an existing file")
    p.set_defaults(func=cmd_generate)

    p = commands.add_parser("public", help="print the public key line of a private key file")
    p.add_argument("file", type=Path, metavar="FILE", help="private key file (PEM, or base64 of the raw key)")
    p.set_defaults(func=cmd_public)


def cmd_generate(args: argparse.Namespace, console: Console) -> int:
    pair = KeyPair.generate()
    write_private_key(args.out, pair.private, overwrite=args.force)
    console.err_line(
        f"wrote the private key {args.out} (mode 0600, key id {pair.public.key_id}): keep it secret, "
        "out of the repository and the cache; sign with --signing-key FILE or R1BUILD_SIGNING_KEY"
    )
    console.err_line("trust it in kernels.toml ([cache]) or pyproject.toml ([tool.r1build.cache]):")
    console.err_line(f'  trusted-keys = ["{pair.public.line}"]')
    console.print(pair.public.line)
    return 0


def cmd_public(args: argparse.Namespace, console: Console) -> int:
    key = read_private_key_file(args.file)
    console.err_line(f"key id {key.key_id}")
    console.print(key.public.line)
    return 0
