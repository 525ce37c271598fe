"""Provider profiles: where an R1 endpoint lives, which key it takes and which sampling settings it honours.

A profile is the default of everything a provider-specific: DeepSeek's hosted reasoner ignores temperature and
top_p (so they are not sent), self-hosted vLLM / SGLang and NVIDIA NIM honour them, and any OpenAI-compatible
endpoint is taken as it comes. The manifest's ``[generation]`` table overrides the URL, the model and the key's
variable; ``R1BUILD_BASE_URL`` overrides the URL from the environment.

The API key is read from the environment at the last moment and lives only in :class:`Endpoint`, whose
``repr`` hides it; nothing here writes it anywhere.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

from ..convert import field, record
from ..errors import ConfigError
from ..manifest.model import Generation
from ..settings import BASE_URL_ENV, env_settings

__all__ = [
    "BASE_URL_ENV",
    "PROFILES",
    "REDACTED",
    "Endpoint",
    "ProviderProfile",
    "endpoint_configured",
    "public_url",
    "redact",
    "resolve_endpoint",
]

_NO_KEY = "EMPTY"
"""Sent as the key to endpoints that need none (vLLM and SGLang accept any)."""


@record(frozen=True, kw_only=True)
class ProviderProfile:
    """Defaults and rules of one provider."""

    name: str
    """Profile name as written in the manifest."""
    base_url: str
    """Default endpoint URL."""
    model: str
    """Default model name."""
    key_envs: tuple[str, ...]
    """Environment variables searched for the API key, in order."""
    key_required: bool
    """Whether the default endpoint refuses requests without a key."""
    honours_temperature: bool
    """Whether temperature and top_p are honoured (and therefore sent)."""
    stream_usage: bool = True
    """Whether ``stream_options.include_usage`` is understood."""
    frees_on_disconnect: bool = False
    """Whether closing a request's connection stops its generation and its cost (a self-hosted server aborts the
    request): a continuous search that stopped then cancels the requests in flight that can no longer matter
    instead of letting them finish."""


PROFILES: dict[str, ProviderProfile] = {
    p.name: p
    for p in (
        ProviderProfile(
            name="deepseek",
            base_url="https://api.deepseek.com",
            model="deepseek-reasoner",
            key_envs=("DEEPSEEK_API_KEY",),
            key_required=True,
            honours_temperature=False,
        ),
        ProviderProfile(
            name="vllm",
            base_url="http://127.0.0.1:8000/v1",
            model="deepseek-ai/DeepSeek-R1",
            key_envs=("VLLM_API_KEY", "OPENAI_API_KEY"),
            key_required=False,
            honours_temperature=True,
            frees_on_disconnect=True,
        ),
        ProviderProfile(
            name="sglang",
            base_url="http://127.0.0.1:30000/v1",
            model="deepseek-ai/DeepSeek-R1",
            key_envs=("OPENAI_API_KEY",),
            key_required=False,
            honours_temperature=True,
            frees_on_disconnect=True,
        ),
        ProviderProfile(
            name="nim",
            base_url="https://integrate.api.nvidia.com/v1",
            model="deepseek-ai/deepseek-r1",
            key_envs=("NVIDIA_API_KEY", "OPENAI_API_KEY"),
            key_required=True,
            honours_temperature=True,
        ),
        ProviderProfile(
            name="openai",
            base_url="https://api.openai.com/v1",
            model="deepseek-ai/DeepSeek-R1",
            key_envs=("OPENAI_API_KEY",),
            key_required=True,
            honours_temperature=True,
        ),
    )
}


def _key_envs(generation: Generation, profile: ProviderProfile) -> tuple[str, ...]:
    return (generation.api_key_env,) if generation.api_key_env else profile.key_envs


def public_url(url: str) -> str:
    """``url`` without user information, query or fragment: safe to log and to store."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


REDACTED = "[redacted]"
"""What a secret is replaced with."""

SUBSTRING_MIN = 16
"""Secrets at least this long (every hosted provider's keys are) are redacted wherever they occur, even inside a
longer word; shorter ones only where they stand alone, so that a short key never mangles unrelated text."""


