"""Signed decisions: Ed25519 keys, detached signatures, and the public keys a project trusts.

A team signs what it publishes (cache decisions, bundle entries) with one Ed25519 private key; builds accept only
what is signed by a public key listed in the manifest's ``[cache] trusted-keys``. The cryptography is the
``cryptography`` package's; nothing here is hand-written beyond the text formats:

* a **public key line** (what ``trusted-keys`` lists): ``ed25519:<base64 of the 32-byte raw public key>``;
* a **key id**: the first 16 hex digits of the sha256 of the raw public key;
* a **signature**: ``ed25519:<key id>:<base64 of the 64-byte signature>``, detached from what it signs;
* a **private key**: a PKCS#8 PEM file (``-----BEGIN PRIVATE KEY-----``, what ``r1build key generate`` writes and
  ``openssl genpkey -algorithm ed25519`` writes too), or the base64 of the 32-byte raw private key (one line, for
  ``R1BUILD_SIGNING_KEY`` in a CI secret). Either form is accepted from the file and from the variable.

The private key comes from ``--signing-key FILE`` or ``R1BUILD_SIGNING_KEY`` (read in :mod:`r1build.settings`),
never from the cache or a remote. A cache entry is signed through :func:`entry_payload`, which binds its full
key and the sha256 of its canonical JSON payload, so a signature cannot be moved to another key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..convert import field, record
from ..digests import canonical_json
from ..errors import ConfigError, SignatureError
from ..filemode import replace_problem
from .trusted import TrustedKeys

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from ..manifest.model import Manifest

# ``cryptography`` is imported where keys are made, read, used: loading a manifest (which checks the text of its
# trusted keys) and every command that signs nothing stay free of its import time.

__all__ = [
    "ALGORITHM",
    "DEFAULT_KEY_NAME",
    "KeyPair",
    "PrivateKey",
    "PublicKey",
    "TrustedKeys",
    "entry_payload",
    "entry_statement",
    "key_id",
    "load_private_key",
    "parse_private_key",
    "parse_public_key",
    "public_key_problem",
    "read_private_key_file",
    "sign",
    "trusted_keys",
    "verify",
    "write_private_key",
]

ALGORITHM = "ed25519"
"""The one signature algorithm: the prefix of key lines and signatures."""
_RAW_KEY_BYTES = 32
_SIGNATURE_BYTES = 64
_KEY_ID = re.compile(r"[0-9a-f]{16}")
_MAX_KEY_FILE_BYTES = 64 * 1024
ENTRY_STATEMENT = "r1build signed cache entry"
"""Domain of the bytes :func:`entry_payload` makes: a signature over one cannot pass for another kind of message."""

DEFAULT_KEY_NAME = "r1build-signing-key.pem"
"""The private key file ``r1build key generate`` writes without ``--out``, in the current folder (often a
project's): an sdist never carries a file of this name (:mod:`r1build.build.sdist`)."""


def _b64decode(text: str) -> bytes:
    """Strict base64 (the standard alphabet, padded); ``ValueError`` otherwise."""
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64 ({exc})") from None


def key_id(raw_public: bytes) -> str:
    """First 16 hex digits of the sha256 of a raw public key."""
    return hashlib.sha256(raw_public).hexdigest()[:16]


@record(frozen=True)
class PublicKey:
    """An Ed25519 public key."""

    raw: bytes
    """The 32 raw bytes."""

    @property
    def key_id(self) -> str:
        """16 hex digits naming the key in signatures and messages."""
        return key_id(self.raw)

    @property
    def line(self) -> str:
        """The key as ``trusted-keys`` lists it: ``ed25519:<base64>``."""
        return f"{ALGORITHM}:{base64.b64encode(self.raw).decode()}"

    def verifies(self, payload: bytes, signature: bytes) -> bool:
        """Whether ``signature`` is this key's signature of ``payload``."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        try:
            Ed25519PublicKey.from_public_bytes(self.raw).verify(signature, payload)
        except InvalidSignature:
            return False
        return True


@record(frozen=True)
class PrivateKey:
    """An Ed25519 private key (its repr shows only the public key's id)."""

    key: Ed25519PrivateKey = field(repr=False)
    """The ``cryptography`` key."""

    @property
    def public(self) -> PublicKey:
        """The matching public key."""
        from cryptography.hazmat.primitives import serialization

        return PublicKey(self.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))

    @property
    def key_id(self) -> str:
        """The public key's id."""
        return self.public.key_id

    def __repr__(self) -> str:
        return f"PrivateKey(key_id={self.key_id!r})"

    def pem(self) -> bytes:
        """The key as an unencrypted PKCS#8 PEM file."""
        from cryptography.hazmat.primitives import serialization

        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def raw_base64(self) -> str:
        """The base64 of the 32 raw private bytes (the one-line form for ``R1BUILD_SIGNING_KEY``)."""
        from cryptography.hazmat.primitives import serialization

        raw = self.key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )
        return base64.b64encode(raw).decode()


