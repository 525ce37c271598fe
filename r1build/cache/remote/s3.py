"""An ``s3://bucket/prefix`` remote through boto3 (the ``s3`` extra): credentials, region and endpoint come from
boto3's usual chain (``AWS_ACCESS_KEY_ID``..., ``~/.aws``, instance roles; ``AWS_ENDPOINT_URL`` or
``AWS_ENDPOINT_URL_S3`` for an S3-compatible store). A PutObject is atomic: readers see the whole object or none.
"""

from __future__ import annotations

import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ...errors import ConfigError
from .http import MIN_RATE, REFUSALS
from .store import MAX_OBJECT, RemoteRefused, RemoteUnavailable, without_credentials

T = TypeVar("T")

__all__ = ["S3Store"]

_ABSENT = frozenset({"404", "NoSuchKey", "NotFound"})
MAX_LISTED = 100_000
"""Most objects a listing is read for (``cache verify --remote``): far more than a team's cache holds, and a bound
on an endpoint whose listing never ends (a new continuation token with every page)."""
_MAX_PAGES = MAX_LISTED // 100
"""Most pages a listing is read for: S3 and its look-alikes fill a page with up to 1000 keys, so a listing of a few
keys a page (or none) that says more follow is cut off after this many pages, not read for ever."""
_PAGE_BYTES = 512 * 1024
"""Bytes a listing page is allowed at :data:`~.http.MIN_RATE` on top of the timeout (1000 keys of this layout are
about a third of this)."""
_REDIRECTS = "the endpoint answers with redirects that never end (is it an S3 endpoint, not a login page or a proxy?)"
"""Why a call ended in RecursionError: botocore answers a 301/302/307 that names no region by asking the bucket's
region with a HeadBucket, which is redirected in turn, and so on until Python's recursion limit."""