def _secret_pattern(secret: str) -> str:
    forms = {secret, json.dumps(secret)[1:-1]}  # as it is, and as it reads inside a JSON string
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    if len(secret) >= SUBSTRING_MIN:
        return f"(?:{alternatives})"
    return rf"(?<![\w\-])(?:{alternatives})(?![\w\-])"


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each of ``secrets`` replaced by :data:`REDACTED` (exact occurrences of
    a short secret: one that is part of a longer word is not it)."""
    patterns = [_secret_pattern(s) for s in sorted(set(secrets), key=len, reverse=True) if s]
    if not patterns:
        return text
    return re.sub("|".join(patterns), REDACTED, text)


@record(frozen=True, kw_only=True)
class Endpoint:
    """A resolved endpoint: profile, URL, model and the key (hidden from ``repr``)."""

    profile: ProviderProfile
    """The provider profile."""
    base_url: str
    """URL the client talks to."""
    model: str
    """Model name sent with every request."""
    key_env: str | None
    """Variable the key came from, for messages; None when no key was found."""
    api_key: str = field(repr=False)
    """The secret itself (or a placeholder for endpoints that need none). Never store it."""

    other_keys: tuple[str, ...] = field(default=(), repr=False)
    """The values of the profile's other key variables that are set (configured secrets too, though not sent)."""

    @property
    def secret(self) -> str | None:
        """The key when it came from the environment (what must never be stored); None for the placeholder."""
        return self.api_key if self.key_env else None

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every configured secret, whatever its length: the key sent, the profile's other keys that are set, and
        the password of the URL's user information. The placeholder sent to keyless servers is none."""
        found = [self.api_key] if self.key_env else []
        found += self.other_keys
        password = urlsplit(self.base_url).password
        if password:
            found.append(password)
        return tuple(dict.fromkeys(s for s in found if s))

    def redact(self, text: str) -> str:
        """``text`` without any of :attr:`secrets`."""
        return redact(text, self.secrets)

    @property
    def display_url(self) -> str:
        """The URL without credentials, for messages and transcripts."""
        return public_url(self.base_url)


def _shown(url: str) -> str:
    """``url`` as an error may show it: without a password (a URL too broken to parse has its user part cut)."""
    if "@" in url:
        scheme, sep, rest = url.partition("://")
        return f"{scheme}{sep}{rest.rpartition('@')[2]}" if sep else url.rpartition("@")[2]
    return url


def endpoint_configured(generation: Generation, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether generation may run: a URL is configured (manifest or ``R1BUILD_BASE_URL``) or the profile's API
    key variable is set."""
    profile = PROFILES[generation.provider]
    if generation.base_url or env_settings(environ).base_url:
        return True
    return any(environ.get(name) for name in _key_envs(generation, profile))


def resolve_endpoint(generation: Generation, environ: Mapping[str, str] = os.environ) -> Endpoint:
    """The endpoint generation talks to; :class:`ConfigError` when it cannot work (no key for a hosted API)."""
    profile = PROFILES.get(generation.provider)
    if profile is None:
        raise ConfigError(f"unknown provider {generation.provider!r} (known: {', '.join(PROFILES)})")
    from_env = env_settings(environ).base_url
    url = (from_env or generation.base_url or profile.base_url).strip()  # a newline pasted with it is none of it
    source = BASE_URL_ENV if from_env else "generation.base-url"
    inner = next((ch for ch in url if ch.isspace() or not ch.isprintable()), None)
    if inner is not None:
        raise ConfigError(f"{source}: {_shown(url)!r} is not a valid URL (it holds {inner!r})")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number from 0 to 65535 raises here
    except ValueError as exc:  # an unclosed IPv6 bracket, a port out of range or not a number
        raise ConfigError(f"{source}: {_shown(url)!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{source}: {public_url(url) or url!r} is not an http(s) URL")
    names = _key_envs(generation, profile)
    # a key pasted with a newline or spaces around it (`export KEY=$(cat file)`): those are no part of any key
    key_env = next((name for name in names if environ.get(name, "").strip()), None)
    overridden = url != profile.base_url
    if key_env is None and profile.key_required and not overridden:
        raise ConfigError(
            f"provider {profile.name!r} needs an API key: set {' or '.join(names)} in the environment "
            f"(or point {BASE_URL_ENV} at a server that needs none)"
        )
    api_key = environ[key_env].strip() if key_env else _NO_KEY
    bad = next((i for i, ch in enumerate(api_key) if not " " < ch < "\x7f"), None)
    if key_env is not None and bad is not None:  # an HTTP header cannot carry it: no request could be sent
        what = unicodedata.name(api_key[bad], f"U+{ord(api_key[bad]):04X}")
        raise ConfigError(
            f"${key_env} holds a character no API key has and an HTTP header cannot carry ({what}, character "
            f"{bad + 1} of {len(api_key)}); copy the key again"
        )
    others = tuple(environ[name].strip() for name in names if name != key_env and environ.get(name, "").strip())
    return Endpoint(
        profile=profile,
        base_url=url.rstrip("/"),
        model=generation.model or profile.model,
        key_env=key_env,
        api_key=api_key,
        other_keys=others,
    )