@record(frozen=True)
class KeyPair:
    """A private key and its public key."""

    private: PrivateKey
    """Signs; kept in a file or the environment, never in the cache."""
    public: PublicKey
    """Verifies; listed in ``[cache] trusted-keys``."""

    @classmethod
    def generate(cls) -> KeyPair:
        """A new random key pair."""
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = PrivateKey(Ed25519PrivateKey.generate())
        return cls(private, private.public)


# -- reading keys ---------------------------------------------------------------------------------------------
def public_key_problem(line: str) -> str | None:
    """Why ``line`` is not a public key line ``ed25519:<base64 of 32 bytes>`` (None when it is one)."""
    algorithm, sep, data = line.partition(":")
    if line.startswith("ssh-"):
        return (
            f"{_shown(line)} is an OpenSSH public key; list keys as '{ALGORITHM}:<base64 of the raw public "
            "key>' (`r1build key public FILE` prints one)"
        )
    if not sep:
        return f"{_shown(line)} is not a public key line (expected '{ALGORITHM}:<base64 of the raw public key>')"
    if algorithm != ALGORITHM:
        return f"key algorithm {_shown(algorithm)} is not supported (only {ALGORITHM!r})"
    try:
        raw = _b64decode(data)
    except ValueError as exc:
        return f"the key after '{ALGORITHM}:' is {exc}"
    if len(raw) != _RAW_KEY_BYTES:
        return f"an {ALGORITHM} public key is {_RAW_KEY_BYTES} bytes, this one is {len(raw)}"
    return None


def parse_public_key(line: str) -> PublicKey:
    """A public key from its line; ``ValueError`` saying what is wrong otherwise."""
    problem = public_key_problem(line)
    if problem is not None:
        raise ValueError(problem)
    return PublicKey(_b64decode(line.partition(":")[2]))


