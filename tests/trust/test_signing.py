"""Signed decisions: keys, signatures and every refusal, trusted keys in the manifest, and ``r1build key``."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as WaitedTooLong
from pathlib import Path

import pytest

from r1build.errors import ConfigError, ManifestError, SignatureError
from r1build.keys import canonical_json
from r1build.manifest import find_manifest, load_manifest
from r1build.settings import env_settings
from r1build.trust.signing import (
    KeyPair,
    PublicKey,
    TrustedKeys,
    entry_payload,
    load_private_key,
    parse_private_key,
    parse_public_key,
    read_private_key_file,
    sign,
    trusted_keys,
    verify,
    write_private_key,
)

RECORD = canonical_json({"kernel": "matmul", "arch": "sm_90", "winner": "a" * 64})


@pytest.fixture(scope="module")
def pair() -> KeyPair:
    return KeyPair.generate()


@pytest.fixture(scope="module")
def other() -> KeyPair:
    return KeyPair.generate()


def refusal(payload: bytes, signature: str | None, trusted: TrustedKeys) -> SignatureError:
    with pytest.raises(SignatureError) as info:
        verify(payload, signature, trusted)
    assert info.value.exit_code == 2
    return info.value


# -- keys and signatures --------------------------------------------------------------------------------------
def test_key_id_and_public_line(pair: KeyPair) -> None:
    raw = pair.public.raw
    assert len(raw) == 32
    assert pair.public.key_id == hashlib.sha256(raw).hexdigest()[:16]
    assert pair.public.line == "ed25519:" + base64.b64encode(raw).decode()
    assert parse_public_key(pair.public.line) == pair.public
    assert pair.private.public == pair.public
    assert "PRIVATE" not in repr(pair.private) and pair.public.key_id in repr(pair.private)


def test_private_key_round_trips_through_pem_and_raw_base64(pair: KeyPair) -> None:
    for form in (pair.private.pem(), pair.private.raw_base64().encode()):
        again = parse_private_key(form, "test")
        assert again.public == pair.public
        assert verify(RECORD, sign(RECORD, again), TrustedKeys.of([pair.public])) == pair.public.key_id


def test_sign_and_verify(pair: KeyPair, other: KeyPair) -> None:
    signature = sign(RECORD, pair.private)
    algorithm, kid, data = signature.split(":")
    assert algorithm == "ed25519" and kid == pair.public.key_id and len(base64.b64decode(data)) == 64
    assert sign(RECORD, pair.private) == signature  # Ed25519 is deterministic: stable over canonical JSON
    trusted = TrustedKeys.of([other.public, pair.public])
    assert verify(RECORD, signature, trusted) == pair.public.key_id
    assert sorted(trusted.ids) == trusted.ids and len(trusted.ids) == 2


def test_unsigned_is_refused(pair: KeyPair) -> None:
    for missing in (None, "", "  "):
        err = refusal(RECORD, missing, TrustedKeys.of([pair.public]))
        assert err.reason == "unsigned" and err.key_id is None
        assert "unsigned" in str(err)


def test_tampered_payload_is_refused(pair: KeyPair) -> None:
    signature = sign(RECORD, pair.private)
    tampered = RECORD.replace(b"a" * 64, b"b" * 64)
    err = refusal(tampered, signature, TrustedKeys.of([pair.public]))
    assert err.reason == "invalid" and err.key_id == pair.public.key_id
    assert f"trusted key {pair.public.key_id} does not match" in str(err)


def test_tampered_signature_is_refused(pair: KeyPair) -> None:
    algorithm, kid, data = sign(RECORD, pair.private).split(":")
    raw = bytearray(base64.b64decode(data))
    raw[10] ^= 0x01
    err = refusal(RECORD, f"{algorithm}:{kid}:{base64.b64encode(bytes(raw)).decode()}", TrustedKeys.of([pair.public]))
    assert err.reason == "invalid" and err.key_id == pair.public.key_id


def test_key_id_swapped_to_a_trusted_key_is_refused(pair: KeyPair, other: KeyPair) -> None:
    """A signature by an untrusted key relabelled with a trusted key's id fails the check itself."""
    _, _, data = sign(RECORD, other.private).split(":")
    err = refusal(RECORD, f"ed25519:{pair.public.key_id}:{data}", TrustedKeys.of([pair.public]))
    assert err.reason == "invalid" and err.key_id == pair.public.key_id


