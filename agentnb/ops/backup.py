"""Backup, verify and restore: ``nb.backup(store, out)``, ``nb.verify(archive)``,
``nb.restore(archive, store)`` (and ``agentnb backup|verify|restore``).

A backup is online: sessions keep running while it is made, and what it holds is
consistent.

* SQLite: a physical archive (format ``agentnb-archive/2``, ``agentnb.ops._physical``).
  The store file is copied with SQLite's online backup API (one read transaction: every
  table at one instant, WAL contents included) into the archive itself; the ``-catalogue``
  record beside the file (the highest session id ever committed) is read before the copy
  and kept as a member. The manifest after the copy holds the digest of every block of
  the copy and every session's heads and digests, computed from the copy.
* PostgreSQL and memory (and any other backend): the logical format
  (``agentnb-archive/1``, ``agentnb.ops._format``), read through the store port. Each
  session is read through the heads seen when its turn comes, so each session is a
  consistent prefix of its logs; sessions are not all taken at one instant. (``pg_dump``
  is not used: the archive must restore into any backend, and it would carry PostgreSQL's
  own leases and sequences.)

Either archive holds every session's execution log and inbox (event ids, seqs, times and
payloads as committed), the inbox's idempotency keys, the catalogue fields (creation time,
title, labels, archive flag), export watermarks, access tokens (digests) and the
tombstones of deleted sessions. A restore leaves out leases (a restored session runs at
once) and fold snapshots (caches, rebuilt from the log on first open). The logical
archive's manifest at its end keeps the format, per-session heads and digests; every line
has its own checksum.

``verify`` reads the archive alone (both formats); ``restore`` verifies it, then writes
into an empty store (``StoreNotEmpty`` otherwise; ``merge=True`` accepts a store whose
sessions are all others) through ``Loader``: a physical archive's sessions are read from
its copy through the port, as a migration would (into any backend). A restore cut off
midway leaves its sessions partly written: restore again into a new empty store (or
finish it with ``nb.migrate`` from the restored part's source, which continues every
session after its heads).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agentnb.errors import ArchiveCorrupt, InvalidInput, StoreNotEmpty
from agentnb.ids import SessionKey
from agentnb.ops._format import (
    FORMAT,
    PHYSICAL,
    Digests,
    all_tombstones,
    check_of,
    encode,
    inbox_events,
    inbox_key_map,
    key_of,
    key_text,
    raw_events,
    raw_of,
    row_of,
)
from agentnb.ops._load import Loader, copy_logs, record_fields, token_of, tombstone_fields
from agentnb.ops._physical import checked_line, damaged, is_physical, open_physical, write_physical
from agentnb.ops._sqlite import RowReader, sqlite_path
from agentnb.stores import SessionStore, open_store
from agentnb.stores.base import RawEvent, Tombstone
from agentnb.tokens import record_fields as token_fields

__all__ = ["BackupReport", "RestoreReport", "VerifyReport", "backup", "restore", "verify"]

Progress = Callable[[str, int], None]
"""Called with a session's key text and its events copied so far (long work shows it)."""


