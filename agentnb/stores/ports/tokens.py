"""The service's bearer tokens (digests only) and their sign-ins.

``add_token`` / ``get_token`` / ``list_tokens`` / ``touch_token`` / ``revoke_token`` (access)
    The service's bearer tokens (``agentnb.tokens`` issues and checks them): one record per
    token, keeping the user it acts for, a label, its SHA-256 ``digest`` (never the token),
    when it was created, last used, revoked and (for a browser sign-in) when it expires.
    A sign-in is a token of its own whose ``parent`` is the token it was made with:
    ``revoke_token`` revokes a token and its sign-ins in one transaction, so revoking a token
    ends the browser sessions opened with it. Records are kept after revocation (an audit
    trail); a token id is never reused (``InvalidInput``).
"""

from __future__ import annotations

from abc import abstractmethod

from agentnb.ids import check_id
from agentnb.stores.core import StoreCore, guarded
from agentnb.stores.decisions import (
    check_token_fields,
)
from agentnb.stores.values import (
    TokenRecord,
)

__all__ = ["Tokens"]


class Tokens(StoreCore):
    """Bearer token records of the service (``agentnb.tokens`` issues and checks tokens)."""

    @guarded
    def add_token(
        self,
        token_id: str,
        user_id: str,
        digest: str,
        *,
        label: str = "",
        expires_at: float | None = None,
        parent: str | None = None,
    ) -> TokenRecord:
        """Record a new token (its digest, not the token); ``InvalidInput`` for an id in use."""
        check_token_fields(token_id, user_id, digest, label, expires_at, parent)
        return self._add_token(
            TokenRecord(
                token_id,
                user_id,
                label,
                self.clock.now(),
                expires_at=None if expires_at is None else float(expires_at),
                parent=parent,
                digest=digest,
            )
        )

    @guarded
    def get_token(self, token_id: str) -> TokenRecord | None:
        """The record of ``token_id`` (revoked or not), or None."""
        return self._get_token(check_id(token_id, "token_id"))

    @guarded
    def list_tokens(self, user_id: str | None = None) -> list[TokenRecord]:
        """Every token record (of ``user_id`` if given), sign-ins included, oldest first."""
        return self._list_tokens(None if user_id is None else check_id(user_id, "user_id"))

    @guarded
    def touch_token(self, token_id: str) -> None:
        """Record that the token was used now (``last_used_at`` never moves back)."""
        self._touch_token(check_id(token_id, "token_id"), self.clock.now())

    @guarded
    def revoke_token(self, token_id: str) -> TokenRecord:
        """Revoke the token and the sign-ins made with it, in one transaction; returns its
        record. Revoking twice keeps the first time. ``InvalidInput`` for an unknown id."""
        return self._revoke_token(check_id(token_id, "token_id"), self.clock.now())

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def _add_token(self, record: TokenRecord) -> TokenRecord:
        """Insert ``record``; ``InvalidInput`` (nothing written) if its id exists."""

    @abstractmethod
    def _get_token(self, token_id: str) -> TokenRecord | None: ...

    @abstractmethod
    def _list_tokens(self, user_id: str | None) -> list[TokenRecord]:
        """By ``created_at`` then id."""

    @abstractmethod
    def _touch_token(self, token_id: str, now: float) -> None:
        """``last_used_at = max(last_used_at, now)``; nothing for an unknown id."""

    @abstractmethod
    def _revoke_token(self, token_id: str, now: float) -> TokenRecord:
        """Atomically set ``revoked_at`` (kept if set) on the token and on every token whose
        ``parent`` it is; ``InvalidInput`` if there is no such token."""
