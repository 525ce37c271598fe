"""Real remote-cache servers on 127.0.0.1 for the tests: nginx with its WebDAV module, and moto's S3 server.

Each starts as a child process on a free port and is stopped (or killed, for the fault tests) by the test.
:func:`nginx_binary` and :func:`moto_binary` say where the programs are, None when they are not installed
(``.ci/run`` installs both: nginx from Debian's packages, moto from the ``test`` extra).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FaultServer", "Moto", "Nginx", "Remote", "free_port", "moto_binary", "nginx_binary", "wait_for_port"]

TOKEN = "team-token-123"
"""The bearer token nginx's ``/auth/`` location wants."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s")


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if Path(p).is_file()), None)


def moto_binary() -> str | None:
    found = shutil.which("moto_server")
    if found:
        return found
    beside = Path(sys.executable).with_name("moto_server")
    return str(beside) if beside.is_file() else None


_CONF = """
daemon off;
master_process on;
worker_processes 2;
user {user};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  client_max_body_size 256m;
  server {{
    listen 127.0.0.1:{port};
    root {d}/root;
    location / {{
      dav_methods PUT;
      create_full_put_path on;
      dav_access user:rw group:r all:r;
    }}
    location /auth/ {{
      if ($http_authorization != "Bearer {token}") {{ return 403; }}
      dav_methods PUT;
      create_full_put_path on;
    }}
    location /forbidden/ {{ return 403; }}
    location /readonly/ {{ limit_except GET {{ deny all; }} }}
  }}
}}
"""


class Nginx:
    """nginx serving ``<dir>/root`` with WebDAV PUT on a port of its own."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        binary = nginx_binary()
        assert binary is not None
        self.binary = binary
        self.dir = directory
        self.root = directory / "root"
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        for sub in ("root", "body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (directory / sub).mkdir(parents=True, exist_ok=True)
        user = "root root" if os.geteuid() == 0 else f"{os.getuid()}"
        conf = _CONF.format(d=directory, port=self.port, token=TOKEN, user=user)
        if os.geteuid() != 0:
            conf = conf.replace(f"user {user};\n", "")
        (directory / "nginx.conf").write_text(conf, encoding="utf-8")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Nginx:
        self.proc = subprocess.Popen(
            [self.binary, "-c", str(self.dir / "nginx.conf"), "-p", str(self.dir), "-e", str(self.dir / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port(self.port, self.proc)
        return self

    def kill(self) -> None:
        """SIGKILL the master and its workers (its process group): a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


class Moto:
    """moto's S3-compatible server; :meth:`env` gives the variables boto3 needs to reach it."""

    def __init__(self) -> None:
        binary = moto_binary()
        assert binary is not None
        self.binary = binary
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def start(self) -> Moto:
        self.proc = subprocess.Popen(
            [self.binary, "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port(self.port, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


class FaultServer:
    """A misbehaving HTTP server on 127.0.0.1 (a thread): each connection's first bytes go to ``answer``, which
    returns the bytes to send back (or None to drop the connection unanswered). A context manager."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.requests: list[str] = []
        """The request line of every connection, in order."""
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = int(self._sock.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                first = conn.recv(65536)
                self.requests.append(first.split(b"\r\n", 1)[0].decode("latin-1"))
                reply = self.answer(first)
                if reply is not None:
                    conn.sendall(reply)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


@dataclass
class Remote:
    """One remote under a prefix of its own: its URL, the backend's name and where its objects are on disk
    (nginx) or how to reach them (s3)."""

    backend: str
    url: str
    nginx: Nginx | None = None
    moto: Moto | None = None

    def path_of(self, key: str) -> Path:
        """The file nginx keeps an object in (http only)."""
        assert self.nginx is not None
        return self.nginx.root / self.url.split("/", 3)[3] / key

    def s3(self) -> object:
        import boto3

        assert self.moto is not None
        return boto3.client(
            "s3",
            endpoint_url=self.moto.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
