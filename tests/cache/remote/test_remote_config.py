"""How the remote cache is configured: manifest, environment, command line, build config setting; bad values are
clear errors (exit 2), never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from r1build.build.options import split_settings
from r1build.cache import Cache
from r1build.cache.remote import open_store, record_key
from r1build.cli.main import main
from r1build.errors import ConfigError, ManifestError
from r1build.manifest import load_manifest, remote_url_problem
from r1build.records import ResolveOptions
from r1build.resolve import prepare_build
from r1build.settings import env_settings
from r1build.trust.signing import KeyPair
from tests.cache.remote.remote_servers import Nginx
from tests.cache.remote.remote_support import measured_tiny, push, tiny_project


@pytest.mark.slow
def test_a_build_reads_the_remote_named_by_its_config_setting(
    nginx: Nginx, team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    key = measured_tiny(project, tmp_path / "a")
    url = f"{nginx.url}/build-setting"
    assert push(project, tmp_path / "a", url, team_key) == (2, 0)
    options, rest = split_settings({"r1build.remote-cache": url, "build-dir": "b"}, environ={})
    assert options.remote_cache == url and rest == {"build-dir": "b"}
    cmake = prepare_build(
        project,
        ResolveOptions(locked=True, cache_dir=tmp_path / "b", remote_cache=options.remote_cache),
        out_dir=tmp_path / "gen",
    )
    assert cmake.is_file()
    with Cache(tmp_path / "b") as cache:
        assert cache.peek(f"decision/{key}") is not None  # the build took it from the remote


def test_the_manifest_url_is_checked_where_it_is_written(team_key: KeyPair, tmp_path: Path) -> None:
    for i, (url, says) in enumerate(
        (
            ("ftp://host/x", "not an http://, https:// or s3:// URL"),
            ("https://user:pw@host/x", "holds no credentials"),
            ("https://host/x?token=1", "no query"),
        )
    ):
        project = tiny_project(tmp_path / str(i), team_key.public.line, url=url)
        with pytest.raises(ManifestError) as err:
            load_manifest(project / "kernels.toml")
        assert "kernels.toml:" in str(err.value) and "cache.url" in str(err.value) and says in str(err.value)


def test_the_environment_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    env = env_settings(
        {
            "R1BUILD_REMOTE_CACHE": " s3://b/p ",
            "R1BUILD_REMOTE_WRITE": "yes",
            "R1BUILD_REMOTE_TIMEOUT": "2.5",
            "R1BUILD_REMOTE_HEADER": "X-Team-Key: abc:def",
        }
    )
    assert (env.remote_cache, env.remote_write, env.remote_timeout) == ("s3://b/p", True, 2.5)
    assert env.remote_header == ("X-Team-Key", "abc:def") and "abc" not in repr(env)
    assert env_settings({"R1BUILD_REMOTE_TOKEN": "t0k"}).remote_header == ("Authorization", "Bearer t0k")
    for bad in (
        {"R1BUILD_REMOTE_TIMEOUT": "soon"},
        {"R1BUILD_REMOTE_TIMEOUT": "0"},
        {"R1BUILD_REMOTE_HEADER": "no colon"},
        {"R1BUILD_REMOTE_TOKEN": "a", "R1BUILD_REMOTE_HEADER": "X: b"},
        {"R1BUILD_REMOTE_WRITE": "maybe"},
    ):
        with pytest.raises(ConfigError):
            env_settings(bad)


def test_an_s3_remote_without_boto3_names_the_extra(
    team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'r1build\[s3\]'"):
        open_store("s3://bucket/prefix", timeout=1, header=None)
    project = tiny_project(tmp_path / "tiny", team_key.public.line, url="s3://bucket/prefix")
    assert main(["status", "-m", str(project), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "r1build[s3]" in err and "Traceback" not in err


def test_a_bad_remote_url_on_the_command_line_is_exit_2(
    team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    assert main(["resolve", "--locked", "-m", str(project), "--remote-cache", "gopher://x/y"]) == 2
    assert "not an http://, https:// or s3:// URL" in capsys.readouterr().err


@pytest.mark.slow
def test_the_remote_keeps_a_decision_whole_across_keys(
    nginx: Nginx, team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A valid signed record copied under another key is refused: the signature covers the key."""
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    key = measured_tiny(project, tmp_path / "a")
    url = f"{nginx.url}/moved"
    assert push(project, tmp_path / "a", url, team_key) == (2, 0)
    store = open_store(url, timeout=5, header=None)
    gates = [p for p in (nginx.root / "moved" / "r1build-v1" / "gate").iterdir()]
    assert len(gates) == 1
    other = "f" * 64
    store.put(record_key("gate", other), gates[0].read_bytes())
    store.close()
    from r1build.cache.remote import RemoteLayer
    from r1build.trust.signing import TrustedKeys

    layer = RemoteLayer(open_store(url, timeout=5, header=None), trusted=TrustedKeys.of([team_key.public]))
    assert layer.record("gate", gates[0].name) is not None
    assert layer.record("gate", other) is None and layer.counts["refused"] == 1
    assert layer.record("decision", key) is not None
    layer.close()


