"""The public keys a project trusts, by key id: the set a cache checks a signed record's signer against. Apart
from :mod:`.signing` (which re-exports it) so that a project trusting no key costs no signing code."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..convert import field, record

if TYPE_CHECKING:
    from .signing import PublicKey


@record(frozen=True)
class TrustedKeys:
    """The public keys whose signatures are accepted, by key id."""

    keys: dict[str, PublicKey] = field(default_factory=dict)
    """Key id to public key."""

    @classmethod
    def of(cls, keys: Iterable[PublicKey]) -> TrustedKeys:
        """Trust these keys."""
        return cls({k.key_id: k for k in keys})

    def __bool__(self) -> bool:
        return bool(self.keys)

    def __contains__(self, kid: object) -> bool:
        return kid in self.keys

    @property
    def ids(self) -> list[str]:
        """The key ids, sorted."""
        return sorted(self.keys)
