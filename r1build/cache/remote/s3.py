"""An ``s3://bucket/prefix`` remote through boto3 (the ``s3`` extra): credentials, region and endpoint come from
boto3's usual chain (``AWS_ACCESS_KEY_ID``..., ``~/.aws``, instance roles; ``AWS_ENDPOINT_URL`` or
``AWS_ENDPOINT_URL_S3`` for an S3-compatible store). A PutObject is atomic: readers see the whole object or none.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from typing import Any

from ...errors import ConfigError
from .store import MAX_OBJECT, RemoteUnavailable

__all__ = ["S3Store"]

_ABSENT = frozenset({"404", "NoSuchKey", "NotFound"})


class S3Store:
    """A remote cache in an S3 bucket."""

    def __init__(self, url: str, *, timeout: float) -> None:
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ConfigError(f"the remote cache {url} needs boto3: pip install 'r1build[s3]'") from None
        parts = urllib.parse.urlsplit(url)
        self.url = url
        self._bucket = parts.netloc
        self._prefix = parts.path.strip("/")
        config = Config(connect_timeout=timeout, read_timeout=timeout, retries={"max_attempts": 1, "mode": "standard"})
        self._client: Any = boto3.session.Session().client("s3", config=config)

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
            raise RemoteUnavailable(f"{what} s3://{self._bucket}/{self._key(key)}: {code or exc}") from None
        except BotoCoreError as exc:
            raise RemoteUnavailable(f"{what} s3://{self._bucket}/{self._key(key)}: {exc}") from None

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError

        answer = self._call("GET", key, self._client.get_object)
        if answer is None:
            return None
        if int(answer.get("ContentLength") or 0) > MAX_OBJECT:
            raise RemoteUnavailable(f"GET s3://{self._bucket}/{self._key(key)}: an object over the size limit")
        try:
            return bytes(answer["Body"].read())
        except (BotoCoreError, OSError) as exc:
            raise RemoteUnavailable(f"GET s3://{self._bucket}/{self._key(key)}: {exc}") from None

    def head(self, key: str) -> bool:
        return self._call("HEAD", key, self._client.head_object) is not None

    def put(self, key: str, data: bytes) -> None:
        self._call("PUT", key, self._client.put_object, Body=data)

    def keys(self, prefix: str) -> Iterator[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._key(prefix)
        strip = len(self._prefix) + 1 if self._prefix else 0
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=full):
                for item in page.get("Contents", []):
                    yield str(item["Key"])[strip:]
        except (BotoCoreError, ClientError) as exc:
            raise RemoteUnavailable(f"LIST s3://{self._bucket}/{full}: {exc}") from None

    def close(self) -> None:
        """Close the client's connections."""
        self._client.close()