SECRET = "s3cretpw"
LEAKY_URLS = (
    f"https://bob:{SECRET}@cache.example.org/x?y=1",  # credentials and a query: each check names the URL
    f"ftp://bob:{SECRET}@host/x",
    f"https://bob:{SECRET}@host:99999/x",
    f"https://bob:{SECRET} x@host/x",
    f"https://bob:pa/{SECRET}@host/x",
    f"https://host/x?token={SECRET}",
    f"https://host/x#{SECRET}",
)


def test_a_password_or_token_in_a_url_is_never_repeated(
    team_key: KeyPair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tiny_project(tmp_path / "tiny", team_key.public.line)
    for url in LEAKY_URLS:
        assert main(["resolve", "--locked", "-m", str(project), "--remote-cache", url]) == 2
        out = capsys.readouterr().err
        assert SECRET not in out and "***" in out and "--remote-cache" in out, out
        monkeypatch.setenv("R1BUILD_REMOTE_CACHE", url)
        assert main(["status", "-m", str(project)]) == 2
        out = capsys.readouterr().err
        assert SECRET not in out and "R1BUILD_REMOTE_CACHE" in out, out
        monkeypatch.delenv("R1BUILD_REMOTE_CACHE")
        with pytest.raises(ConfigError) as raised:
            split_settings({"r1build.remote-cache": url}, environ={})
        assert SECRET not in str(raised.value)
    for i, url in enumerate(LEAKY_URLS):
        for table in ("cache", "generation"):
            where = tmp_path / f"{table}{i}"
            manifest = tiny_project(where, team_key.public.line) / "kernels.toml"
            text = manifest.read_text(encoding="utf-8")
            key = "url" if table == "cache" else "base-url"
            text = text.replace("\n[cache]\n", f'\n[cache]\n{key} = "{url}"\n') if table == "cache" else text
            if table == "generation":
                text += f'\n[generation]\nbase-url = "{url}"\n'
            manifest.write_text(text, encoding="utf-8")
            with pytest.raises(ManifestError) as err:
                load_manifest(manifest)
            assert SECRET not in str(err.value) and "***" in str(err.value) and key in str(err.value), err.value


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"AWS_ENDPOINT_URL": f"http://bob:{SECRET}@host /x"}, "Invalid endpoint"),
        ({"AWS_DEFAULT_REGION": "us east 1!"}, "region_name"),
        ({"AWS_PROFILE": "no-such-profile"}, "no-such-profile"),
        ({"AWS_ACCESS_KEY_ID": "AKIAONLYHALF"}, "Partial credentials"),
    ],
)
def test_a_bad_boto3_configuration_is_exit_2_not_a_traceback(
    env: dict[str, str],
    says: str,
    team_key: KeyPair,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """boto3 refuses to make a client for a malformed AWS_ENDPOINT_URL, region or profile, or half a key pair:
    its ValueError or BotoCoreError went up through open_store as a traceback (exit 1). A user's configuration
    error: exit 2, one line naming what boto3 said (a password in the endpoint not repeated)."""
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=says):
        open_store("s3://bucket/prefix", timeout=1, header=None)
    project = tiny_project(tmp_path / "tiny", team_key.public.line, url="s3://bucket/prefix")
    assert main(["status", "-m", str(project), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "s3://bucket/prefix" in err and says in err and "Traceback" not in err and SECRET not in err, err


def test_a_host_name_the_socket_layer_cannot_encode_is_a_bad_url(
    team_key: KeyPair, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A host that is not ASCII is encoded (IDNA) by the socket layer as it connects, and one it cannot encode (an
    empty label, a label over 63 characters) raised UnicodeError there: the first request to the remote ended the
    run with a traceback. It is a bad URL where it is given: exit 2, or the manifest's error."""
    for i, url in enumerate(("http://caché..example.org/x", f"https://{'é' * 70}.org/x")):
        project = tiny_project(tmp_path / f"cli{i}", team_key.public.line)
        cache = str(tmp_path / "cache")
        assert main(["status", "-m", str(project), "--cache-dir", cache, "--remote-cache", url]) == 2
        err = capsys.readouterr().err
        assert "--remote-cache" in err and "no valid host name" in err and "Traceback" not in err, err
        project = tiny_project(tmp_path / f"manifest{i}", team_key.public.line, url=url)
        with pytest.raises(ManifestError, match="no valid host name"):
            load_manifest(project / "kernels.toml")
    assert remote_url_problem("https://café.example.org/x") is None  # a host that is not ASCII but encodes is one


def test_an_ascii_host_name_is_judged_as_the_idna_codec_judges_it() -> None:
    """ASCII host names are checked label by label without the ``idna`` codec (which costs a first run with a remote
    ~1 ms to import): the same answer as the codec for empty labels, labels of 63 and 64 characters, a trailing
    dot, and IP addresses."""
    import random

    rng = random.Random(29)
    hosts = ["127.0.0.1", "example.org", "example.org.", "a..b", ".a", f"{'x' * 63}.org", f"{'x' * 64}.org"]
    for _ in range(300):
        labels = [rng.choice(["", "a", "b" * rng.randint(1, 70), "c-d", "9"]) for _ in range(rng.randint(1, 4))]
        hosts.append(".".join(labels) + rng.choice(["", "."]))
    for host in hosts:
        if not host:
            continue  # no host at all is said before the name is looked at
        try:
            host.encode("idna")
            codec = True
        except UnicodeError:
            codec = False
        said = remote_url_problem(f"http://{host}/x")
        assert (said is None or "no valid host name" not in said) == codec, (host, said)
