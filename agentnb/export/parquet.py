"""``ParquetSink``: a Hive-partitioned Parquet dataset with a manifest (the default analytics sink).

Layout under the root (a local folder or any pyarrow filesystem URI)::

    events/event_date=YYYY-MM-DD/part-<batch>.parquet  data, one file per batch and date
    turn_parts/part-<batch>-<n>.parquet                turn rollups, one row per turn overall
    _manifest/<batch>.json                              one commit record per batch, last
    _staging/<batch>/                                   files being written (never read)

Commit protocol of ``accept``: write each file into ``_staging``, flush it to disk, rename it
into place, then write the manifest record (also staged and renamed) last. A reader never
sees a half-written file: files appear whole or not at all. The manifest lists the files
each commit added and removed, and the seq ranges of each session it holds; the sink skips
events it already holds, so a re-delivered batch writes no duplicate rows. Files renamed in
before a crash cut off their manifest record are outside the manifest: readers that go by
the manifest (``files()``, ``agentnb.analysis``, ``exporters/parquet.sql``) ignore them, the
exporter delivers their events again, and ``compact()`` deletes them (on a local root).

Ownership. The sink writes only into a folder it made: an empty (or missing) root gets a
``_agentnb.json`` marker before anything else; a root with that marker or a ``_manifest``
folder (an export of an earlier agentnb) is taken up; any other non-empty folder is refused
with ``InvalidInput``. ``compact()`` deletes only files the sink can prove it wrote: files
the manifest lists as removed by a commit, and files a crashed commit left outside the
manifest, recognised by name (``part-<batch>...``) and by that commit's ``_staging/<batch>``
folder, which a commit removes only after its manifest record is in place. Any other file
under the root is left alone.

Modes. On a local root every file the sink writes is owner-only (0600) and every folder it
creates is 0700, like the store: exports hold whole conversations. (Object stores have no
modes: their access rules apply.) Exports written by earlier versions keep their modes:
``chmod -R go= DIR`` tightens them.

Turn rollups: each commit also writes the ``turn_rollup`` (``exporters/schema.sql``) of its
turns, combined with the rows earlier commits held for those turns, and replaces the files
those rows were in by copies without them. So the current rollup files hold one row per
turn, and readers define ``turn_parts`` over them: ``turns`` reads a row per turn instead of
rescanning every event.

Deleted sessions. ``forget(tombstones)`` rewrites, through the same commit protocol, every
data and rollup file that holds rows of those sessions: copies without them are staged and
renamed in, then one manifest record lists the copies as added, the old files as removed
and the sessions as ``forgotten``; only then are the old files deleted. A crash before the
record leaves the previous manifest as it was (the copies are outside it, and deleted as
a crashed commit's files); a crash after it leaves old files the manifest no longer lists,
deleted by the next ``forget`` or ``compact``, which also delete rollup files earlier
commits replaced (they may hold the sessions' turns). A forgotten key is remembered from
the manifest: its tombstone delivered again rewrites nothing, and ``accept`` drops its
events (an exporter that read them before the delete).

Why it is long: the sink's manifest commit protocol (write, record, clean up) is shared by
append, forget and compact, and must be read in one place.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from agentnb import _portable
from agentnb.errors import InvalidInput
from agentnb.events import Event
from agentnb.export.base import sink_name
from agentnb.export.columns import (
    COLUMNS,
    Batch,
    RawColumns,
    connect,
    empty_table,
    flatten,
    require_export_deps,
    to_arrow,
)
from agentnb.export.rollup import Rollups
from agentnb.ids import SessionKey, new_id
from agentnb.stores.base import RawEvent, Tombstone
from agentnb.stores.sqlite import make_private_dirs

require_export_deps()

import pyarrow as pa  # noqa: E402 - after the friendly check above
import pyarrow.fs as pafs  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

__all__ = ["ParquetSink"]

EVENTS = "events"
TURN_PARTS = "turn_parts"
MANIFEST = "_manifest"
VERSION = 3
"""Manifest record version: 2 adds the turn rollup files (``turn_parts/``), 3 the sessions
a deletion's rewrite removed (``forgotten``)."""
MAX_ROLLUP_FILES = 16
"""Beyond this many rollup files a commit merges the small ones."""
RETIRED_KEEP_S = 600.0
"""Seconds a rollup file replaced by a commit stays on disk for readers that listed it."""
ROLLUP_ROW_GROUP = 16_384
"""Rows per row group of a rollup file (sorted by turn id): the unit a commit reads."""

