"""The physical archive of an SQLite store (format ``agentnb-archive/2``): how ``backup``
writes it and how ``verify`` and ``restore`` check and open it.

Layout: the archive starts with the store's database as SQLite's online backup API copied
it (one read transaction: every table at one instant, WAL contents included; its header
set to rollback-journal mode, so reading the copy writes nothing beside it), ``N`` bytes.
Lines follow, each ``<check> <json>\\n`` as in the logical format (``agentnb.ops._format``):

``{"r": "header", "format": "agentnb-archive/2", "method": "sqlite-backup-api", ...}``
``{"r": "member", "name": "catalogue", "data": base64 | null}``  the ``-catalogue`` file
``{"r": "manifest", "format": ..., "members": [{"name": "store", "offset": 0, "bytes": N,
"chunk": C, "check": "crc32", "chunks": [...]}], "sessions": [{"key", "head",
"inbox_head", "digest", "inbox_digest"}], "tokens": n, "tombstones": n}``
``{"r": "end", "trailer": N}``  (the last line: where the lines start)

``chunks`` holds the CRC-32 of each ``C``-byte block of the copy: a damaged byte is found by
its block. (A CRC, not a SHA-256: these checks find accidental damage, as the lines'
checksums do, and nothing unkeyed stops a deliberate change; a SHA-256 of every block cost
as much CPU as the digests of all the sessions.) A session's ``digest`` and
``inbox_digest`` are computed by SQLite from the copy (``row_digests``: a SHA-256 over the
rows' stored checksums in seq order); ``verify`` computes them again from the member,
checks every row against its checksum, and reports the logical digests (``log_digests``),
the same as a logical archive of the same store reports.

The digests of the sessions are computed on two threads of their own while the copy is
checked and flushed to disk (SQLite, zlib and fsync let go of the GIL), so the backup
costs the copy plus about the longest of these.
"""

from __future__ import annotations

import base64
import contextlib
import mmap
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from agentnb.errors import ArchiveCorrupt, StorageError
from agentnb.ids import SessionKey
from agentnb.ops._format import PHYSICAL, check_of, encode, key_of, key_text, log_digests
from agentnb.ops._sqlite import connect, row_digests
from agentnb.stores import SessionStore, open_store

__all__ = [
    "MAGIC",
    "Opened",
    "checked_line",
    "damaged",
    "is_physical",
    "open_physical",
    "write_physical",
]

MAGIC = b"SQLite format 3\x00"
CHUNK = 1 << 16
"""Bytes per hashed block of the copy."""
_READ = 1 << 20
_END_MAX = 4096
"""The end line is shorter than this."""


def damaged(path: Path, offset: int, session: str | None, why: str) -> ArchiveCorrupt:
    where = f" of session {session}" if session else ""
    return ArchiveCorrupt(
        f"{path}: byte {offset}{where}: {why}; the archive is damaged: restore from another backup",
        path=str(path),
        offset=offset,
        session=session,
    )