def test_untrusted_key_is_refused(pair: KeyPair, other: KeyPair) -> None:
    signature = sign(RECORD, other.private)
    err = refusal(RECORD, signature, TrustedKeys.of([pair.public]))
    assert err.reason == "untrusted" and err.key_id == other.public.key_id
    assert f"signed by key {other.public.key_id}, which is not a trusted key" in str(err)
    assert pair.public.key_id in str(err)
    err = refusal(RECORD, signature, TrustedKeys())
    assert err.reason == "untrusted" and "trusted-keys is empty" in str(err)


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda s: s.replace("ed25519:", "rsa:", 1), 'signature algorithm "rsa" is not supported'),
        (lambda s: s.replace("ed25519:", "ED25519:", 1), 'signature algorithm "ED25519" is not supported'),
        (lambda s: s.split(":", 1)[1], "malformed signature"),
        (lambda s: s + ":extra", "malformed signature"),
        (lambda s: "ed25519:xyz:" + s.split(":")[2], 'key id "xyz" is not 16 lower-case hex digits'),
        (lambda s: s[:-4] + "!!!!", "the signature is not base64"),
        (
            lambda s: ":".join(s.split(":")[:2]) + ":" + base64.b64encode(b"short").decode(),
            "an ed25519 signature is 64 bytes, this one is 5",
        ),
        (lambda s: "garbage", 'malformed signature "garbage"'),
    ],
    ids=["rsa", "upper-case", "no-algorithm", "four-parts", "bad-key-id", "not-base64", "short", "garbage"],
)
def test_malformed_signatures_are_refused(pair: KeyPair, mangle: Callable[[str], str], message: str) -> None:
    err = refusal(RECORD, mangle(sign(RECORD, pair.private)), TrustedKeys.of([pair.public]))
    assert err.reason == "malformed"
    assert message in str(err)