STAGING = "_staging"
MARKER = "_agentnb.json"
"""Written first into a root the sink takes up: the folder is an agentnb export."""
_OURS = re.compile(r"^part-(batch_[0-9a-f]+)(?:-\d+)?\.parquet$")
_BATCH = re.compile(r"^batch_[0-9a-f]+$")
"""The name of a commit's staging folder (``_staging/<batch>``)."""
FILE_COLUMNS = tuple(name for name, _ in COLUMNS if name != "event_date")
"""Columns stored in each file (``event_date`` is the Hive partition folder)."""

_KeyTuple = tuple[str, str, str, str]
_KEY = ("namespace", "user_id", "agent_id", "session_id")


def _ranges(seqs: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for s in sorted(set(seqs)):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def _merge(ranges: list[list[int]], new: list[list[int]]) -> list[list[int]]:
    out: list[list[int]] = []
    for a, b in sorted([*ranges, *new]):
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


class ParquetSink:
    """Exports events to a Parquet dataset under ``root`` (see the module docstring).

    ``root`` is a local folder (created if missing) or a URI any pyarrow filesystem
    understands (``s3://bucket/prefix``, ``gs://...``, ``file:///...``); or pass
    ``filesystem=`` with a path on it. ``name`` defaults to ``parquet:<root>``. A folder
    that holds other files and no agentnb manifest is refused (``InvalidInput``).
    ``read_only=True`` (readers such as ``agentnb.analysis``) creates and writes nothing
    and refuses a missing root.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        name: str | None = None,
        filesystem: pafs.FileSystem | None = None,
        read_only: bool = False,
    ) -> None:
        text = os.fspath(root)
        if not isinstance(text, str) or not text:
            raise InvalidInput(f"ParquetSink root must be a folder path or URI, got {root!r}")
        if filesystem is not None:
            self.fs, self.root = filesystem, text.rstrip("/")
        elif "://" in text:
            try:
                self.fs, self.root = pafs.FileSystem.from_uri(text)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
                raise InvalidInput(f"cannot open Parquet root {text!r}: {exc}") from None
            self.root = self.root.rstrip("/")
        else:
            self.fs, self.root = pafs.LocalFileSystem(), str(Path(text).expanduser().resolve())
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.read_only = read_only
        info = self.fs.get_file_info(self.root)
        if info.type == pafs.FileType.File:
            raise InvalidInput(
                f"Parquet root {self.root!r} is a file; pass a folder (it is created if missing)"
            )
        if info.type == pafs.FileType.NotFound and read_only:
            raise InvalidInput(f"there is no Parquet export at {self.root!r}; check the path")
        if not read_only:
            self._mkdir(self.root)
        self._adopt()
        self.name = (
            name
            if name is not None
            else sink_name("parquet", text if not self.local else self.root)
        )
        self._mutex = threading.Lock()
        self._con: Rollups | None = None
        self._seen: set[str] = set()
        self._held: dict[_KeyTuple, list[list[int]]] = {}
        self._added: set[str] = set()
        self._removed: set[str] = set()
        self._unrolled: set[str] = set()
        self._retired: dict[str, float] = {}
        self._forgotten: set[_KeyTuple] = set()
        self._file_sessions: dict[str, set[_KeyTuple]] = {}
        """The sessions each data file holds rows of (per the records that added it)."""

    def __repr__(self) -> str:
        return f"ParquetSink({self.root!r}, name={self.name!r})"

    def _adopt(self) -> None:
        """Take up the root if it is an agentnb export or empty (see the module docstring)."""
        if self.fs.get_file_info(self.root).type != pafs.FileType.Directory:
            return  # read_only on an object store prefix with nothing under it yet
        names = sorted(i.base_name for i in self.fs.get_file_info(pafs.FileSelector(self.root)))
        if MARKER in names:
            return
        if names and MANIFEST not in names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise InvalidInput(
                f"{self.root!r} already holds files ({shown}) and no agentnb manifest "
                f"({MANIFEST}/): agentnb exports only into an empty folder or one it made. "
                "Choose a new folder"
            )
        if not self.read_only:
            record = {"format": "agentnb-parquet", "version": VERSION}
            self._write_file(f"{self.root}/{MARKER}", json.dumps(record).encode())

    def _mkdir(self, path: str) -> None:
        if self.local:
            make_private_dirs(Path(path))
        else:
            self.fs.create_dir(path, recursive=True)

    def _write_file(self, path: str, data: bytes) -> None:
        """Write ``path`` whole (owner-only on a local root) and flush it to disk."""
        if self.local:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _portable.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            return
        with self.fs.open_output_stream(path) as out:
            out.write(data)

    def _private(self, path: str) -> None:
        if self.local:
            os.chmod(path, 0o600)

    def _check_writable(self) -> None:
        if self.read_only:
            raise InvalidInput(f"{self!r} was opened read_only; open it without to write")

    # -- the ExportSink protocol ------------------------------------------------------------

    def accept(self, events: Batch) -> None:
        """Write the events not held yet as new files, then the manifest record (durable)."""
        self._check_writable()
        with self._mutex, self._locked():
            self._refresh()
            fresh: dict[SessionKey, Sequence[Event | RawEvent]] = {}
            sessions = []
            for key, evs in events.items():
                if _tuple(key) in self._forgotten:
                    continue  # read before its delete by some exporter: dropped
                held = self._held.get(_tuple(key), [])
                if evs and _is_run(evs):
                    first, last = evs[0].seq, evs[-1].seq
                    if not _overlaps(held, first, last):
                        fresh[key] = evs  # the common case: a new, gapless stretch
                        sessions.append({"key": list(_tuple(key)), "ranges": [[first, last]]})
                        continue
                ids: set[str] = set()
                keep = []
                for e in evs:
                    if e.event_id not in ids and not _covered(held, e.seq):
                        ids.add(e.event_id)
                        keep.append(e)
                if keep:
                    fresh[key] = keep
                    ranges = _ranges([e.seq for e in keep])
                    sessions.append({"key": list(_tuple(key)), "ranges": ranges})
            if not fresh:
                return
            table = flatten(self._rollups().con, to_arrow(fresh))
            self._commit(table, sessions, removed=[])

    def forget(self, tombstones: Sequence[Tombstone]) -> None:
        """Rewrite the files holding rows of the tombstones' sessions without them, and
        record the sessions as forgotten, in one commit (see the module docstring)."""
        self._check_writable()
        if not tombstones:
            return
        with self._mutex, self._locked():
            self._refresh()
            fresh = {_tuple(t.key): t for t in tombstones if _tuple(t.key) not in self._forgotten}
            if fresh:
                self._rewrite_without(fresh)
            self._delete_stale()

    def _rewrite_without(self, gone: dict[_KeyTuple, Tombstone]) -> None:
        """Commit copies of the files holding rows of ``gone`` without those rows (and the
        sessions as forgotten), then delete the files copied."""
        import pyarrow.compute as pc

        value_set = pa.array(["\x1f".join(k) for k in gone], pa.string())

        def keep(table: pa.Table) -> pa.Table:
            joined = pc.binary_join_element_wise(*(table.column(k) for k in _KEY), "\x1f")
            return table.filter(pc.invert(pc.is_in(joined, value_set=value_set)))

        kept: list[pa.Table] = []
        removed: list[str] = []
        for rel in sorted(self._current(EVENTS)):
            holds = self._file_sessions.get(rel)
            if holds is not None and not holds & gone.keys():
                continue
            table = pq.read_table(f"{self.root}/{rel}", filesystem=self.fs)
            rest = keep(table)
            if rest.num_rows == table.num_rows:
                continue
            removed.append(rel)
            if rest.num_rows:
                day = date.fromisoformat(rel.split("/")[1].split("=", 1)[1])
                kept.append(rest.append_column("event_date", pa.repeat(pa.scalar(day), len(rest))))
        rollups: list[pa.Table] = []
        for rel in sorted(self._current(TURN_PARTS)):
            table = pq.read_table(f"{self.root}/{rel}", filesystem=self.fs)
            rest = keep(table)
            if rest.num_rows < table.num_rows:
                removed.append(rel)
                if rest.num_rows:
                    rollups.append(rest)
        rows = pa.concat_tables(kept, promote_options="default") if kept else empty_table()
        sessions = [
            {"key": [row[k] for k in _KEY], "ranges": _ranges(row["seq_list"])}
            for row in rows.group_by(list(_KEY)).aggregate([("seq", "list")]).to_pylist()
        ]
        forgotten = [
            {"key": list(k), "deleted_at": t.deleted_at, "deleted_by": t.deleted_by}
            for k, t in gone.items()
        ]
        merged = [pa.concat_tables(rollups, promote_options="default")] if rollups else []
        self._commit(rows, sessions, removed, roll_up=False, rollups=merged, forgotten=forgotten)
        # The old files hold the deleted rows: gone now, not after RETIRED_KEEP_S.
        self._delete([f"{self.root}/{rel}" for rel in removed])
        for rel in removed:
            self._retired.pop(rel, None)

    def _delete_stale(self) -> int:
        """Delete the files of this sink that no commit lists any more (see ``compact``)."""
        crashed = self._crashed_batches()
        done = 0
        for part in self._folders(EVENTS):
            names = self._parquet_files(part.path)
            done += self._delete([p for p in names if self._retired_file(p, crashed)])
        folder = f"{self.root}/{TURN_PARTS}"
        if self.fs.get_file_info(folder).type == pafs.FileType.Directory:
            names = self._parquet_files(folder)
            done += self._delete([p for p in names if self._retired_file(p, crashed)])
            self._retired.clear()
        for batch in crashed:
            with contextlib.suppress(OSError):
                self.fs.delete_dir(f"{self.root}/{STAGING}/{batch}")
        return done

    def position(self, key: SessionKey) -> int:
        """Highest seq ``s`` such that this dataset holds seqs ``1..s`` of the session."""
        with self._mutex:
            self._refresh()
            ranges = self._held.get(_tuple(key), [])
            return ranges[0][1] if ranges and ranges[0][0] <= 1 else 0

    # -- reading -----------------------------------------------------------------------------

    def files(self) -> list[str]:
        """Committed data files (full paths on ``self.fs``), per the manifest."""
        with self._mutex:
            self._refresh()
            return sorted(f"{self.root}/{rel}" for rel in self._current(EVENTS))

    def turn_part_files(self) -> list[str] | None:
        """Committed turn rollup files (one row per turn over all of them); ``None`` when a
        data file was committed without rollups (by an older agentnb): then the turns must
        be rolled up from the events."""
        with self._mutex:
            self._refresh()
            if self._current(EVENTS) & self._unrolled:
                return None
            return sorted(f"{self.root}/{rel}" for rel in self._current(TURN_PARTS))

    def _current(self, folder: str) -> set[str]:
        return {rel for rel in self._added - self._removed if rel.startswith(f"{folder}/")}

    def read_arrow(self) -> pa.Table:
        """Every committed row (duplicates from re-deliveries removed are not expected)."""
        files = self.files()
        if not files:
            return empty_table().drop_columns(["event_date"])
        tables = [pq.read_table(f, filesystem=self.fs) for f in files]
        return pa.concat_tables(tables, promote_options="default")

    # -- compaction --------------------------------------------------------------------------

    def compact(self, *, closed_before: date | None = None) -> int:
        """Merge each closed partition's files into one and delete files the sink retired.

        A partition is closed when its date is before ``closed_before`` (default: today, UTC):
        no new event can land there. Only files the sink can prove it wrote are deleted (see
        the module docstring): those the manifest lists as removed, and, on a local root,
        those a crashed commit left outside the manifest (the exporter re-delivers what the
        manifest does not hold). Rollup files that commits replaced are deleted at once
        (commits delete them ``RETIRED_KEEP_S`` after: a reader that listed them before may
        fail, so compact when nobody is reading). Returns the number of files merged or
        deleted.
        """
        self._check_writable()
        limit = closed_before or datetime.now(UTC).date()
        done = 0
        with self._mutex, self._locked():
            self._refresh()
            held = self._added - self._removed
            for part in self._folders(EVENTS):
                try:
                    day = date.fromisoformat(part.base_name.split("=", 1)[1])
                except (IndexError, ValueError):
                    continue
                listed = [p for p in self._parquet_files(part.path) if self._rel(p) in held]
                if day < limit and len(listed) >= 2:
                    self._compact_partition(listed)
                    done += len(listed)
            # In open partitions too; then the staging folders that proved them.
            done += self._delete_stale()
        return done

    def _crashed_batches(self) -> set[str]:
        """Batches whose staging folder is still there: commits a crash cut off (or that
        finished but did not clean up). Only on a local root, where ``_locked`` keeps other
        writers out, so none of them is in progress."""
        folder = f"{self.root}/{STAGING}"
        if not self.local or self.fs.get_file_info(folder).type != pafs.FileType.Directory:
            return set()
        infos = self.fs.get_file_info(pafs.FileSelector(folder))
        # Only folders named as a commit names them: anything else there is not the sink's.
        return {
            i.base_name
            for i in infos
            if i.type == pafs.FileType.Directory and _BATCH.match(i.base_name)
        }

    def _retired_file(self, path: str, crashed: set[str]) -> bool:
        """Whether ``path`` is a file of this sink that no commit lists any more."""
        rel = self._rel(path)
        if rel in self._removed:
            return True
        if rel in self._added:
            return False
        match = _OURS.match(rel.rsplit("/", 1)[-1])
        return match is not None and match.group(1) in crashed

    def _folders(self, name: str) -> list[pafs.FileInfo]:
        base = f"{self.root}/{name}"
        if self.fs.get_file_info(base).type != pafs.FileType.Directory:
            return []
        infos = self.fs.get_file_info(pafs.FileSelector(base, recursive=False))
        return [i for i in infos if i.type == pafs.FileType.Directory and "=" in i.base_name]

    def _parquet_files(self, folder: str) -> list[str]:
        infos = self.fs.get_file_info(pafs.FileSelector(folder))
        return [
            i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet")
        ]

    def _rel(self, path: str) -> str:
        return path[len(self.root) + 1 :]

    def _delete(self, paths: list[str]) -> int:
        for path in paths:
            with contextlib.suppress(FileNotFoundError, OSError):
                self.fs.delete_file(path)
        return len(paths)

    def _compact_partition(self, paths: list[str]) -> None:
        tables = [pq.read_table(p, filesystem=self.fs) for p in paths]
        merged = pa.concat_tables(tables, promote_options="default")
        con = connect()
        try:
            con.register("merged", merged)
            cols = ", ".join(FILE_COLUMNS)
            table = con.sql(
                f"SELECT {cols}, CAST(occurred_at AT TIME ZONE 'UTC' AS DATE) AS event_date "
                "FROM merged QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY seq) = 1 "
                "ORDER BY namespace, user_id, agent_id, session_id, seq"
            ).to_arrow_table()
        finally:
            con.close()
        sessions: dict[_KeyTuple, list[int]] = {}
        for row in table.select(
            ["namespace", "user_id", "agent_id", "session_id", "seq"]
        ).to_pylist():
            k = (row["namespace"], row["user_id"], row["agent_id"], row["session_id"])
            sessions.setdefault(k, []).append(row["seq"])
        records = [{"key": list(k), "ranges": _ranges(s)} for k, s in sessions.items()]
        # The same events in fewer files: the turn rollups stay as they are.
        self._commit(table, records, [self._rel(p) for p in paths], roll_up=False)
        self._delete(paths)

    # -- the commit protocol -----------------------------------------------------------------

    def _commit(
        self,
        table: pa.Table,
        sessions: list[dict[str, Any]],
        removed: list[str],
        *,
        roll_up: bool = True,
        rollups: Sequence[pa.Table] = (),
        forgotten: Sequence[dict[str, Any]] = (),
    ) -> None:
        batch_id = new_id("batch")
        staging = f"{self.root}/{STAGING}/{batch_id}"
        self._mkdir(staging)
        files: list[tuple[pa.Table, str]] = []
        dates = table.column("event_date").unique().to_pylist()
        import pyarrow.compute as pc

        rows = table.select(list(FILE_COLUMNS))
        for day in sorted(dates):
            part = rows.filter(pc.equal(table.column("event_date"), pa.scalar(day)))
            files.append((part, f"{EVENTS}/event_date={day}/part-{batch_id}.parquet"))
        removed = list(removed)
        if roll_up:
            made, replaced = self._roll_up(rows)
            rollups = [*rollups, *made]
            removed += replaced
        for i, rollup in enumerate(rollups):
            files.append((rollup.sort_by("turn_id"), f"{TURN_PARTS}/part-{batch_id}-{i}.parquet"))
        added: list[str] = []
        for i, (data, rel) in enumerate(files):
            tmp = f"{staging}/{i}.parquet"
            groups = ROLLUP_ROW_GROUP if rel.startswith(TURN_PARTS) else None
            pq.write_table(data, tmp, filesystem=self.fs, row_group_size=groups)
            self._private(tmp)  # inside the owner-only staging folder until then
            self._sync(tmp)
            folder = f"{self.root}/{rel.rsplit('/', 1)[0]}"
            self._mkdir(folder)
            self.fs.move(tmp, f"{self.root}/{rel}")
            self._sync_dir(folder)
            added.append(rel)
        record = {
            "version": VERSION,
            "batch_id": batch_id,
            "created_at": datetime.now(UTC).isoformat(),
            "sink": self.name,
            "rows": table.num_rows,
            "added": added,
            "removed": removed,
            "sessions": sessions,
        }
        if forgotten:
            record["forgotten"] = list(forgotten)
        tmp = f"{staging}/manifest.json"
        self._write_file(tmp, json.dumps(record, sort_keys=True).encode())
        self._mkdir(f"{self.root}/{MANIFEST}")
        self.fs.move(tmp, f"{self.root}/{MANIFEST}/{batch_id}.json")
        self._sync_dir(f"{self.root}/{MANIFEST}")
        with contextlib.suppress(OSError):
            self.fs.delete_dir(staging)
        self._apply(f"{batch_id}.json", record)
        self._sweep()

    def _rollups(self) -> Rollups:
        """The sink's in-memory DuckDB (flattening, rollups); used under the mutex."""
        if self._con is None:
            self._con = Rollups()
        return self._con

    def _roll_up(self, rows: pa.Table) -> tuple[list[pa.Table], list[str]]:
        """Rollup files to add and committed ones they replace, for new ``rows``.

        Keeps one row per turn over all committed rollup files: the turns of ``rows`` get
        their rows combined with the rows committed for them before, and the files those
        came from are rewritten without them. Turn ids grow with time and rollup files are
        sorted by them in small row groups, so finding a batch's turns reads a few row
        groups. Past ``MAX_ROLLUP_FILES`` files, the small ones are merged (rows of distinct
        turns: a concatenation) and a file holding most rows is left alone.
        """
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        rollups = self._rollups()
        fresh = rollups.of(rows)
        if not fresh.num_rows:
            return [], []
        names = fresh.schema.names
        older: list[pa.Table] = []
        kept: list[pa.Table] = []
        replaced: list[str] = []
        sizes: dict[str, int] = {}
        current = sorted(self._current(TURN_PARTS))
        if current:
            paths = [f"{self.root}/{rel}" for rel in current]
            dataset = ds.dataset(paths, filesystem=self.fs, format="parquet")
            turns = fresh.column("turn_id")
            bounds = pc.min_max(turns)
            field = pc.field("turn_id")
            mine = (field >= bounds["min"]) & (field <= bounds["max"]) & field.isin(turns)
            for fragment in dataset.get_fragments():
                rel = self._rel(fragment.path)
                hits = fragment.to_table(filter=mine)
                if not hits.num_rows:
                    sizes[rel] = fragment.count_rows()
                    continue
                older.append(hits.select(names))
                replaced.append(rel)
                rest = fragment.to_table(filter=~field.isin(turns))
                if rest.num_rows:
                    kept.append(rest.select(names))
        out = [*kept, rollups.combine([*older, fresh]) if older else fresh]
        if len(sizes) + len(out) <= MAX_ROLLUP_FILES:
            return out, replaced
        total = sum(sizes.values()) + sum(t.num_rows for t in out)
        big = max(sizes, key=lambda rel: sizes[rel], default="")
        merge = [rel for rel in sizes if rel != big or sizes[big] * 2 <= total]
        tables = [
            pq.read_table(f"{self.root}/{rel}", filesystem=self.fs).select(names) for rel in merge
        ]
        return [pa.concat_tables([*tables, *out])], replaced + merge

    def _refresh(self) -> None:
        """Read manifest records written since the last look (by any process)."""
        folder = f"{self.root}/{MANIFEST}"
        if self.fs.get_file_info(folder).type != pafs.FileType.Directory:
            return
        for info in self.fs.get_file_info(pafs.FileSelector(folder)):
            name = info.base_name
            if not name.endswith(".json") or name in self._seen:
                continue
            with self.fs.open_input_stream(info.path) as src:
                record = json.loads(src.read().decode())
            self._apply(name, record)

    def _sweep(self) -> None:
        """Delete rollup files that commits replaced more than ``RETIRED_KEEP_S`` ago.

        They stay that long so a reader that listed them just before can still read them."""
        now = datetime.now(UTC).timestamp()
        for rel, when in list(self._retired.items()):
            if now - when > RETIRED_KEEP_S:
                self._delete([f"{self.root}/{rel}"])
                del self._retired[rel]

    def _apply(self, name: str, record: dict[str, Any]) -> None:
        # Records are read in any order: a forgotten key stays forgotten whichever record
        # about it comes first.
        self._seen.add(name)
        for item in record.get("forgotten", []):
            gone: _KeyTuple = tuple(item["key"])
            self._forgotten.add(gone)
            self._held.pop(gone, None)
        keys = {tuple(item["key"]) for item in record.get("sessions", [])}
        for rel in record.get("added", []):
            if rel.startswith(f"{EVENTS}/"):
                self._file_sessions.setdefault(rel, set()).update(keys)
        when = datetime.fromisoformat(record.get("created_at", "1970-01-01T00:00:00+00:00"))
        for rel in record.get("removed", []):
            if rel.startswith(f"{TURN_PARTS}/"):
                self._retired[rel] = when.timestamp()
        self._added.update(record.get("added", []))
        if record.get("version", 1) < 2 and record.get("rows"):
            self._unrolled.update(record.get("added", []))
        self._removed.update(record.get("removed", []))
        for item in record.get("sessions", []):
            k: _KeyTuple = tuple(item["key"])
            if k not in self._forgotten:
                self._held[k] = _merge(self._held.get(k, []), item["ranges"])

    def _sync(self, path: str) -> None:
        if self.local:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _sync_dir(self, path: str) -> None:
        if self.local:
            self._sync(path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise writers of other processes on a local root (object stores: see docs)."""
        if not self.local:
            yield
            return
        fd = os.open(os.path.join(self.root, "_lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            with _portable.locked_file(fd):
                yield
        finally:
            os.close(fd)


def _tuple(key: SessionKey) -> _KeyTuple:
    return (key.namespace, key.user_id, key.agent_id, key.session_id)


def _covered(ranges: list[list[int]], seq: int) -> bool:
    return any(a <= seq <= b for a, b in ranges)


def _overlaps(ranges: list[list[int]], low: int, high: int) -> bool:
    return any(a <= high and low <= b for a, b in ranges)


def _is_run(events: Sequence[Event | RawEvent]) -> bool:
    """Whether the events are one increasing stretch of seqs with no repeats."""
    if isinstance(events, RawColumns):
        return events.is_run()
    first = events[0].seq
    return [e.seq for e in events] == list(range(first, first + len(events)))