def is_physical(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except (FileNotFoundError, IsADirectoryError):
        return False


def _line(value: dict[str, Any]) -> bytes:
    data = encode(value)
    return check_of(data) + b" " + data + b"\n"


# -- writing --------------------------------------------------------------------------------


@dataclass
class Written:
    sessions: int
    events: int
    inbox: int


def _listed(copy: Path) -> tuple[list[tuple[Any, ...]], int, int]:
    """The copy's live sessions (row id and key), its tokens and its deletions."""
    conn = connect(copy, read_only=True)
    try:
        listed = conn.execute(
            "SELECT id, namespace, user_id, agent_id, session_id FROM sessions "
            "WHERE deleted_at IS NULL ORDER BY id"
        ).fetchall()
        (tokens,) = conn.execute("SELECT count(*) FROM tokens").fetchone()
        (tombs,) = conn.execute(
            "SELECT count(*) FROM sessions WHERE deleted_at IS NOT NULL"
        ).fetchone()
        return listed, int(tokens), int(tombs)
    finally:
        conn.close()


def _session_digests(copy: Path, listed: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The heads and digests of the ``listed`` sessions of the copy."""
    conn = connect(copy, read_only=True)
    conn.execute(f"PRAGMA mmap_size={1 << 40}")  # a read-only scan: no copies of its pages
    try:
        sessions = []
        for sid, *key in listed:
            head, inbox_head = conn.execute(
                "SELECT (SELECT coalesce(max(seq), 0) FROM events WHERE session=?1), "
                "(SELECT coalesce(max(seq), 0) FROM inbox WHERE session=?1)",
                (sid,),
            ).fetchone()
            sessions.append(
                {
                    "key": list(key),
                    "head": head,
                    "inbox_head": inbox_head,
                    "digest": row_digests(conn, "events", sid, head),
                    "inbox_digest": row_digests(conn, "inbox", sid, inbox_head),
                }
            )
        return sessions
    finally:
        conn.close()


def _hash_member(path: Path, size: int) -> list[int]:
    """The block checks of the first ``size`` bytes of ``path`` (read through a map)."""
    if size == 0:
        return []
    with path.open("rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        try:
            return [zlib.crc32(view[at : at + CHUNK]) for at in range(0, size, CHUNK)]
        finally:
            view.release()


def _parallel(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run ``jobs`` on threads of their own but the first, here; their results in order
    (the first exception raised again)."""
    results: list[Any] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as exc:  # noqa: BLE001 - raised again by the caller's thread
            results[i] = _Failed(exc)

    threads = [
        threading.Thread(target=run, args=(i,), name="agentnb-backup-digests", daemon=True)
        for i in range(1, len(jobs))
    ]
    for thread in threads:
        thread.start()
    try:
        run(0)
    finally:
        for thread in threads:
            thread.join()
    for result in results:
        if isinstance(result, _Failed):
            raise result.exc
    return results


@dataclass
class _Failed:
    exc: BaseException


def write_physical(store: Path, partial: Path) -> Written:
    """Write the physical archive of the SQLite store file ``store`` to ``partial`` (which
    does not exist; created owner-only and flushed to disk)."""
    catalogue = _read_or_none(Path(f"{store}-catalogue"))  # before the copy: never ahead
    fd = os.open(partial, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    source = sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)
    # The pages read through a map (no read call and copy per page): a third less CPU. The
    # store's own connections do not map the file; SQLite supports mapping readers beside
    # other processes' writers.
    source.execute(f"PRAGMA mmap_size={1 << 40}")
    try:
        target = sqlite3.connect(partial)
        try:
            # A new file, thrown away if anything fails: no journal, one flush at the end.
            target.execute("PRAGMA journal_mode=OFF")
            target.execute("PRAGMA synchronous=OFF")
            source.backup(target)  # one step: a single read transaction, every table at once
            target.execute("PRAGMA journal_mode=DELETE")  # read-only readers need no -shm
        finally:
            target.close()
    finally:
        source.close()
    size = partial.stat().st_size
    listed, tokens, tombs = _listed(partial)
    # The blocks' digests here, the sessions' on two threads and the copy's flush to disk
    # on a third: SQLite, zlib and fsync let go of the GIL while they work.
    hashed, _, *halves = _parallel(
        [
            lambda: _hash_member(partial, size),
            lambda: _flush(partial),
            lambda: _session_digests(partial, listed[0::2]),
            lambda: _session_digests(partial, listed[1::2]),
        ]
    )
    chunks: list[int] = hashed
    by_id = {}
    for part, half in zip((listed[0::2], listed[1::2]), halves, strict=True):
        by_id.update({row[0]: entry for row, entry in zip(part, half, strict=True)})
    sessions = [by_id[row[0]] for row in listed]
    member = {
        "name": "store",
        "offset": 0,
        "bytes": size,
        "chunk": CHUNK,
        "check": "crc32",
        "chunks": chunks,
    }
    with partial.open("ab") as f:
        f.write(
            _line(
                {
                    "r": "header",
                    "format": PHYSICAL,
                    "created_at": time.time(),
                    "method": "sqlite-backup-api",
                }
            )
        )
        data = None if catalogue is None else base64.b64encode(catalogue).decode()
        f.write(_line({"r": "member", "name": "catalogue", "data": data}))
        f.write(
            _line(
                {
                    "r": "manifest",
                    "format": PHYSICAL,
                    "members": [member],
                    "sessions": sessions,
                    "tokens": tokens,
                    "tombstones": tombs,
                }
            )
        )
        f.write(_line({"r": "end", "trailer": size}))
        f.flush()
        os.fsync(f.fileno())
    return Written(
        len(sessions), sum(s["head"] for s in sessions), sum(s["inbox_head"] for s in sessions)
    )


def _flush(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


# -- reading --------------------------------------------------------------------------------


@dataclass
class Opened:
    """A physical archive, checked; ``member`` the copy of the store taken out of it (a
    temporary file, removed by ``close``)."""

    path: Path
    header: dict[str, Any]
    manifest: dict[str, Any]
    digests: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Per session: the logical ``(digest, inbox_digest)`` (``log_digests``)."""
    folder: Path | None = None
    member: Path | None = None

    def heads(self) -> dict[SessionKey, tuple[int, int]]:
        """Per session: ``(head, inbox_head)`` as the manifest has them."""
        return {
            key_of(s["key"]): (int(s["head"]), int(s["inbox_head"]))
            for s in self.manifest["sessions"]
        }

    @contextlib.contextmanager
    def store(self) -> Iterator[SessionStore]:
        """The member opened as a store (to read it through the port)."""
        assert self.member is not None
        store = open_store(f"sqlite:///{self.member}", create=False)
        try:
            yield store
        finally:
            store.close()

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = self.member = None


def checked_line(path: Path, at: int, raw: bytes, session: str | None = None) -> dict[str, Any]:
    """The archive record of one line at byte ``at`` (its checksum, JSON and shape checked),
    or ``ArchiveCorrupt`` naming the byte and ``session``, the session it belongs to."""
    if not raw.endswith(b"\n") or len(raw) < 19 or raw[16:17] != b" ":
        raise damaged(path, at, session, "a line is cut short or malformed")
    data = raw[17:-1]
    if check_of(data) != raw[:16]:
        raise damaged(path, at, session, "a line fails its checksum")
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise damaged(path, at, session, "a line is not JSON") from None
    if not isinstance(value, dict) or not isinstance(value.get("r"), str):
        raise damaged(path, at, session, "a line is not an archive record")
    return value


def _trailer(path: Path, size: int) -> tuple[int, list[tuple[int, dict[str, Any]]]]:
    """The lines after the copy, checked, with their offsets."""
    cut = damaged(path, max(0, size - 1), None, "the archive ends before its manifest (cut short?)")
    with path.open("rb") as f:
        f.seek(max(0, size - _END_MAX))
        tail = f.read()
        if not tail.endswith(b"\n"):
            raise cut
        start = tail.rfind(b"\n", 0, len(tail) - 1) + 1
        at = size - len(tail) + start
        try:
            end = checked_line(path, at, tail[start:])
        except ArchiveCorrupt:
            raise cut from None
        trailer = end.get("trailer")
        if end["r"] != "end" or not isinstance(trailer, int) or not 0 < trailer <= at:
            raise cut
        f.seek(trailer)
        lines = []
        offset = trailer
        for raw in f:
            lines.append((offset, checked_line(path, offset, raw)))
            offset += len(raw)
    kinds = [v["r"] for _, v in lines]
    if kinds != ["header", "member", "manifest", "end"]:
        raise damaged(path, trailer, None, f"the records after the copy are {kinds}")
    if lines[0][1].get("format") != PHYSICAL:
        raise damaged(path, trailer, None, f"not an {PHYSICAL} archive (its header)")
    return trailer, lines


def open_physical(path: Path, *, keep: bool = False) -> Opened:
    """Check a physical archive: its lines, every block of the copy, and every session's
    heads, rows and digests in it; ``ArchiveCorrupt`` naming the byte (and the session,
    when the damage lies in its rows). With ``keep`` the member stays for the caller."""
    size = path.stat().st_size
    trailer, lines = _trailer(path, size)
    header, manifest = lines[0][1], lines[2][1]
    try:
        (member,) = manifest["members"]
        chunk, expected = int(member["chunk"]), list(member["chunks"])
        if int(member["bytes"]) != trailer or member["name"] != "store":
            raise ValueError("the member's size is not where the lines start")
        if member["check"] != "crc32":
            raise ValueError(f"unknown block check {member['check']!r}")
        sessions = [(key_of(s["key"]), s) for s in manifest["sessions"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise damaged(path, lines[2][0], None, f"the manifest is malformed ({exc})") from None
    if chunk != CHUNK:
        raise damaged(path, lines[2][0], None, f"blocks of {chunk} bytes, expected {CHUNK}")
    folder = Path(tempfile.mkdtemp(prefix="agentnb-restore-"))
    opened = Opened(path, header, manifest, folder=folder, member=folder / "store.sqlite")
    try:
        assert opened.member is not None
        fd = os.open(opened.member, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        with path.open("rb") as f, os.fdopen(fd, "wb") as out:
            left = trailer
            while left > 0 and (data := f.read(min(_READ, left))):
                out.write(data)
                left -= len(data)
        got = _hash_member(opened.member, trailer - left)
        bad = next(
            (i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b),
            None if len(got) == len(expected) else min(len(got), len(expected)),
        )
        if bad is not None:
            raise damaged(
                path,
                bad * CHUNK,
                _failing_session(opened, sessions),
                f"the {CHUNK}-byte block of the store's copy from this byte fails its check",
            )
        _check_sessions(opened, sessions)
    except BaseException:
        opened.close()
        raise
    if not keep:
        opened.close()
    return opened


def _session_ok(conn: sqlite3.Connection, store: SessionStore, key: SessionKey, entry: Any) -> bool:
    row = conn.execute(
        "SELECT id FROM sessions WHERE namespace=? AND user_id=? AND agent_id=? "
        "AND session_id=? AND deleted_at IS NULL",
        (key.namespace, key.user_id, key.agent_id, key.session_id),
    ).fetchone()
    if row is None:
        return False
    head, inbox_head = int(entry["head"]), int(entry["inbox_head"])
    if store.heads(key) != (head, inbox_head):
        return False
    return (
        row_digests(conn, "events", row[0], head),
        row_digests(conn, "inbox", row[0], inbox_head),
    ) == (entry["digest"], entry["inbox_digest"])


def _failing_session(opened: Opened, sessions: list[tuple[SessionKey, Any]]) -> str | None:
    """The first session whose rows the damage reaches (None: it lies elsewhere)."""
    try:
        with opened.store() as store:
            assert opened.member is not None
            conn = connect(opened.member, read_only=True)
            try:
                for key, entry in sessions:
                    try:
                        if not _session_ok(conn, store, key, entry):
                            return key_text(key)
                        log_digests(store, key)
                    except (StorageError, sqlite3.Error, ValueError):
                        return key_text(key)
            finally:
                conn.close()
    except (StorageError, sqlite3.Error, ValueError):
        return None
    return None


def _check_sessions(opened: Opened, sessions: list[tuple[SessionKey, Any]]) -> None:
    path = opened.path
    with opened.store() as store:
        assert opened.member is not None
        conn = connect(opened.member, read_only=True)
        try:
            listed = {key_text(r.key) for r in store.list_sessions()}
            if listed != {key_text(key) for key, _ in sessions}:
                raise damaged(path, 0, None, "the copy's sessions differ from the manifest's")
            for key, entry in sessions:
                name = key_text(key)
                try:
                    ok = _session_ok(conn, store, key, entry)
                    _, _, digest, inbox_digest = log_digests(store, key)
                except (StorageError, sqlite3.Error) as exc:
                    raise damaged(path, 0, name, f"its rows do not read back ({exc})") from None
                if not ok:
                    raise damaged(
                        path, 0, name, "its rows differ from the manifest's heads or digest"
                    )
                opened.digests[name] = (digest, inbox_digest)
            (tokens,) = conn.execute("SELECT count(*) FROM tokens").fetchone()
            (tombs,) = conn.execute(
                "SELECT count(*) FROM sessions WHERE deleted_at IS NOT NULL"
            ).fetchone()
            if (tokens, tombs) != (opened.manifest["tokens"], opened.manifest["tombstones"]):
                raise damaged(path, 0, None, "tokens or deletions are missing")
        finally:
            conn.close()