def test_entry_payload_binds_key_and_content(pair: KeyPair) -> None:
    trusted = TrustedKeys.of([pair.public])
    signature = sign(entry_payload("decision/" + "d" * 64, RECORD), pair.private)
    assert verify(entry_payload("decision/" + "d" * 64, RECORD), signature, trusted)
    assert refusal(entry_payload("decision/" + "e" * 64, RECORD), signature, trusted).reason == "invalid"
    assert refusal(entry_payload("decision/" + "d" * 64, RECORD + b" "), signature, trusted).reason == "invalid"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("AAAA", "is not a public key line"),
        ("rsa:" + base64.b64encode(b"k" * 32).decode(), 'key algorithm "rsa" is not supported'),
        ("ed25519:not base64!", "is not base64"),
        ("ed25519:" + base64.b64encode(b"k" * 31).decode(), "public key is 32 bytes, this one is 31"),
    ],
)
def test_bad_public_key_lines(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_public_key(line)


# -- private keys from files and the environment --------------------------------------------------------------
def test_write_private_key_is_0600_and_never_overwrites(tmp_path: Path, pair: KeyPair, other: KeyPair) -> None:
    path = tmp_path / "team.pem"
    old = os.umask(0)
    try:
        write_private_key(path, pair.private)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_private_key_file(path).public == pair.public
    with pytest.raises(ConfigError, match="exists; not overwriting"):
        write_private_key(path, other.private)
    write_private_key(path, other.private, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_private_key_file(path).public == other.public
    assert sorted(p.name for p in tmp_path.iterdir()) == ["team.pem"]


def test_a_signing_key_fifo_no_one_writes_to_is_refused_at_once(tmp_path: Path, pair: KeyPair) -> None:
    """``--signing-key`` naming a FIFO no one writes to waited for a writer for ever (`status --remote-write`,
    `cache export`, `key public`); it reads as empty now. A pipe with a writer (``<(pass show key)``) is read."""
    fifo = tmp_path / "key.fifo"
    os.mkfifo(fifo)
    with ThreadPoolExecutor(1) as pool:
        reading = pool.submit(read_private_key_file, fifo)
        try:
            error = reading.exception(timeout=10)
        except WaitedTooLong:  # not the builtin TimeoutError before Python 3.11
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a writer comes and goes: the reader ends
            pytest.fail("reading a FIFO no one writes to waited for a writer")
    assert isinstance(error, ConfigError), error
    assert str(error).endswith("key.fifo: empty, no key in it (or a FIFO no one writes to)"), error
    read, write = os.pipe()
    os.write(write, pair.private.pem())
    os.close(write)
    try:
        assert read_private_key_file(Path(f"/dev/fd/{read}")).public == pair.public
    finally:
        os.close(read)


def test_load_private_key_from_file_or_environment(tmp_path: Path, pair: KeyPair, other: KeyPair) -> None:
    path = tmp_path / "k.pem"
    write_private_key(path, pair.private)
    assert load_private_key(None, {}) is None
    assert load_private_key(None, {"R1BUILD_SIGNING_KEY": "  "}) is None
    env_raw = {"R1BUILD_SIGNING_KEY": other.private.raw_base64()}
    env_pem = {"R1BUILD_SIGNING_KEY": other.private.pem().decode()}
    for env in (env_raw, env_pem):
        key = load_private_key(None, env)
        assert key is not None and key.public == other.public
    key = load_private_key(path, env_raw)  # the file wins over the variable
    assert key is not None and key.public == pair.public
    assert other.private.raw_base64() not in repr(env_settings(env_raw))


def test_bad_private_keys(tmp_path: Path) -> None:
    secret = base64.b64encode(b"s" * 31).decode()
    with pytest.raises(ConfigError, match="R1BUILD_SIGNING_KEY: an ed25519 private key is 32 bytes") as info:
        load_private_key(None, {"R1BUILD_SIGNING_KEY": secret})
    assert secret not in str(info.value)
    with pytest.raises(ConfigError, match="R1BUILD_SIGNING_KEY: not an ed25519 private key"):
        load_private_key(None, {"R1BUILD_SIGNING_KEY": "not a key at all"})
    with pytest.raises(ConfigError, match="no such file"):
        read_private_key_file(tmp_path / "absent.pem")
    with pytest.raises(ConfigError, match="a folder, not a key file"):
        read_private_key_file(tmp_path)
    broken = tmp_path / "broken.pem"
    broken.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(ConfigError, match=r"broken\.pem: not a readable private key"):
        read_private_key_file(broken)


def test_an_openssl_rsa_key_is_named(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    path = tmp_path / "rsa.pem"
    path.write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(ConfigError, match="RSAPrivateKey, not an ed25519 key"):
        read_private_key_file(path)


def test_openssl_ed25519_key_is_read(tmp_path: Path) -> None:
    """A key made by OpenSSL (where it is installed) reads like one of ours."""
    import shutil

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    path = tmp_path / "openssl.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(path)], check=True)
    key = read_private_key_file(path)
    assert verify(b"x", sign(b"x", key), TrustedKeys.of([key.public])) == key.key_id


# -- trusted keys in the manifest -----------------------------------------------------------------------------
def with_cache_table(root_copy: Path, body: str) -> Path:
    path = root_copy / "kernels.toml"
    path.write_text(path.read_text(encoding="utf-8") + "\n[cache]\n" + body + "\n", encoding="utf-8")
    return path


def test_trusted_keys_from_the_manifest(root_copy: Path, pair: KeyPair, other: KeyPair) -> None:
    path = with_cache_table(root_copy, f'trusted-keys = [\n  "{pair.public.line}",\n  "{other.public.line}",\n]')
    trusted = trusted_keys(load_manifest(path))
    assert trusted.keys == {pair.public.key_id: pair.public, other.public.key_id: other.public}
    plain = load_manifest(path)
    assert plain.settings.cache.trusted_keys == [pair.public.line, other.public.line]


def test_no_cache_table_trusts_nothing(root_copy: Path) -> None:
    trusted = trusted_keys(load_manifest(root_copy / "kernels.toml"))
    assert not trusted and trusted.ids == []


@pytest.mark.parametrize(
    ("body", "message", "key"),
    [
        (
            'trusted-keys = [\n  "{good}",\n  "ed25519:AAAA",\n]',
            "public key is 32 bytes, this one is 3",
            "cache.trusted-keys[1]",
        ),
        ('trusted-keys = [\n  "ssh-ed25519 AAAAC3Nza",\n]', "is an OpenSSH public key", "cache.trusted-keys[0]"),
        ('trusted-keys = [\n  "{good}",\n  "{good}",\n]', "is listed twice (also item 0)", "cache.trusted-keys[1]"),
        ('trusted-key = ["{good}"]', "unknown key 'trusted-key' (did you mean 'trusted-keys'?)", "cache.trusted-key"),
        ('trusted-keys = "{good}"', "expected", "cache.trusted-keys"),
    ],
    ids=["short", "ssh-format", "twice", "did-you-mean", "not-a-list"],
)
def test_bad_trusted_keys_name_file_line_and_key(
    root_copy: Path, pair: KeyPair, body: str, message: str, key: str
) -> None:
    path = with_cache_table(root_copy, body.replace("{good}", pair.public.line))
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    err = info.value
    assert message in err.message
    assert err.key == key
    assert err.file == str(path.resolve())
    assert err.line is not None
    line = path.read_text(encoding="utf-8").splitlines()[err.line - 1]
    assert "trusted-key" in line or "ed25519" in line or "ssh" in line


def test_unknown_table_key_suggests_cache(root_copy: Path) -> None:
    path = root_copy / "kernels.toml"
    path.write_text(path.read_text(encoding="utf-8") + "\n[cashe]\ntrusted-keys = []\n", encoding="utf-8")
    with pytest.raises(ManifestError, match="did you mean 'cache'"):
        load_manifest(path)


def test_trusted_keys_in_pyproject(root_copy: Path, pair: KeyPair) -> None:
    text = (root_copy / "kernels.toml").read_text(encoding="utf-8")
    body = [
        {"[[kernel]]": "[[tool.r1build.kernel]]", "[generation]": "[tool.r1build.generation]"}.get(line, line)
        for line in text.splitlines()
    ]
    header = '[project]\nname = "x"\nversion = "0"\n\n[tool.r1build]\n'
    tail = f'\n[tool.r1build.cache]\ntrusted-keys = ["{pair.public.line}", "ed25519:AA=="]\n'
    (root_copy / "pyproject.toml").write_text(header + "\n".join(body) + tail, encoding="utf-8")
    (root_copy / "kernels.toml").unlink()
    with pytest.raises(ManifestError) as info:
        load_manifest(find_manifest(root_copy))
    assert info.value.key == "tool.r1build.cache.trusted-keys[1]" and info.value.line is not None
    assert str(info.value).startswith(f"{(root_copy / 'pyproject.toml').resolve()}:{info.value.line}: ")
    good = (root_copy / "pyproject.toml").read_text(encoding="utf-8").replace(', "ed25519:AA=="', "")
    (root_copy / "pyproject.toml").write_text(good, encoding="utf-8")
    assert trusted_keys(load_manifest(find_manifest(root_copy))).ids == [pair.public.key_id]


# -- r1build key ----------------------------------------------------------------------------------------------
Cli = Callable[..., tuple[int, str, str]]


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    from r1build.cli.main import main

    monkeypatch.setenv("COLUMNS", "250")

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_cli_key_generate_and_public(tmp_path: Path, cli: Cli) -> None:
    path = tmp_path / "team.pem"
    code, out, err = cli("key", "generate", "--out", str(path))
    assert code == 0, err
    line = out.strip()
    public = parse_public_key(line)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert f'trusted-keys = ["{line}"]' in err and public.key_id in err
    code, out, err = cli("key", "public", str(path))
    assert code == 0 and out.strip() == line and public.key_id in err
    key = read_private_key_file(path)
    assert verify(b"p", sign(b"p", key), TrustedKeys.of([PublicKey(public.raw)])) == public.key_id


def test_cli_key_refusals(tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "team.pem"
    assert cli("key", "generate", "--out", str(path))[0] == 0
    before = path.read_bytes()
    code, _, err = cli("key", "generate", "--out", str(path))
    assert code == 2 and "exists; not overwriting" in err and "Traceback" not in err
    assert path.read_bytes() == before
    code, _, _ = cli("key", "generate", "--out", str(path), "--force")
    assert code == 0 and path.read_bytes() != before
    code, _, err = cli("key", "generate", "--out", str(tmp_path / "no" / "such" / "dir.pem"))
    assert code == 2 and "cannot write the key file" in err
    junk = tmp_path / "junk.pem"
    junk.write_text("hello\n")
    for bad, message in (
        (junk, "not an ed25519 private key"),
        (tmp_path / "absent.pem", "no such file"),
        (tmp_path, "a folder, not a key file"),
    ):
        code, out, err = cli("key", "public", str(bad))
        assert code == 2 and message in err and out == "" and "Traceback" not in err
    monkeypatch.chdir(tmp_path)
    code, out, _ = cli("key", "generate")
    assert code == 0 and (tmp_path / "r1build-signing-key.pem").is_file()
    assert parse_public_key(out.strip()).key_id == read_private_key_file(tmp_path / "r1build-signing-key.pem").key_id


def test_loading_a_manifest_does_not_import_cryptography(root_copy: Path, pair: KeyPair) -> None:
    """The trusted keys' text is checked without the library: commands that sign nothing skip its import."""
    import sys

    path = with_cache_table(root_copy, f'trusted-keys = ["{pair.public.line}"]')
    code = (
        "import sys; from r1build.manifest import load_manifest; "
        f"m = load_manifest(__import__('pathlib').Path({str(path)!r}), check_references=False); "
        "assert not [n for n in sys.modules if n.startswith('cryptography')], 'imported'; "
        "print(len(m.settings.cache.trusted_keys))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "1"
