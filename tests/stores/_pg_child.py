"""Child processes for ``test_postgres``: each mode drives one ``PostgresStore`` of its own.

Run as ``python -m tests.stores._pg_child MODE URL [ARGS...]`` from the repository root. A
child prints one JSON line with what the parent checks, and exits.

``--skew SECONDS`` (before MODE) moves this process's ``time.time()`` by that much, as on a
machine whose clock is wrong: leases must not care, since the database's clock decides.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence

from agentnb.errors import AgentnbError
from agentnb.events import Event
from agentnb.ids import SessionKey


def key(session_id: str) -> SessionKey:
    return SessionKey("pg", "alice", "agent", session_id)


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[0] == "--skew":
        skew = float(args[1])
        real = time.time
        time.time = lambda: real() + skew
        args = args[2:]
    mode, url, session_id, *rest = args
    from agentnb.stores.postgres import PostgresStore

    store = PostgresStore(url)
    k = key(session_id)
    out: dict[str, object] = {}
    try:
        if mode == "append":
            # append COUNT [BATCH [PAUSE]]: COUNT events in batches after the head.
            count = int(rest[0])
            size = int(rest[1]) if len(rest) > 1 else 1
            pause = float(rest[2]) if len(rest) > 2 else 0.0
            head = store.head(k)
            written = 0
            while written < count:
                n = min(size, count - written)
                events = [Event.create("acme/item", {"n": head + i + 1}) for i in range(n)]
                store.append(k, events, expected_seq=head, batch_id=f"child-{head}")
                head += n
                written += n
                time.sleep(pause)
            out["head"] = head
        elif mode == "command":
            record, _ = store.inbox_append(
                k, Event.create("inbox/accepted", {"command_id": "c", "kind": "submit"})
            )
            out["seq"] = record.seq
        elif mode == "acquire":
            # acquire OWNER TTL: try to take the lease; report it and what current_lease says.
            try:
                lease = store.acquire_lease(k, rest[0], ttl=float(rest[1]))
                out.update(ok=True, epoch=lease.epoch, expires_in=lease.expires_at - time.time())
            except AgentnbError as exc:
                out.update(ok=False, error=type(exc).__name__)
            current = store.current_lease(k)
            out["current"] = None if current is None else [current.owner, current.epoch]
            out["clock_minus_time"] = store.clock.now() - time.time()
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    finally:
        store.close()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
