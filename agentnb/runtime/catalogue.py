"""The catalogue and lifecycle of sessions: listing, archiving, deleting, retention.

Functions over any store (what ``Runtime`` and the command line call), and ``Lifecycle``,
the ``Runtime`` methods built on them (``archive``, ``unarchive``, ``delete``, ``prune``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentnb import states
from agentnb.errors import InboxChanged, InvalidInput, LeaseHeld, SessionBusy, SessionNotFound
from agentnb.folds import Folds
from agentnb.ids import SessionKey, check_id, check_seconds
from agentnb.projections.decisions import effective_status
from agentnb.projections.state import PARKING, InboxState, SessionState, TurnState
from agentnb.records import PruneReport, SessionCounts, SessionInfo, UsageTotals
from agentnb.runtime.drivers import Drivers
from agentnb.runtime.subagents import session_lineage
from agentnb.stores import SessionStore
from agentnb.stores.base import SessionRecord, Tombstone
from agentnb.workspace import remove_workspace

__all__ = [
    "SESSION_STATUSES",
    "Lifecycle",
    "archive_session",
    "check_archive",
    "find_sessions",
    "prunable",
    "session_info",
    "session_usage",
    "unarchive_session",
]

SESSION_STATUSES = frozenset(
    {"idle", "queued", "running", "suspended", "interrupted", "failed", "parked"}
)
"""What ``SessionInfo.status`` says (and ``runtime.sessions(status=...)`` takes)."""
# The raw latest-turn statuses (catalogue column; "none": no turn yet) each session status
# can come from: the store narrows by them, ``session_info`` decides.
_RAW: dict[str, frozenset[str]] = {
    "running": frozenset({"running"}),
    "interrupted": frozenset({"running", "interrupted"}),
    "suspended": frozenset({"suspended"}),
    "failed": frozenset({"failed"}),
    "parked": frozenset({"running", "suspended", "interrupted", "failed"}),
    "queued": frozenset({"none", "completed", "cancelled"}),
    "idle": frozenset({"none", "completed", "cancelled"}),
}


def session_usage(store: SessionStore, key: SessionKey) -> UsageTotals:
    """The session's usage totals: its folds' snapshot plus the events after it."""
    with states.read(store, key) as (state, _):
        return UsageTotals.of(state.usage)


def session_info(
    record: SessionRecord, *, now: float, store: SessionStore | None = None
) -> SessionInfo:
    """A catalogue record as ``runtime.sessions()`` shows it.

    The status comes from the one rule (``effective_status``) applied to the latest turn's
    raw status, with ``executing`` = someone holds a live lease; then the queue: tasks
    accepted but not started make it ``queued``, or ``parked`` behind a turn that waits
    for a person.
    """
    queued = record.submits > record.turns
    status = "queued" if queued else "idle"
    if record.turn_status is not None:
        executing = record.lease_owner is not None and record.lease_expires > now
        turn = TurnState("", "", status=record.turn_status)
        effective = effective_status(SessionState(), turn, executing=executing)
        if effective == "running":
            status = "running"
        elif effective in PARKING:
            status = "parked" if queued else effective

    def at(seconds: float) -> datetime:
        return datetime.fromtimestamp(seconds, UTC)

    return SessionInfo(
        record.key,
        record.title or record.first_task,
        dict(record.labels),
        status,  # type: ignore[arg-type]
        at(record.created_at),
        at(record.updated_at),
        SessionCounts(record.events, record.turns, record.bytes),
        at(record.last_activity),
        None if record.archived_at is None else at(record.archived_at),
        cursor=record.cursor,
        _usage=None if store is None else functools.partial(session_usage, store),
        _lineage=None if store is None else functools.partial(session_lineage, store),
    )


def find_sessions(
    store: SessionStore,
    *,
    namespace: str | None = None,
    agent_id: str | None = None,
    user_id: str | None = None,
    status: str | Iterable[str] | None = None,
    labels: dict[str, str] | None = None,
    since: datetime | float | None = None,
    until: datetime | float | None = None,
    search: str | None = None,
    limit: int = 50,
    before: str | None = None,
    archived: bool | None = False,
) -> list[SessionInfo]:
    """``Runtime.sessions`` on any store and scope (what the command line lists)."""
    wanted = _check_statuses(status)
    raw = None if wanted is None else frozenset().union(*(_RAW[s] for s in wanted))
    page: list[SessionInfo] = []
    cursor = before
    while True:
        records = store.find_sessions(
            namespace=namespace,
            user_id=user_id,
            agent_id=agent_id,
            turn_status=raw,
            labels=labels,
            since=_seconds(since, "since"),
            until=_seconds(until, "until"),
            search=search,
            limit=limit,
            before=cursor,
            archived=archived,
        )
        now = store.clock.now()
        for record in records:
            info = session_info(record, now=now, store=store)
            if wanted is None or info.status in wanted:
                page.append(info)
                if len(page) == limit:
                    break
        if len(page) == limit or len(records) < limit:
            return page
        cursor = records[-1].cursor  # the status filter dropped some: read on


def prunable(
    store: SessionStore,
    older_than: timedelta | float,
    *,
    status: str | Iterable[str] = "idle",
    labels: dict[str, str] | None = None,
    namespace: str | None = None,
    agent_id: str | None = None,
    user_id: str | None = None,
) -> list[SessionInfo]:
    """The sessions a retention rule selects (``Runtime.prune``): no activity for
    ``older_than`` (a ``timedelta`` or seconds), in ``status`` (never running or queued)."""
    if isinstance(older_than, timedelta):
        older_than = older_than.total_seconds()
    if not isinstance(older_than, int | float) or isinstance(older_than, bool):
        raise InvalidInput(
            f"older_than must be a timedelta or seconds, got {older_than!r}; "
            "e.g. prune(timedelta(days=30))"
        )
    if not 0 <= older_than < math.inf:  # NaN compares false both ways
        raise InvalidInput(f"older_than must be seconds >= 0 (finite), got {older_than!r}")
    wanted = _check_statuses(status) or frozenset({"idle"})
    if wanted & {"running", "queued"}:
        raise InvalidInput(
            "prune never deletes running or queued sessions; delete one with "
            "runtime.delete(key, force=True) if you must"
        )
    cutoff = store.clock.now() - float(older_than)
    found: list[SessionInfo] = []
    before = None
    while True:
        page = find_sessions(
            store,
            namespace=namespace,
            agent_id=agent_id,
            user_id=user_id,
            status=wanted,
            labels=labels,
            until=cutoff,
            limit=500,
            before=before,
            archived=None,  # retention covers archived sessions too
        )
        found += page
        if len(page) < 500:
            return found
        before = page[-1].cursor


_STARTS = frozenset(
    {"submit", "resume", "respond", "cancel", "reconcile", "compact", "revoke", "feedback"}
)
"""Commands a runtime dispatches (steering and material wait for a run to pick them up)."""


def check_archive(key: SessionKey, state: SessionState, inbox: InboxState) -> None:
    """``SessionBusy`` unless the session holds no work: no run open (running, or cut off
    by a crash and not recovered yet) and no command waiting to be carried out (queued
    tasks, answers, resumes). A turn that waits for a person may be archived as it is."""
    if state.active_run is not None:
        turn = state.runs[state.active_run].turn_id
        raise SessionBusy(
            f"session {key} cannot be archived: turn {turn} has a run open (running, or cut "
            "off by a crash and not recovered yet); interrupt or cancel it, then archive"
        )
    waiting = [
        c
        for c in inbox.commands.values()
        if c.kind in _STARTS
        and c.command_id not in state.handled
        and c.command_id not in inbox.rejected
    ]
    if waiting:
        raise SessionBusy(
            f"session {key} cannot be archived: {len(waiting)} command(s) wait to be carried "
            f"out (first: {waiting[0].kind} {waiting[0].command_id}); let them run or cancel "
            "the queued tasks, then archive"
        )


def archive_session(store: SessionStore, key: SessionKey) -> SessionInfo:
    """Archive ``key`` in ``store`` (what ``Runtime.archive`` and ``agentnb archive`` do):
    decided by ``check_archive`` at the inbox head the flag is set against, again if a
    command came in meanwhile."""
    for _ in range(10):
        with states.read(store, key) as (state, inbox):
            check_archive(key, state, inbox)
            seen = inbox.seq
        try:
            record = store.set_archived(key, True, expected_inbox=seen)
        except InboxChanged:
            continue  # a command came in meanwhile: decide again
        return session_info(record, now=store.clock.now(), store=store)
    raise SessionBusy(f"session {key} keeps receiving commands; archive it once it is idle")


def unarchive_session(store: SessionStore, key: SessionKey) -> SessionInfo:
    """Take ``key`` out of the archive (``Runtime.unarchive``, ``agentnb unarchive``)."""
    record = store.set_archived(key, False)
    return session_info(record, now=store.clock.now(), store=store)


def _check_statuses(status: str | Iterable[str] | None) -> frozenset[str] | None:
    if status is None:
        return None
    try:
        wanted = frozenset([status] if isinstance(status, str) else status)
    except TypeError:  # not a str nor a collection of them
        wanted = frozenset([repr(status)])
    unknown = wanted - SESSION_STATUSES
    if unknown or not wanted:
        raise InvalidInput(
            f"status must be one or more of {sorted(SESSION_STATUSES)}, got {status!r}"
        )
    return wanted


def _seconds(value: datetime | float | None, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise InvalidInput(
                f"{name} is a naive datetime; give it a timezone, e.g. datetime.now(UTC)"
            )
        return value.timestamp()
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise InvalidInput(f"{name} must be a datetime or seconds since the epoch, got {value!r}")
    return float(value)


class Lifecycle(Drivers):
    """``Runtime``'s catalogue verbs: archive, unarchive, delete and prune its sessions."""

    if TYPE_CHECKING:
        exporter: Any

        def _key(self, session_id: str, user_id: str) -> SessionKey: ...

    def archive(self, key: SessionKey | str, *, user_id: str = "default") -> SessionInfo:
        """Archive a finished session: ``sessions()`` leaves it out (``archived=True``
        lists it), it stays readable (``transcript``, ``history``, ``inspect``, exports),
        and it refuses new work (``submit``, ``send``, ``inject``, ``respond``, ``resume``,
        ``reconcile``, ``compact``; ``steer`` finds nothing running) with
        ``SessionArchived`` until ``unarchive``, from any runtime or process: the store
        checks the flag where it accepts a command. ``cancel`` and ``interrupt`` still work.

        ``SessionBusy`` while the session has work: a run open, or commands waiting (cancel
        queued tasks first). A turn waiting for a person (suspended, interrupted, failed)
        is archived as it is. Archiving an archived session changes nothing.
        """
        self.check_open()
        if not isinstance(key, SessionKey):
            key = self._key(key, user_id)
        return archive_session(self.store, key)

    def unarchive(self, key: SessionKey | str, *, user_id: str = "default") -> SessionInfo:
        """Bring an archived session back: listed by default again, and it takes new work."""
        self.check_open()
        if not isinstance(key, SessionKey):
            key = self._key(key, user_id)
        return unarchive_session(self.store, key)

    def delete(
        self,
        key: SessionKey | str,
        *,
        user_id: str = "default",
        force: bool = False,
        reason: str = "",
        by: str | None = None,
        timeout: float = 30.0,
    ) -> Tombstone:
        """Delete a session: its events, inbox, blobs, snapshots, lease and watermarks, in
        one transaction; a tombstone (``by``, when, ``reason``) stays in the catalogue.

        ``key`` is a ``SessionKey`` or a session id of this agent (with ``user_id``).
        ``SessionBusy`` while a turn runs, unless ``force=True``: then the run is
        interrupted first (cooperatively; ``SessionBusy`` if it has not stopped within
        ``timeout`` seconds). Deleting a deleted session returns its tombstone.
        """
        self.check_open()
        timeout = check_seconds(timeout, "timeout")
        if not isinstance(key, SessionKey):
            key = self._key(key, user_id)
        by = self.owner if by is None else check_id(by, "by")
        tombstone = self.store.tombstone(key)
        if tombstone is not None:
            return tombstone
        record = self.store.get_session(key)
        if record is None:
            raise SessionNotFound(f"there is no session {key}; see runtime.sessions()")
        info = session_info(record, now=self.store.clock.now())
        if info.status == "running" and not force:
            raise SessionBusy(
                f"session {key} has a turn running; interrupt it first, or delete it with "
                "force=True (which interrupts it)"
            )
        deadline = time.monotonic() + timeout
        self._let_go_of(key, timeout, interrupt=info.status == "running")
        bound = Folds(self.store, key, limits=self.limits).refresh()[0].workspace
        while True:
            try:
                tombstone = self.store.delete_session(key, by=by, reason=reason)
                break
            except LeaseHeld:
                # This runtime's own serve() loop may claim the session again for what the
                # stop left in its inbox (the interrupt): let that short run end, then delete.
                lease = self.store.current_lease(key)
                if lease is not None and (
                    lease.owner != self.owner or time.monotonic() >= deadline
                ):
                    raise
                self._let_go_of(key, max(0.1, deadline - time.monotonic()), interrupt=False)
        self._forget(key)
        if bound is not None:  # its working files go with it (never a shared root)
            remove_workspace(Path(bound["path"]), Path(bound["root"]))
        if self.exporter is not None:
            self.exporter.notify()  # the tombstone goes to the export sinks now
        return tombstone

    def prune(
        self,
        older_than: timedelta | float,
        *,
        status: str | Iterable[str] = "idle",
        labels: dict[str, str] | None = None,
        user_id: str | None = None,
        dry_run: bool = True,
        reason: str = "retention",
    ) -> PruneReport:
        """Delete this agent's sessions with no activity for ``older_than`` (a ``timedelta``
        or seconds) whose status is ``status`` (default ``idle``; never ``running`` or
        ``queued``) and whose labels match, archived or not. With ``dry_run`` (the default)
        nothing is deleted: the report lists what would be.
        """
        if not isinstance(dry_run, bool):
            raise InvalidInput(
                f"dry_run must be True (list only) or False (delete), got {dry_run!r}"
            )
        found = prunable(
            self.store,
            older_than,
            status=status,
            labels=labels,
            namespace=self.namespace,
            agent_id=self.agent.agent_id,
            user_id=user_id,
        )
        deleted = 0
        if not dry_run:
            for info in found:
                try:
                    self.delete(info.key, reason=reason)
                except (SessionBusy, LeaseHeld):
                    continue  # it came back to life since it was listed: keep it
                deleted += 1
        return PruneReport(bool(dry_run), tuple(found), deleted)