@dataclass(frozen=True)
class BackupReport:
    """What ``backup`` wrote."""

    path: str
    method: str
    """``sqlite-backup-api`` (the physical archive: a consistent copy of the whole file) or
    ``logical``."""
    sessions: int
    events: int
    inbox: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` checked: every line's checksum, every session's heads and digests."""

    path: str
    format: str
    method: str
    sessions: int
    events: int
    inbox: int
    tokens: int
    tombstones: int
    heads: dict[str, tuple[int, int]] = field(repr=False)
    """Per session (key text): ``(head, inbox_head)``."""
    digests: dict[str, tuple[str, str]] = field(repr=False)
    """Per session: ``(digest, inbox_digest)`` (``agentnb.ops._format``)."""


@dataclass(frozen=True)
class RestoreReport:
    """What ``restore`` wrote."""

    sessions: int
    events: int
    inbox: int
    tokens: int
    tombstones: int
    seconds: float


# -- backup ---------------------------------------------------------------------------------


class _Writer:
    def __init__(self, f: IO[bytes]) -> None:
        self.f = f
        self.offset = 0
        self.lines = 0

    def line(self, value: dict[str, Any]) -> int:
        return self.raw(encode(value))

    def raw(self, data: bytes) -> int:
        """Write one record already encoded (compact, keys sorted); its offset."""
        at = self.offset
        self.f.write(check_of(data) + b" " + data + b"\n")
        self.offset += len(data) + 18
        self.lines += 1
        return at


def backup(
    store: str | SessionStore, out: str | os.PathLike[str], *, progress: Progress | None = None
) -> BackupReport:
    """Write a consistent archive of every session, token and tombstone of ``store`` to
    ``out`` (created owner-only, renamed into place when complete), while sessions run."""
    started = time.monotonic()
    target = Path(out)
    if target.is_dir():
        raise InvalidInput(f"{target} is a folder; name the archive file to write")
    opened = open_store(store, create=False)
    partial = target.with_name(target.name + ".partial")
    with contextlib.suppress(FileNotFoundError):
        partial.unlink()
    try:
        path = sqlite_path(opened)
        if path is not None:
            method = "sqlite-backup-api"
            written = write_physical(path, partial)
            counts = (written.sessions, written.events, written.inbox)
            if progress is not None:
                progress("", written.events)
        else:
            method = "logical"
            fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            with os.fdopen(fd, "wb", buffering=1 << 20) as f:
                w = _Writer(f)
                counts = _write_archive(w, opened, method, None, progress)
                f.flush()
                os.fsync(f.fileno())
        os.replace(partial, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
        raise
    finally:
        if opened is not store:
            opened.close()
    return BackupReport(
        str(target),
        method,
        counts[0],
        counts[1],
        counts[2],
        target.stat().st_size,
        time.monotonic() - started,
    )


def _write_archive(
    w: _Writer,
    source: SessionStore,
    method: str,
    catalogue: int | None,
    progress: Progress | None,
) -> tuple[int, int, int]:
    w.line({"r": "header", "format": FORMAT, "created_at": time.time(), "method": method})
    tokens = source.list_tokens()
    for token in tokens:
        w.line({"r": "token", **token_fields(token, digest=True)})
    manifest: list[dict[str, Any]] = []
    events = inbox = 0
    for i, record in enumerate(source.list_sessions()):
        key = record.key
        head, inbox_head = source.heads(key)
        offset = w.line(
            {
                "r": "session",
                "s": i,
                "key": [key.namespace, key.user_id, key.agent_id, key.session_id],
                "record": record_fields(record),
                "head": head,
                "inbox_head": inbox_head,
            }
        )
        digests = Digests()
        keys = inbox_key_map(source, key, inbox_head)
        for event in inbox_events(source, key, inbox_head):
            row = row_of(RawEvent.of(event))
            digests.inbox_row(row)
            k, fingerprint = keys.get(event.seq, (None, None))
            w.line({"r": "inbox", "s": i, "e": row, "k": k, "f": fingerprint})
        tail = b',"r":"event","s":' + str(i).encode() + b"}"
        for raw in raw_events(source, key, head):
            data = encode(row_of(raw))
            digests.event_bytes(data)
            w.raw(b'{"e":' + data + tail)  # the keys in encode()'s sorted order
            events += 1
            if progress is not None and events % 10_000 == 0:
                progress(key_text(key), events)
        w.line({"r": "marks", "s": i, "m": source.watermarks(key)})
        inbox += inbox_head
        manifest.append(
            {
                "key": key_text(key),
                "head": head,
                "inbox_head": inbox_head,
                "digest": digests.events.hexdigest(),
                "inbox_digest": digests.inbox.hexdigest(),
                "offset": offset,
            }
        )
    tombs = all_tombstones(source)
    for tomb in tombs:
        w.line({"r": "tombstone", **tombstone_fields(tomb)})
    w.line(
        {
            "r": "manifest",
            "format": FORMAT,
            "sessions": manifest,
            "tokens": len(tokens),
            "tombstones": len(tombs),
            "catalogue": catalogue,
            "lines": w.lines + 1,
        }
    )
    return len(manifest), events, inbox


# -- reading an archive ---------------------------------------------------------------------


@dataclass
class _Line:
    offset: int
    value: dict[str, Any]


def _lines(path: Path) -> Iterator[_Line]:
    """Every line of the archive, checked; ``ArchiveCorrupt`` at the first that fails."""
    session: str | None = None
    offset = 0
    try:
        f = path.open("rb")
    except FileNotFoundError:
        raise InvalidInput(f"{path}: no such archive; name a file `agentnb backup` wrote") from None
    with f:
        for raw in f:
            at = offset
            offset += len(raw)
            value = checked_line(path, at, raw, session)
            if value["r"] == "session":
                try:
                    session = key_text(key_of(value["key"]))
                except (KeyError, TypeError, ValueError):
                    raise damaged(path, at, session, "a session record is malformed") from None
            elif value["r"] in ("token", "tombstone", "manifest"):
                session = None
            yield _Line(at, value)


def verify(archive: str | os.PathLike[str]) -> VerifyReport:
    """Check every line's checksum (and, in a physical archive, every block of the store's
    copy) and every session's heads and digests against the manifest; ``ArchiveCorrupt``
    naming the session and the byte that fail."""
    path = Path(archive)
    if is_physical(path):
        checked = open_physical(path)
        heads = {key_text(k): v for k, v in checked.heads().items()}
        return VerifyReport(
            str(path),
            PHYSICAL,
            str(checked.header.get("method")),
            len(heads),
            sum(h for h, _ in heads.values()),
            sum(i for _, i in heads.values()),
            int(checked.manifest["tokens"]),
            int(checked.manifest["tombstones"]),
            heads,
            dict(checked.digests),
        )
    return _scan(path, None)


@dataclass
class _Seen:
    """What the checker saw of one session."""

    name: str
    offset: int
    head: int
    inbox_head: int
    seen: int = 0
    inbox_seen: int = 0
    digests: Digests = field(default_factory=Digests)


class _Checker:
    """Checks an archive's records in order (``verify``), one line at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header: dict[str, Any] | None = None
        self.manifest: dict[str, Any] | None = None
        self.sessions: list[_Seen] = []
        self.current: _Seen | None = None
        self.counts = {"token": 0, "tombstone": 0, "event": 0, "inbox": 0}
        self.lines = 0
        self.last = 0

    def fail(self, offset: int, why: str, session: str | None = None) -> ArchiveCorrupt:
        return damaged(self.path, offset, session, why)

    def line(self, line: _Line) -> None:
        self.lines += 1
        self.last = line.offset
        v = line.value
        kind = v["r"]
        name = self.current.name if self.current is not None else None
        if self.manifest is not None:
            raise self.fail(line.offset, "a record follows the manifest")
        if self.header is None:
            if kind != "header" or v.get("format") != FORMAT:
                raise self.fail(line.offset, f"not an {FORMAT} archive (no header)")
            self.header = v
            return
        try:
            self._record(line, kind, v, name)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise self.fail(line.offset, f"a {kind} record is malformed ({exc})", name) from None
        if kind in self.counts:
            self.counts[kind] += 1

    def _record(self, line: _Line, kind: str, v: dict[str, Any], name: str | None) -> None:
        if kind == "session":
            if int(v["s"]) != len(self.sessions):
                raise self.fail(line.offset, "sessions are out of order", name)
            self.current = _Seen(
                key_text(key_of(v["key"])), line.offset, int(v["head"]), int(v["inbox_head"])
            )
            self.sessions.append(self.current)
        elif kind in ("event", "inbox", "marks"):
            state = self.current
            if state is None or int(v["s"]) != len(self.sessions) - 1:
                raise self.fail(line.offset, f"an {kind} record outside its session", name)
            if kind == "marks":
                return
            raw_of(v["e"])  # the row decodes
            seq = int(v["e"][0])
            before = state.seen if kind == "event" else state.inbox_seen
            if seq != before + 1:
                raise self.fail(line.offset, f"{kind} seq {seq} follows {before}", name)
            if kind == "event":
                state.seen = seq
                state.digests.event(v["e"])
            else:
                state.inbox_seen = seq
                state.digests.inbox_row(v["e"])
        elif kind == "manifest":
            self.manifest = v
            self.current = None
        elif kind in ("token", "tombstone"):
            self.current = None
        else:
            raise self.fail(line.offset, f"unknown record {kind!r}", name)

    def report(self) -> VerifyReport:
        header, manifest = self.header, self.manifest
        if header is None or manifest is None:
            raise self.fail(self.last, "the archive ends before its manifest (cut short?)")
        listed = {m["key"]: m for m in manifest.get("sessions", [])}
        heads: dict[str, tuple[int, int]] = {}
        sums: dict[str, tuple[str, str]] = {}
        for state in self.sessions:
            entry = listed.pop(state.name, None)
            if entry is None:
                raise self.fail(state.offset, "a session the manifest does not list", state.name)
            got = (state.seen, state.inbox_seen)
            if got != (state.head, state.inbox_head) or got != (
                entry["head"],
                entry["inbox_head"],
            ):
                raise self.fail(
                    state.offset,
                    f"heads {got} differ from the manifest's ({entry['head']}, "
                    f"{entry['inbox_head']}): records are missing",
                    state.name,
                )
            sums[state.name] = (state.digests.events.hexdigest(), state.digests.inbox.hexdigest())
            if sums[state.name] != (entry["digest"], entry["inbox_digest"]):
                raise self.fail(
                    state.offset, "its records differ from the manifest's digest", state.name
                )
            heads[state.name] = got
        if listed:
            raise self.fail(
                self.last, "the manifest lists a session the archive lacks", next(iter(listed))
            )
        if (self.counts["token"], self.counts["tombstone"]) != (
            manifest["tokens"],
            manifest["tombstones"],
        ):
            raise self.fail(self.last, "tokens or deletions are missing")
        if self.lines != manifest.get("lines"):
            raise self.fail(
                self.last, f"{self.lines} lines, the manifest says {manifest.get('lines')}"
            )
        return VerifyReport(
            str(self.path),
            FORMAT,
            str(header.get("method")),
            len(self.sessions),
            self.counts["event"],
            self.counts["inbox"],
            self.counts["token"],
            self.counts["tombstone"],
            heads,
            sums,
        )


def _scan(path: Path, apply: Callable[[_Line], None] | None) -> VerifyReport:
    checker = _Checker(path)
    for line in _lines(path):
        checker.line(line)
        if apply is not None and line.value["r"] not in ("header", "manifest"):
            apply(line)
    return checker.report()


# -- restore --------------------------------------------------------------------------------


def restore(
    archive: str | os.PathLike[str],
    store: str | SessionStore,
    *,
    merge: bool = False,
    progress: Progress | None = None,
) -> RestoreReport:
    """Verify ``archive``, then write it into ``store``: an empty store, or with
    ``merge=True`` one none of whose sessions (or deletions) the archive holds.
    ``StoreNotEmpty`` (naming the sessions) otherwise; nothing is written then."""
    started = time.monotonic()
    path = Path(archive)
    if is_physical(path):
        return _restore_physical(path, store, merge, progress, started)
    report = verify(path)
    target = open_store(store)
    try:
        _check_target(target, set(report.heads), merge)
        loader = Loader(target)
        applier = _Applier(loader, progress)
        with loader.pinned():
            _scan(path, applier.apply)
            applier.flush()
    finally:
        if target is not store:
            target.close()
    return RestoreReport(
        report.sessions,
        loader.events,
        loader.inbox,
        report.tokens,
        report.tombstones,
        time.monotonic() - started,
    )


def _restore_physical(
    path: Path,
    store: str | SessionStore,
    merge: bool,
    progress: Progress | None,
    started: float,
) -> RestoreReport:
    """Restore a physical archive: checked, then its copy read through the port (every
    session through the manifest's heads) into ``store`` as a migration would."""
    opened = open_physical(path, keep=True)
    try:
        heads = opened.heads()
        target = open_store(store)
        try:
            _check_target(target, {key_text(k) for k in heads}, merge)
            loader = Loader(target)
            with opened.store() as source, loader.pinned():
                rows = RowReader(source) if loader.takes_rows else None
                try:
                    tokens = source.list_tokens()
                    loader.tokens(tokens)
                    for key, (head, inbox_head) in heads.items():
                        record = source.get_session(key)
                        assert record is not None  # checked by open_physical
                        fields = record_fields(record)
                        start = loader.begin(key, fields)
                        copy_logs(source, loader, key, start, (head, inbox_head), rows)
                        loader.finish(key, fields, source.watermarks(key))
                        if progress is not None:
                            progress(key_text(key), head)
                    tombs = all_tombstones(source)
                    for tomb in tombs:
                        loader.tombstone(tomb)
                finally:
                    if rows is not None:
                        rows.close()
        finally:
            if target is not store:
                target.close()
    finally:
        opened.close()
    return RestoreReport(
        len(heads), loader.events, loader.inbox, len(tokens), len(tombs), time.monotonic() - started
    )


def _check_target(target: SessionStore, names: set[str], merge: bool) -> None:
    there = {key_text(r.key) for r in target.list_sessions()}
    if there and not merge:
        raise StoreNotEmpty(
            f"{target.url} already holds {len(there)} session(s); restore into an empty store, "
            "or pass --merge (merge=True) to add the archive's sessions beside them",
            sessions=sorted(there)[:20],
        )
    overlap = sorted(there & names)
    if overlap:
        shown = ", ".join(overlap[:5]) + (" ..." if len(overlap) > 5 else "")
        raise StoreNotEmpty(
            f"{target.url} already holds {len(overlap)} of the archive's sessions ({shown}); "
            "a merge adds only sessions the store lacks: delete those there, or restore into "
            "an empty store",
            sessions=overlap,
        )


class _Applier:
    """Feeds an archive's records to a ``Loader`` (one session at a time)."""

    def __init__(self, loader: Loader, progress: Progress | None) -> None:
        self.loader = loader
        self.progress = progress
        self.key: SessionKey | None = None
        self.fields: dict[str, Any] = {}
        self.heads = (0, 0)
        self.pending: list[RawEvent] = []
        self.tokens: list[Any] = []

    def apply(self, line: _Line) -> None:
        v = line.value
        kind = v["r"]
        if kind != "token" and self.tokens:
            self.loader.tokens(self.tokens)
            self.tokens = []
        if kind == "token":
            self.tokens.append(token_of(v))
        elif kind == "session":
            self.key = key_of(v["key"])
            self.fields = v["record"]
            self.heads = self.loader.begin(self.key, self.fields)
        elif kind == "inbox" and self.key is not None:
            raw = raw_of(v["e"])
            if raw.seq > self.heads[1]:
                self._drain()
                self.loader.inbox_record(self.key, raw, v.get("k"), v.get("f"))
        elif kind == "event" and self.key is not None:
            raw = raw_of(v["e"])
            if raw.seq > self.heads[0]:
                self.pending.append(raw)
                if len(self.pending) >= 5_000:
                    self._drain()
        elif kind == "marks" and self.key is not None:
            self._drain()
            self.loader.finish(self.key, self.fields, {str(k): int(s) for k, s in v["m"].items()})
            if self.progress is not None:
                self.progress(key_text(self.key), self.heads[0])
            self.key = None
        elif kind == "tombstone":
            self.loader.tombstone(
                Tombstone(
                    key_of(v["key"]),
                    float(v["deleted_at"]),
                    str(v["deleted_by"]),
                    str(v["reason"]),
                    int(v["events"]),
                )
            )

    def _drain(self) -> None:
        if self.pending and self.key is not None:
            self.loader.append_events(self.key, self.pending)
            self.pending = []

    def flush(self) -> None:
        if self.tokens:
            self.loader.tokens(self.tokens)
            self.tokens = []
        self._drain()
