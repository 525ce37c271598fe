"""Real servers for the remote-cache tests (session-scoped), the team's key, and a project wired to a remote."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from r1build.trust.signing import KeyPair
from tests.cache.remote.remote_servers import Moto, Nginx, Remote, moto_binary, nginx_binary

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nginx]:
    """nginx with WebDAV PUT on 127.0.0.1 (``.ci/run`` installs it from Debian's packages)."""
    if nginx_binary() is None:
        pytest.skip("nginx is not installed (apt-get install nginx-light; .ci/run does)")
    server = Nginx(tmp_path_factory.mktemp("nginx")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    """moto's S3 server on 127.0.0.1 with a bucket ``team-cache`` (the ``test`` extra installs moto)."""
    if moto_binary() is None:
        pytest.skip("moto_server is not installed (pip install 'moto[server]'; the test extra has it)")
    pytest.importorskip("boto3", reason="boto3 is not installed (the s3 extra)")
    import boto3

    server = Moto().start()
    boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket="team-cache")
    yield server
    server.stop()


@pytest.fixture(params=["http", "s3"])
def remote(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Remote:
    """An empty remote of each backend, with the environment to reach it (no URL set: tests choose how)."""
    prefix = f"team{next(_prefixes)}"
    if request.param == "http":
        server: Nginx = request.getfixturevalue("nginx")
        return Remote("http", f"{server.url}/{prefix}", nginx=server)
    moto: Moto = request.getfixturevalue("moto")
    for name, value in moto.env().items():
        monkeypatch.setenv(name, value)
    return Remote("s3", f"s3://team-cache/{prefix}", moto=moto)


@pytest.fixture(scope="session")
def team_key() -> KeyPair:
    """The team's signing key; its public half is what the test projects trust."""
    return KeyPair.generate()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in (
        "DEEPSEEK_API_KEY",
        "OPENAI_API_KEY",
        "R1BUILD_BASE_URL",
        "NVIDIA_API_KEY",
        "R1BUILD_EVALUATE",
        "R1BUILD_REMOTE_CACHE",
        "R1BUILD_REMOTE_WRITE",
        "R1BUILD_SIGNING_KEY",
        "R1BUILD_REMOTE_TOKEN",
        "R1BUILD_REMOTE_HEADER",
        "R1BUILD_REMOTE_TIMEOUT",
    ):
        monkeypatch.delenv(var, raising=False)