class S3Store:
    """A remote cache in an S3 bucket."""

    def __init__(self, url: str, *, timeout: float) -> None:
        try:
            import boto3
            from botocore.config import Config
            from botocore.exceptions import BotoCoreError
        except ImportError:
            raise ConfigError(f"the remote cache {url} needs boto3: pip install 'r1build[s3]'") from None
        parts = urllib.parse.urlsplit(url)
        self.url = url
        self._timeout = timeout
        self._bucket = parts.netloc
        self._prefix = parts.path.strip("/")
        config = Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1, "mode": "standard"})
        try:
            self._client: Any = boto3.session.Session().client("s3", config=config)
        except (BotoCoreError, ValueError) as exc:  # the AWS_* settings: a bad endpoint, region, profile, config
            raise ConfigError(
                f"the remote cache {url}: boto3's configuration is not usable: {without_credentials(str(exc))}"
            ) from None

    def _key(self, key: str) -> str:
        return f"{self._prefix}/{key}" if self._prefix else key

    def _call(self, what: str, key: str, call: Any, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(Bucket=self._bucket, Key=self._key(key), **kwargs)
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _ABSENT:
                return None
            why = without_credentials(code or str(exc))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            error = RemoteRefused if status in REFUSALS else RemoteUnavailable
            raise error(f"{what} s3://{self._bucket}/{self._key(key)}: {why}") from None
        except BotoCoreError as exc:
            why = without_credentials(str(exc))
            raise RemoteUnavailable(f"{what} s3://{self._bucket}/{self._key(key)}: {why}") from None
        except RecursionError:
            raise RemoteUnavailable(f"{what} s3://{self._bucket}/{self._key(key)}: {_REDIRECTS}") from None

    def _within(self, what: str, key: str, work: Callable[[Callable[[int], None]], T], sent: int = 0) -> T:
        """``work`` on a thread of its own, waited for as a whole: its request and the answer's head within the
        timeout plus ``sent`` bytes at :data:`~.http.MIN_RATE`, then (``work`` calls its argument with the body's
        length once the head is in) the body at that rate. botocore's timeouts bound each socket wait, not their
        sum, so a server that trickles bytes would otherwise hold the build; past the time the call is left to
        finish on its own (a daemon thread) and the remote is unavailable."""
        head_in = threading.Event()
        done = threading.Event()
        box: dict[str, Any] = {}
        body = [0]

        def headed(length: int) -> None:
            body[0] = length
            head_in.set()

        def run() -> None:
            try:
                box["value"] = work(headed)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                head_in.set()
                done.set()

        threading.Thread(target=run, name="r1build-s3", daemon=True).start()
        where = f"{what} s3://{self._bucket}/{self._key(key)}"
        limit = self._timeout + sent / MIN_RATE
        if not head_in.wait(limit):
            raise RemoteUnavailable(f"{where}: no answer within {limit:.3g} s")
        if not done.wait(self._timeout + body[0] / MIN_RATE):
            raise RemoteUnavailable(f"{where}: the answer ({body[0]} bytes) came slower than {MIN_RATE // 1024} KiB/s")
        if "error" in box:
            error = box["error"]
            if isinstance(error, Exception) and not isinstance(error, RemoteUnavailable):
                # botocore's parsers trust what they read: a Content-Length of "abc" raised ValueError out of the run
                why = without_credentials(f"{type(error).__name__}: {error}")
                raise RemoteUnavailable(f"{where}: an answer that is not S3's ({why})") from None
            raise error
        return box["value"]  # type: ignore[no-any-return]

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError

        def work(headed: Callable[[int], None]) -> bytes | None:
            answer = self._call("GET", key, self._client.get_object)
            if answer is None:
                return None
            length = int(answer.get("ContentLength") or 0)
            if length > MAX_OBJECT:
                raise RemoteUnavailable(f"GET s3://{self._bucket}/{self._key(key)}: an object over the size limit")
            headed(length)
            try:
                return bytes(answer["Body"].read(MAX_OBJECT + 1))
            except (BotoCoreError, OSError) as exc:
                why = without_credentials(str(exc))
                raise RemoteUnavailable(f"GET s3://{self._bucket}/{self._key(key)}: {why}") from None

        data = self._within("GET", key, work)
        if data is not None and len(data) > MAX_OBJECT:
            raise RemoteUnavailable(f"GET s3://{self._bucket}/{self._key(key)}: an object over the size limit")
        return data

    def head(self, key: str) -> bool:
        return self._within("HEAD", key, lambda _: self._call("HEAD", key, self._client.head_object)) is not None

    def put(self, key: str, data: bytes) -> None:
        self._within("PUT", key, lambda _: self._call("PUT", key, self._client.put_object, Body=data), len(data))

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix``: each page within the timeout (plus its bytes at :data:`~.http.MIN_RATE`), at
        most :data:`MAX_LISTED` keys in at most :data:`_MAX_PAGES` pages, else :class:`RemoteUnavailable`."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._key(prefix)
        strip = len(self._prefix) + 1 if self._prefix else 0
        where = f"LIST s3://{self._bucket}/{full}"
        pages = iter(self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=full))

        def page(_: Callable[[int], None]) -> Any:
            try:
                return next(pages, None)
            except (BotoCoreError, ClientError) as exc:
                raise RemoteUnavailable(f"{where}: {without_credentials(str(exc))}") from None
            except RecursionError:
                raise RemoteUnavailable(f"{where}: {_REDIRECTS}") from None

        listed = 0
        for number in range(_MAX_PAGES + 1):
            found = self._within("LIST", prefix, page, _PAGE_BYTES)
            if found is None:
                return
            if number == _MAX_PAGES:
                raise RemoteUnavailable(f"{where}: the listing goes on past {_MAX_PAGES:,} pages")
            items = found.get("Contents") if isinstance(found, dict) else None
            for item in items if isinstance(items, list) else ():
                name = item.get("Key") if isinstance(item, dict) else None
                if not isinstance(name, str):
                    raise RemoteUnavailable(f"{where}: a listing that is not S3's (an object without a key)")
                listed += 1
                if listed > MAX_LISTED:
                    raise RemoteUnavailable(f"{where}: the listing goes on past {MAX_LISTED:,} objects")
                yield name[strip:]

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()
