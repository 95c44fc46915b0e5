"""Bearer tokens of the agentnb service: issued once, kept only as a digest, checked in
constant time.

A token reads ``tok_<16 hex>.<43 characters>``: its id (public: it names the token in
``agentnb token list`` and in the store) and its secret. The store keeps the id, the user the
token acts for, a label, the SHA-256 digest of the secret and the times it was created, last
used and revoked (``SessionStore.add_token`` and the rest); the token itself is printed once by
``agentnb token add`` and never written anywhere. A browser signs in with a token and gets a
*sign-in*: a token of its own (``parent`` = the token it was made with) that lives in an
HttpOnly cookie and expires; revoking the parent revokes it (``SessionStore.revoke_token``).

``verify`` raises ``Unauthorized`` for a missing, malformed, unknown, revoked or expired token
with one message for all of them (it never says which part was wrong), and records the use at
most once a minute.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import re
import secrets
from typing import Any

from agentnb.errors import StorageError, Unauthorized
from agentnb.ids import check_id
from agentnb.stores.base import SessionStore, TokenRecord

__all__ = [
    "SIGN_IN_SECONDS",
    "TOUCH_EVERY",
    "digest_of",
    "issue",
    "record_fields",
    "revoke",
    "verify",
]

log = logging.getLogger("agentnb.tokens")

TOUCH_EVERY = 60.0
"""Seconds between two recordings of a token's last use (a request does not write each time)."""
SIGN_IN_SECONDS = 7 * 24 * 3600.0
"""How long a browser sign-in lasts."""
_FORM = re.compile(r"(tok_[0-9a-f]{16})\.([A-Za-z0-9_-]{43})")
_REFUSED = (
    "the token is missing, malformed, unknown, revoked or expired; ask for a new one "
    "(agentnb token add USER) and send it as 'Authorization: Bearer <token>'"
)


def digest_of(secret: str) -> str:
    """SHA-256 of a token's secret part, hex (what the store keeps)."""
    return hashlib.sha256(secret.encode()).hexdigest()


def issue(
    store: SessionStore,
    user_id: str,
    *,
    label: str = "",
    expires_at: float | None = None,
    parent: str | None = None,
) -> tuple[str, TokenRecord]:
    """A new token for ``user_id``: (the token, to hand over once; its stored record)."""
    check_id(user_id, "user_id")
    token_id = "tok_" + secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    record = store.add_token(
        token_id,
        user_id,
        digest_of(secret),
        label=label,
        expires_at=expires_at,
        parent=parent,
    )
    return f"{token_id}.{secret}", record


def verify(store: SessionStore, token: str | None) -> TokenRecord:
    """The record of a usable ``token``, else ``Unauthorized`` (one message for every case)."""
    match = _FORM.fullmatch(token) if isinstance(token, str) else None
    if match is None:
        raise Unauthorized(_REFUSED)
    token_id, secret = match.groups()
    record = store.get_token(token_id)
    # The digest is compared even for an unknown id, so the time taken does not tell.
    expected = record.digest if record is not None else "0" * 64
    matches = hmac.compare_digest(expected, digest_of(secret))
    now = store.clock.now()
    if record is None or not matches or not record.usable(now):
        raise Unauthorized(_REFUSED)
    if record.parent is not None:
        parent = store.get_token(record.parent)
        if parent is None or not parent.usable(now):
            raise Unauthorized(_REFUSED)
    if record.last_used_at is None or now - record.last_used_at >= TOUCH_EVERY:
        try:
            store.touch_token(token_id)
        except StorageError as exc:  # the use is recorded best effort; access stands
            log.warning("could not record the use of token %s: %s", token_id, exc)
    return record


def revoke(store: SessionStore, token_id: str) -> TokenRecord:
    """Revoke a token (and the sign-ins made with it); returns its record."""
    return store.revoke_token(token_id)


def record_fields(record: TokenRecord, *, digest: bool = False) -> dict[str, Any]:
    """A token's record as JSON-ready fields (``agentnb token list --json``); its secret's
    digest only with ``digest=True`` (a backup, so that the restored token still verifies)."""
    fields = dataclasses.asdict(record)
    if not digest:
        del fields["digest"]
    return fields
