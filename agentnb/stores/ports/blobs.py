"""Content-addressed blobs, and snapshots sealed to the event they summarise.

Blobs. A payload over ``BLOB_THRESHOLD`` is stored in parts: each long text in it is one
content-addressed blob, so a text that many events of a session carry (a large task's
input is in ``inbox/accepted``, ``turn/start``, ``input/received``, ``message/user`` and
``request/prepared``) is stored once (``blob_usage`` lists them). Reads, checksums, batch
digests and exports see each payload's canonical text exactly as committed. A blob lives
while a row of some session names it: ``delete_session`` frees those no other session's
rows name. ``put_blob`` / ``get_blob`` store and read bytes by digest directly; a blob put
that way belongs to no session and stays.
"""

from __future__ import annotations

from abc import abstractmethod

from agentnb.errors import Corrupt, InvalidInput
from agentnb.ids import SessionKey, check_id
from agentnb.stores._rows import event_anchor, open_snapshot, seal_snapshot
from agentnb.stores.core import guarded
from agentnb.stores.decisions import (
    check_key,
    check_seq,
)
from agentnb.stores.ports.log import EventLog

__all__ = ["Blobs"]


class Blobs(EventLog):
    """Blobs by digest and snapshots by name; snapshots are checked against the log."""

    @guarded
    def blob_usage(self, key: SessionKey) -> dict[str, int]:
        """The blobs the session's events and commands are stored in, by digest, with the
        bytes each holds: each distinct text once, however many events carry it (what
        deleting the session frees, unless another session's rows name it too)."""
        return self._blob_usage(check_key(key))

    @guarded
    def put_snapshot(self, key: SessionKey, name: str, seq: int, data: bytes) -> None:
        """Cache a projection of the log through ``seq`` under ``name``.

        A snapshot is a cache, never the truth: readers fold the log after ``seq`` on top of
        it, and may ignore it. An older ``seq`` than the stored one is a no-op. The data is
        stored sealed: an HMAC, keyed by the store's ``secret()``, over the session, the
        name, ``seq``, the digest of the committed event at ``seq`` (its envelope and
        payload) and the data. ``get_snapshot`` checks it.
        """
        key = check_key(key)
        check_id(name, "name")
        check_seq(seq, "seq")
        if not isinstance(data, bytes):
            raise InvalidInput(f"snapshot data must be bytes, got {type(data).__name__}")
        head = self._head(key)
        if seq > head:
            raise InvalidInput(f"session {key}: snapshot seq {seq} is past the head {head}")
        anchor = event_anchor(self._read_raw(key, seq - 1, seq) if seq else [])
        self._put_snapshot(
            key, name, seq, seal_snapshot(self._secret(), key, name, seq, anchor, data)
        )

    @guarded
    def get_snapshot(self, key: SessionKey, name: str) -> tuple[int, bytes] | None:
        """The newest snapshot ``name`` as (seq, data), or None.

        None also when the stored snapshot does not match its seal (see ``put_snapshot``):
        its bytes were altered, it was moved from another session or name, it is past the
        head, or the event at its ``seq`` is not the one it summarised (the log was rolled
        back or rewritten, or that event does not read back).
        """
        key = check_key(key)
        check_id(name, "name")
        found = self._get_snapshot(key, name)
        if found is None:
            return None
        seq, stored = found
        if seq > self._head(key):
            return None
        try:
            anchor = event_anchor(self._read_raw(key, seq - 1, seq) if seq else [])
        except Corrupt:
            return None  # the reader folds from scratch and meets the damage itself
        data = open_snapshot(self._secret(), key, name, seq, anchor, stored)
        return None if data is None else (seq, data)

    @guarded
    def secret(self) -> bytes:
        """A random per-store secret (created once) for signing cursors."""
        return self._secret()

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def put_blob(self, data: bytes) -> str:
        """Store bytes under their SHA-256 hex digest (idempotent); returns the digest."""

    @abstractmethod
    def get_blob(self, digest: str) -> bytes:
        """The bytes stored under ``digest``; ``Corrupt`` if missing or not matching."""

    @abstractmethod
    def _blob_usage(self, key: SessionKey) -> dict[str, int]: ...

    @abstractmethod
    def _secret(self) -> bytes: ...

    @abstractmethod
    def _put_snapshot(self, key: SessionKey, name: str, seq: int, data: bytes) -> None: ...

    @abstractmethod
    def _get_snapshot(self, key: SessionKey, name: str) -> tuple[int, bytes] | None: ...
