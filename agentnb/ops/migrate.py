"""Moving sessions between stores: ``nb.migrate(src, dst, ...)`` and ``agentnb migrate``.

Whole logs are copied, store port to store port (any backend to any backend: memory,
SQLite, PostgreSQL): every execution event and inbox record with its ``seq``, event id,
time and payload as committed (so each session's digest is the same at both ends), the
inbox's idempotency keys, the catalogue fields (creation time, title, labels, archive
flag), export watermarks, access tokens and the tombstones of deleted sessions. Payloads
in blobs are carried inline and placed in the target's own blobs; permission rules,
sub-agent links and plans are events of the log and come with it. Leases are not copied
(a migrated session runs at once at the target); fold snapshots are caches, rebuilt there.

A session is copied while migrate holds its lease at the source, so no runtime executes
it meanwhile; one that is running at the source (a live lease of another holder) is
refused with ``LeaseHeld`` naming it and its holder, before anything of it is written.
Commands accepted into its inbox during the copy are copied too (the heads are read again
until they stand still).

Batched and resumable: each batch is one atomic append (into SQLite, of the rows as the
source stored them when it is SQLite too, each checked against its checksum: see
``agentnb.ops._load``), and a run after a ``kill -9``
continues every session after the target's heads (``agentnb.ops._load``): nothing is
lost or written twice. The source is left as it was; archive or delete the sessions there
once the target serves them.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from agentnb.errors import Fenced, InvalidInput, LeaseHeld, SessionNotFound
from agentnb.holders import holder_alive, new_owner
from agentnb.ids import SessionKey
from agentnb.ops._format import all_tombstones, key_text
from agentnb.ops._load import Loader, copy_logs, record_fields
from agentnb.ops._sqlite import RowReader, sqlite_path
from agentnb.stores import SessionStore, open_store
from agentnb.stores.base import SessionRecord

__all__ = ["MigrationReport", "migrate"]

Progress = Callable[[str, int], None]
LEASE_TTL = 60.0
"""Seconds the lease migrate holds on a source session lasts (renewed per batch)."""
_MAX_ROUNDS = 100


@dataclass(frozen=True)
class MigrationReport:
    """What ``migrate`` copied (counts of what it wrote this run; a resumed run counts only
    the rest)."""

    sessions: int
    events: int
    inbox: int
    tokens: int
    tombstones: int
    seconds: float
    keys: tuple[SessionKey, ...] = ()


def migrate(
    src: str | SessionStore,
    dst: str | SessionStore,
    *,
    sessions: Iterable[str] | None = None,
    labels: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> MigrationReport:
    """Copy sessions from ``src`` to ``dst`` (module docstring).

    ``sessions``: session ids (or ``namespace/user/agent/session`` key texts) to copy; by
    default all. ``labels``: copy only sessions carrying every one of these labels. With
    either filter the store-wide records (tokens, tombstones) are left out.
    """
    started = time.monotonic()
    wanted = None if sessions is None else _wanted(sessions)
    if labels is not None and (
        not isinstance(labels, Mapping)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
    ):
        raise InvalidInput(f"labels must be a mapping of text to text, got {labels!r}")
    source = open_store(src, create=False)
    try:
        target = open_store(dst)
    except BaseException:
        if source is not src:
            source.close()
        raise
    try:
        if source.url == target.url and source.url != "memory://":
            raise InvalidInput(f"--from and --to name the same store ({source.url})")
        records = _select(source.list_sessions(), wanted, labels)
        loader = Loader(target)
        owner = new_owner()
        tokens = tombs = 0
        rows = RowReader(source) if sqlite_path(source) and loader.takes_rows else None
        try:
            with loader.pinned():
                whole = wanted is None and labels is None
                if whole:
                    found = source.list_tokens()
                    loader.tokens(found)
                    tokens = len(found)
                for record in records:
                    _copy_session(source, loader, record, owner, progress, rows)
                if whole:
                    for tomb in all_tombstones(source):
                        loader.tombstone(tomb)
                        tombs += 1
        finally:
            if rows is not None:
                rows.close()
    finally:
        if source is not src:
            source.close()
        if target is not dst:
            target.close()
    return MigrationReport(
        len(records),
        loader.events,
        loader.inbox,
        tokens,
        tombs,
        time.monotonic() - started,
        tuple(r.key for r in records),
    )


def _wanted(sessions: Iterable[str]) -> set[str]:
    if isinstance(sessions, str):
        sessions = [sessions]
    wanted = set()
    for each in sessions:
        if not isinstance(each, str) or not each:
            raise InvalidInput(f"sessions must be session ids, got {each!r}")
        wanted.add(each)
    return wanted


def _select(
    records: list[SessionRecord], wanted: set[str] | None, labels: Mapping[str, str] | None
) -> list[SessionRecord]:
    chosen = []
    for record in records:
        if wanted is not None and not ({record.key.session_id, key_text(record.key)} & wanted):
            continue
        if labels is not None and any(record.labels.get(k) != v for k, v in labels.items()):
            continue
        chosen.append(record)
    if wanted is not None:
        found = {r.key.session_id for r in chosen} | {key_text(r.key) for r in chosen}
        missing = sorted(wanted - found)
        if missing:
            raise SessionNotFound(
                f"no session {', '.join(missing)} at the source; `agentnb sessions --store "
                "URL` lists them"
            )
    return chosen


def _copy_session(
    source: SessionStore,
    loader: Loader,
    record: SessionRecord,
    owner: str,
    progress: Progress | None,
    rows: RowReader | None = None,
) -> None:
    key = record.key
    try:
        lease = source.acquire_lease(key, owner, LEASE_TTL)
    except LeaseHeld:
        held = source.current_lease(key)
        if held is not None and holder_alive(held.owner) is False:
            # A dead holder (a crashed runtime, or a migrate killed here): nothing runs.
            with contextlib.suppress(Fenced):
                source.release_lease(held)
            return _copy_session(source, loader, record, owner, progress, rows)
        holder = held.owner if held is not None else "another process"
        raise LeaseHeld(
            f"session {key_text(key)} is running at the source (its lease is held by "
            f"{holder!r}): migrating it now would leave its newest events behind; wait for "
            "its turn to end (or interrupt it), then run migrate again"
        ) from None
    current = [lease]

    def renew(seq: int) -> None:
        current[0] = source.renew_lease(current[0], LEASE_TTL)
        if progress is not None:
            progress(key_text(key), seq)

    try:
        fields = record_fields(source.get_session(key) or record)
        head, inbox_head = loader.begin(key, fields)
        for _ in range(_MAX_ROUNDS):
            src_head, src_inbox = source.heads(key)
            if (head, inbox_head) == (src_head, src_inbox):
                break
            copy_logs(source, loader, key, (head, inbox_head), (src_head, src_inbox), rows, renew)
            head, inbox_head = loader.target.heads(key)
        loader.finish(key, fields, source.watermarks(key))
        if progress is not None:
            progress(key_text(key), head)
    finally:
        with contextlib.suppress(Exception):
            source.release_lease(current[0])
