"""The catalogue: sessions, their lifecycle, tombstones and the archive.

``find_sessions`` / ``update_session`` / ``delete_session`` (the lifecycle)
    Every catalogue record carries metadata kept current in the transaction that changes it:
    ``append`` adds to the counts (events, turns, bytes of payload) and sets ``updated_at``,
    ``last_activity`` and the raw status of the latest turn (``decide_catalogue``); an
    ``inbox_append`` of a submit counts it and, for the first one, keeps the first line of
    its text (``first_task``, the default title); ``update_session`` sets the title and
    merges labels (at most ``MAX_LABELS``, keys of ``MAX_LABEL_KEY`` and values of
    ``MAX_LABEL_VALUE`` characters). ``find_sessions`` pages the catalogue newest activity
    first through an index, with an opaque keyset cursor: sessions added or active while a
    caller pages appear before its first page, never inside a later one.
    ``delete_session`` removes, in one transaction, the session's events, inbox, snapshots,
    watermarks, lease and the blobs no other session references, and leaves a tombstone
    (who, when, why) in the catalogue; refused (``LeaseHeld``) while another holder has a
    live lease unless the caller passes that lease as ``fence``. Afterwards the key is
    ``SessionDeleted`` for reads, writes and ``create_session`` (an id never silently comes
    back): every write (``append``, ``inbox_append``, ``put_snapshot``,
    ``advance_watermark``, the lease calls, ``update_session``, ``set_archived``) checks
    the tombstone in the transaction that would write, so a writer racing the delete, in
    this process or another, either commits before it (and its rows go with the session)
    or gets ``SessionDeleted`` and writes nothing. ``get_session`` answers None and
    ``tombstone`` the record. What the bytes on disk become is the backend's to say.
``tombstones(after=, limit=)`` (deletions reaching the exports)
    Every tombstone carries ``seq``, its place in the order of this store's deletions
    (1, 2, ...), given when the deletion commits: a later deletion never gets a smaller
    seq than one already visible, so paging with ``after=`` the last seq seen never skips
    one. ``advance_tombstone_watermark(sink, seq)`` records, monotonically, how far the
    export sink named ``sink`` has applied them (what ``Exporter`` resumes from).
``set_archived`` (archive)
    A catalogue flag (``archived_at``): an archived session stays readable, is left out of
    ``find_sessions`` unless asked for (``archived=True`` or ``None``), and refuses new work:
    ``inbox_append`` of a command that would start or feed a run (``WORK_KINDS``) raises
    ``SessionArchived`` in the transaction that would accept it, so a command from any
    process either lands before the archive or is refused. Cancelling and interrupting are
    still accepted, and so is the execution log (a runtime closing what it runs).
    Archiving neither moves ``last_activity`` nor ``updated_at``. With ``expected_inbox``
    the flag is set only if the inbox head is still that seq (else ``InboxChanged``):
    the caller decided from the inbox that the session holds no work.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection

from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey, check_id
from agentnb.limits import check_chars
from agentnb.stores.core import guarded
from agentnb.stores.decisions import (
    check_key,
    check_labels,
    check_lease,
    check_limit,
    check_seq,
    check_title,
    decode_cursor,
)
from agentnb.stores.values import (
    MAX_LIST_LIMIT,
    MAX_TITLE,
    UNSET,
    Lease,
    SessionQuery,
    SessionRecord,
    Tombstone,
    Unset,
    fold_case,
)
from agentnb.stores.waiting import Waiting

__all__ = ["Catalogue"]


class Catalogue(Waiting):
    """The sessions of a store: create, find, update, delete (tombstones) and archive."""

    @guarded
    def create_session(self, key: SessionKey) -> SessionRecord:
        """Get or create the catalogue record of ``key``."""
        return self._create_session(check_key(key), self.clock.now())

    @guarded
    def get_session(self, key: SessionKey) -> SessionRecord | None:
        """The catalogue record, or None; never creates anything."""
        return self._get_session(check_key(key))

    @guarded
    def list_sessions(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[SessionRecord]:
        """Sessions matching every filter given, oldest first."""
        for value, name in ((namespace, "namespace"), (user_id, "user_id"), (agent_id, "agent_id")):
            if value is not None:
                check_id(value, name)
        return self._list_sessions(namespace, user_id, agent_id)

    @guarded
    def find_sessions(
        self,
        *,
        namespace: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        turn_status: Collection[str] | None = None,
        labels: dict[str, str] | None = None,
        since: float | None = None,
        until: float | None = None,
        search: str | None = None,
        limit: int = 50,
        before: str | None = None,
        archived: bool | None = False,
    ) -> list[SessionRecord]:
        """Up to ``limit`` live sessions matching every filter, newest ``last_activity`` first.

        ``turn_status``: raw latest-turn statuses to keep (``"none"`` for sessions with no
        turn yet); ``labels``: every pair must match; ``since`` / ``until``: bounds on
        ``last_activity`` (seconds since the epoch, inclusive / exclusive); ``search``: a
        substring of the title or the first task's text, both case-folded by ``fold_case``
        (so every backend finds the same, whatever its database's locale); ``before``: the
        ``cursor`` of the last record of the previous page; ``archived``: False (the
        default) leaves archived sessions out, True lists only them, None both. Reads a
        bounded slice of an index.
        """
        for value, name in ((namespace, "namespace"), (user_id, "user_id"), (agent_id, "agent_id")):
            if value is not None:
                check_id(value, name)
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= MAX_LIST_LIMIT
        ):
            raise InvalidInput(f"limit must be an int in 1..{MAX_LIST_LIMIT}, got {limit!r}")
        statuses = None
        if turn_status is not None:
            if isinstance(turn_status, str) or not all(isinstance(t, str) for t in turn_status):
                raise InvalidInput("turn_status must be a collection of status names")
            statuses = frozenset(turn_status)
        wanted = (
            None
            if labels is None
            else {k: v for k, v in check_labels(labels, patch=False).items() if v is not None}
        )
        for bound, name in ((since, "since"), (until, "until")):
            if bound is not None and (
                not isinstance(bound, int | float) or isinstance(bound, bool)
            ):
                raise InvalidInput(f"{name} must be seconds since the epoch, got {bound!r}")
        if search is not None and (not isinstance(search, str) or not search.strip()):
            raise InvalidInput(f"search must be non-empty text, got {search!r}")
        if search is not None:
            check_chars(search, "search")
        if archived is not None and not isinstance(archived, bool):
            raise InvalidInput(f"archived must be True, False or None (both), got {archived!r}")
        after = None if before is None else decode_cursor(before)
        return self._find_sessions(
            SessionQuery(
                namespace,
                user_id,
                agent_id,
                statuses,
                wanted,
                None if since is None else float(since),
                None if until is None else float(until),
                None if search is None else fold_case(search.strip()),
                limit,
                after,
                archived,
            )
        )

    @guarded
    def update_session(
        self,
        key: SessionKey,
        *,
        title: str | Unset | None = UNSET,
        labels: dict[str, str | None] | None = None,
    ) -> SessionRecord:
        """Set the title (None clears it: the first task's line shows again) and merge
        ``labels`` (a None value removes that label); returns the record after the change.

        Idempotent: the same change twice leaves the same record.
        """
        key = check_key(key)
        new_title = title if isinstance(title, Unset) else check_title(title)
        patch = {} if labels is None else check_labels(labels, patch=True)
        return self._update_session(key, new_title, patch, self.clock.now())

    @guarded
    def delete_session(
        self, key: SessionKey, *, by: str, reason: str = "", fence: Lease | None = None
    ) -> Tombstone:
        """Delete everything of ``key`` in one transaction and leave its tombstone.

        ``LeaseHeld`` while another holder has a live lease (pass that lease as ``fence``
        to delete under it). Deleting a deleted session returns the first tombstone.
        """
        key = check_key(key)
        check_id(by, "by")
        if not isinstance(reason, str) or len(reason) > MAX_TITLE:
            raise InvalidInput(f"reason must be text of at most {MAX_TITLE} characters")
        check_chars(reason, "reason")
        if fence is not None:
            check_lease(fence)
            if fence.key != key:
                raise InvalidInput(f"fence is a lease of session {fence.key}, not of {key}")
        tombstone = self._delete_session(key, by, reason, fence, self.clock.now())
        self._inbox_seen.pop(key, None)
        self._heads_seen.pop(key, None)
        self._notify()
        return tombstone

    @guarded
    def tombstone(self, key: SessionKey) -> Tombstone | None:
        """The tombstone of a deleted session, or None."""
        return self._tombstone(check_key(key))

    @guarded
    def tombstones(self, *, after: int = 0, limit: int = 100) -> list[Tombstone]:
        """Up to ``limit`` tombstones with ``seq > after``, in the order of the deletions.

        The next page starts after the last one's ``seq``; deletions committed later always
        come after it (see the module docstring).
        """
        check_seq(after, "after")
        return self._tombstones(after, check_limit(limit))

    @guarded
    def tombstone_watermark(self, sink: str) -> int:
        """The ``seq`` of the last tombstone the export sink named ``sink`` applied (0: none)."""
        check_id(sink, "sink")
        return self._tombstone_watermark(sink)

    @guarded
    def advance_tombstone_watermark(self, sink: str, seq: int) -> int:
        """Record that ``sink`` applied every tombstone through ``seq``; never backwards.
        Returns the value now stored. ``InvalidInput`` past the last deletion."""
        check_id(sink, "sink")
        check_seq(seq, "seq")
        return self._advance_tombstone_watermark(sink, seq)

    @guarded
    def set_archived(
        self, key: SessionKey, archived: bool = True, *, expected_inbox: int | None = None
    ) -> SessionRecord:
        """Archive the session (``archived=False``: bring it back); returns the record.

        Idempotent: archiving an archived session keeps its first ``archived_at``. With
        ``expected_inbox`` the change commits only while the inbox head is that seq (else
        ``InboxChanged``, nothing written).
        """
        key = check_key(key)
        if not isinstance(archived, bool):
            raise InvalidInput(f"archived must be True or False, got {archived!r}")
        if expected_inbox is not None:
            check_seq(expected_inbox, "expected_inbox")
        return self._set_archived(key, archived, expected_inbox, self.clock.now())

    # -- what a backend implements -----------------------------------------------------------

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def _create_session(self, key: SessionKey, now: float) -> SessionRecord: ...

    @abstractmethod
    def _get_session(self, key: SessionKey) -> SessionRecord | None: ...

    @abstractmethod
    def _list_sessions(
        self, namespace: str | None, user_id: str | None, agent_id: str | None
    ) -> list[SessionRecord]: ...

    @abstractmethod
    def _find_sessions(self, query: SessionQuery) -> list[SessionRecord]:
        """Live records matching ``query``, newest (last_activity, row) first, each with its
        ``cursor``; an index range, never a scan of the logs."""

    @abstractmethod
    def _update_session(
        self,
        key: SessionKey,
        title: str | Unset | None,
        labels: dict[str, str | None],
        now: float,
    ) -> SessionRecord:
        """Atomically: set the title unless ``UNSET``, ``merge_labels``, set ``updated_at``."""

    @abstractmethod
    def _delete_session(
        self, key: SessionKey, by: str, reason: str, fence: Lease | None, now: float
    ) -> Tombstone:
        """Atomically: ``check_fence``, delete every row of the session, leave the tombstone."""

    @abstractmethod
    def _tombstone(self, key: SessionKey) -> Tombstone | None: ...

    @abstractmethod
    def _tombstones(self, after: int, limit: int) -> list[Tombstone]:
        """Tombstones with after < seq, by seq, at most ``limit``."""

    @abstractmethod
    def _tombstone_watermark(self, sink: str) -> int: ...

    @abstractmethod
    def _advance_tombstone_watermark(self, sink: str, seq: int) -> int:
        """Atomically: ``InvalidInput`` past the highest tombstone seq, else max(old, seq)."""

    @abstractmethod
    def _set_archived(
        self, key: SessionKey, archived: bool, expected_inbox: int | None, now: float
    ) -> SessionRecord:
        """Atomically: ``check_inbox``, then set ``archived_at`` (kept if already set) or clear
        it; ``SessionDeleted`` / ``SessionNotFound`` for a key that is not live."""