def parse_private_key(data: bytes, what: str) -> PrivateKey:
    """A private key from PEM (PKCS#8 or OpenSSH) or the base64 of its 32 raw bytes; :class:`ConfigError` naming
    ``what`` (a file, a variable) otherwise. The key's bytes are never quoted in a message."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        key: object
        try:
            if text.startswith(b"-----BEGIN OPENSSH"):
                key = serialization.load_ssh_private_key(text, password=None)
            else:
                key = serialization.load_pem_private_key(text, password=None)
        except TypeError:
            raise ConfigError(
                f"{what}: the private key is encrypted; r1build reads unencrypted keys "
                "(keep the file mode 0600, or put the key in R1BUILD_SIGNING_KEY)"
            ) from None
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise ConfigError(f"{what}: not a readable private key ({exc})") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ConfigError(
                f"{what}: the private key is a {type(key).__name__.removeprefix('_')}, not an "
                f"{ALGORITHM} key (`r1build key generate` makes one)"
            )
        return PrivateKey(key)
    try:
        raw = _b64decode(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ConfigError(
            f"{what}: not an {ALGORITHM} private key (expected a PEM file as `r1build key generate` "
            f"writes, or the base64 of the {_RAW_KEY_BYTES} raw private bytes)"
        ) from None
    if len(raw) != _RAW_KEY_BYTES:
        raise ConfigError(f"{what}: an {ALGORITHM} private key is {_RAW_KEY_BYTES} bytes, this base64 holds {len(raw)}")
    return PrivateKey(Ed25519PrivateKey.from_private_bytes(raw))


def read_private_key_file(path: Path) -> PrivateKey:
    """The private key in ``path``; :class:`ConfigError` for a file that is missing, unreadable or no key. A pipe
    is read as its writer writes (``--signing-key <(pass show team-key)``); a FIFO no one writes to reads as empty
    at once: opened without ``O_NONBLOCK``, it waited for a writer for ever."""
    try:
        if path.is_dir():
            raise ConfigError(f"signing key {path}: a folder, not a key file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as fh:
            os.set_blocking(fd, True)  # reads wait for a writer that is there; none there: end of file
            data = fh.read(_MAX_KEY_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"signing key {path}: no such file (`r1build key generate --out {path}` makes one)") from None
    except OSError as exc:
        raise ConfigError(f"signing key {path}: cannot read ({exc.strerror})") from None
    if len(data) > _MAX_KEY_FILE_BYTES:
        raise ConfigError(f"signing key {path}: too large for a key file")
    if not data.strip():
        raise ConfigError(f"signing key {path}: empty, no key in it (or a FIFO no one writes to)")
    return parse_private_key(data, f"signing key {path}")


def load_private_key(path: Path | None = None, environ: Mapping[str, str] | None = None) -> PrivateKey | None:
    """The signing key: from the file ``path`` (``--signing-key``) when given, else from ``R1BUILD_SIGNING_KEY``
    (read through :func:`r1build.settings.env_settings`; ``environ`` is the process environment when None); None
    when neither holds one. Never read from the cache."""
    if path is not None:
        return read_private_key_file(Path(path))
    from ..settings import env_settings

    value = env_settings(environ).signing_key
    if value is None:
        return None
    return parse_private_key(value.encode(), "R1BUILD_SIGNING_KEY")


def write_private_key(path: Path, key: PrivateKey, *, overwrite: bool = False) -> None:
    """Write ``key`` as PEM to ``path``, created with mode 0600 (no moment where others may read it). An existing
    file is an error unless ``overwrite``, when it is replaced atomically (a 0600 temporary file renamed over
    it). :class:`ConfigError` for a file that exists or cannot be written."""
    path = Path(path)
    refused = replace_problem(path) if overwrite else None
    if refused is not None:
        raise ConfigError(f"cannot write the key file: {refused}")
    target = path.with_name(f".{path.name}.tmp{os.getpid()}") if overwrite else path
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{path} exists; not overwriting a key (--force replaces it)") from None
    except OSError as exc:
        raise ConfigError(f"cannot write the key file {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.pem())
        if overwrite:
            target.replace(path)
    except OSError as exc:
        target.unlink(missing_ok=True)
        raise ConfigError(f"cannot write the key file {path}: {exc.strerror}") from None


# -- trusted keys ---------------------------------------------------------------------------------------------
def trusted_keys(manifest: Manifest) -> TrustedKeys:
    """The public keys a manifest trusts (``[cache] trusted-keys``; validated when the manifest was loaded, with
    the file, line and key path of any bad line)."""
    return TrustedKeys.of(parse_public_key(line) for line in manifest.settings.cache.trusted_keys)


# -- signatures -----------------------------------------------------------------------------------------------
def sign(payload: bytes, key: PrivateKey) -> str:
    """A detached signature of ``payload``: ``ed25519:<key id>:<base64 signature>``."""
    signature = key.key.sign(payload)
    return f"{ALGORITHM}:{key.key_id}:{base64.b64encode(signature).decode()}"


def verify(payload: bytes, signature: str | None, trusted: TrustedKeys) -> str:
    """The id of the trusted key that signed ``payload``; :class:`SignatureError` when ``signature`` is absent,
    malformed, by a key not in ``trusted``, or not a signature of ``payload``."""
    if signature is None or not signature.strip():
        raise SignatureError(
            "unsigned: no signature (sign with `--signing-key FILE` or R1BUILD_SIGNING_KEY)", reason="unsigned"
        )
    parts = signature.split(":")
    if len(parts) != 3:
        raise SignatureError(
            f"malformed signature {_shown(signature)}: expected '{ALGORITHM}:<key id>:<base64 signature>'",
            reason="malformed",
        )
    algorithm, kid, data = parts
    if algorithm != ALGORITHM:
        raise SignatureError(
            f"signature algorithm {_shown(algorithm)} is not supported (only {ALGORITHM!r})", reason="malformed"
        )
    if not _KEY_ID.fullmatch(kid):
        raise SignatureError(
            f"malformed signature: key id {_shown(kid)} is not 16 lower-case hex digits", reason="malformed"
        )
    try:
        raw = _b64decode(data)
    except ValueError as exc:
        raise SignatureError(
            f"malformed signature by key {kid}: the signature is {exc}", reason="malformed", key_id=kid
        ) from None
    if len(raw) != _SIGNATURE_BYTES:
        raise SignatureError(
            f"malformed signature by key {kid}: an {ALGORITHM} signature is {_SIGNATURE_BYTES} "
            f"bytes, this one is {len(raw)}",
            reason="malformed",
            key_id=kid,
        )
    public = trusted.keys.get(kid)
    if public is None:
        listed = ", ".join(trusted.ids) if trusted else "none: [cache] trusted-keys is empty"
        raise SignatureError(
            f"signed by key {kid}, which is not a trusted key (trusted: {listed})", reason="untrusted", key_id=kid
        )
    if not public.verifies(payload, raw):
        raise SignatureError(
            f"the signature by trusted key {kid} does not match: the signed content or the signature was altered",
            reason="invalid",
            key_id=kid,
        )
    return kid


def entry_payload(key: str, payload: bytes) -> bytes:
    """The bytes signed for the cache entry ``key`` holding ``payload``: canonical JSON binding the statement
    :data:`ENTRY_STATEMENT`, the full key and the sha256 of the payload."""
    return entry_statement(key, hashlib.sha256(payload).hexdigest())


def entry_statement(key: str, sha256: str) -> bytes:
    """:func:`entry_payload` of a payload whose sha256 is known (a bundle's, checked as it is read)."""

    return canonical_json({"statement": ENTRY_STATEMENT, "key": key, "sha256": sha256})


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, cut to ``limit`` characters."""
    return json.dumps(text if len(text) <= limit else text[:limit] + "...")
