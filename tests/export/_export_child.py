"""Child process for the crash tests: drains a store into a sink and stops where told.

``python _export_child.py STORE_URL parquet|duckdb DEST MARKER MODE``

MODE ``after-accept``: after the first ``accept`` returns (the sink holds the batch durably)
write MARKER and sleep, so the parent can kill -9 before the watermark moves.
MODE ``mid-commit``: drain in batches of 20; once the third turn rollup file of the run has
been renamed into the dataset (its manifest record not yet written), write MARKER and sleep.
MODE ``writer``: accept many small batches of new events in a loop (for concurrent readers).
MODE ``mid-forget``: drain (the events are exported already; the store holds a tombstone);
once the deletion's first rewritten data file has been renamed into the dataset (its
manifest record not yet written), write MARKER and sleep.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from agentnb.events import Event
from agentnb.export import DuckDBSink, Exporter, ParquetSink
from agentnb.ids import SessionKey
from agentnb.stores import open_store


class Stopping:
    def __init__(self, sink: Any, marker: Path) -> None:
        self.sink, self.marker, self.name = sink, marker, sink.name

    def accept(self, events: Any) -> None:
        self.sink.accept(events)
        self.marker.write_text("accepted")
        time.sleep(60)

    def position(self, key: SessionKey) -> int:
        return int(self.sink.position(key))


def main() -> None:
    url, kind, dest, marker, mode = sys.argv[1:6]
    sink: Any = ParquetSink(dest) if kind == "parquet" else DuckDBSink(dest)
    if mode == "after-accept":
        store = open_store(url)
        Exporter(store, Stopping(sink, Path(marker)), batch_size=50).drain()
        return
    if mode == "mid-commit":
        renamed = 0
        real = ParquetSink._sync_dir

        def sync_dir(self: ParquetSink, path: str) -> None:
            nonlocal renamed
            real(self, path)
            if path.endswith("/turn_parts"):
                renamed += 1
                if renamed == 3:
                    Path(marker).write_text("renamed")
                    time.sleep(60)

        ParquetSink._sync_dir = sync_dir  # type: ignore[method-assign]
        Exporter(open_store(url), sink, batch_size=20).drain()
        return
    if mode == "mid-forget":
        real_sync = ParquetSink._sync_dir

        def sync_after_rename(self: ParquetSink, path: str) -> None:
            real_sync(self, path)
            if "/events/event_date=" in path:
                Path(marker).write_text("renamed")
                time.sleep(60)

        ParquetSink._sync_dir = sync_after_rename  # type: ignore[method-assign]
        Exporter(open_store(url), sink).drain()
        return
    key = SessionKey("n", "writer", "a", "s")
    seq = 0
    Path(marker).write_text("started")
    for _ in range(int(sys.argv[6])):
        batch = []
        for _ in range(200):
            seq += 1
            batch.append(Event.create("acme/tick", {"n": seq, "pad": "x" * 200}).with_seq(seq))
        sink.accept({key: batch})


if __name__ == "__main__":
    main()
