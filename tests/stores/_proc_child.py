"""Child processes for ``test_sqlite_processes``: each mode drives one real SQLite store.

Run as ``python -m tests.stores._proc_child MODE STORE_PATH [ARGS...]`` from the repository
root. A child talks to the parent in lines: it prints ``READY`` once it is set up, waits for
``GO`` on stdin where the test needs a common start, and prints one line per fact the parent
checks. Every child exits by itself when its stdin closes or its deadline passes, so a parent
that dies never leaves it running for long.
"""

from __future__ import annotations

import hashlib
import random
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from agentnb.errors import Fenced, IdempotencyConflict, SessionDeleted
from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.log import Inbox
from agentnb.stores.base import Lease
from agentnb.stores.sqlite import SQLiteStore

KEY = SessionKey("proc", "user", "agent", "session")
ITEM = "proc/item"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINE = 60.0
"""Seconds after which a child that was never stopped gives up on its own."""


def batch_size(k: int) -> int:
    """Size of crash-trial batch ``k`` (1..20, the same in every process)."""
    return random.Random(k).randint(1, 20)


def batch_payloads(k: int) -> list[dict[str, object]]:
    """The payloads of crash-trial batch ``k``; each names its batch, position and size."""
    n = batch_size(k)
    return [
        {
            "batch": k,
            "i": i,
            "n": n,
            "text": hashlib.sha256(f"{k}:{i}".encode()).hexdigest()[: 8 + (k * 7 + i) % 57],
        }
        for i in range(n)
    ]


def batch_time(k: int) -> datetime:
    """When crash-trial batch ``k`` occurred (fixed, so its content is reproducible)."""
    return EPOCH + timedelta(milliseconds=k)


def batch_events(k: int) -> list[Event]:
    """Crash-trial batch ``k`` as events whose whole content is derived from ``k``.

    Being deterministic, a batch committed by a killed child can be replayed by another
    process with the same batch id (the lost-acknowledgement retry).
    """
    at = batch_time(k)
    return [
        Event.create(ITEM, p, event_id=f"evt_b{k}_{p['i']}", required=False, occurred_at=at)
        for p in batch_payloads(k)
    ]


def say(*words: object) -> None:
    print(*words, flush=True)


def wait_for(word: str) -> list[str]:
    """Block until the parent sends ``word``; returns the rest of its line.

    Exits quietly if the parent went away (stdin closed) or sent something else.
    """
    parts = sys.stdin.readline().split()
    if parts[:1] != [word]:
        sys.exit(3)
    return parts[1:]


def digest(events: Sequence[Event]) -> str:
    h = hashlib.sha256()
    for event in events:
        h.update(f"{event.seq}:{event.content_key()}\n".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------------------------


def crash(path: str) -> None:
    """Commit batches ``b{k}`` forever from the head on, printing ``ACK k first last`` each."""
    say("READY")
    wait_for("GO")
    store = SQLiteStore(path, synchronous="FULL")
    store.create_session(KEY)
    head = store.head(KEY)
    k = 0
    if head:
        (last,) = store.read_after(KEY, head - 1, 1)
        k = int(last.payload["batch"]) + 1
    stop = time.monotonic() + DEADLINE
    while time.monotonic() < stop:
        committed = store.append(KEY, batch_events(k), expected_seq=head, batch_id=f"b{k}")
        head = committed[-1].seq
        say("ACK", k, committed[0].seq, head)
        k += 1


def commit_and_wait(path: str) -> None:
    """Create the session, commit one batch, print ``ACK first last``, then wait (to be killed)."""
    store = SQLiteStore(path, synchronous="FULL")
    store.create_session(KEY)
    committed = store.append(KEY, batch_events(0), expected_seq=0, batch_id="b0")
    say("ACK", committed[0].seq, committed[-1].seq)
    wait_for("EXIT")
    store.close()


def inbox(path: str, writer: str, count: str, every: str) -> None:
    """Accept ``count`` commands at GO, then re-send every ``every``-th under the same key."""
    store = SQLiteStore(path)
    box = Inbox(store, KEY)
    box.head()  # connect before the start line so all writers start together
    say("READY")
    wait_for("GO")
    for j in range(int(count)):
        record, created = box.accept(
            "submit", key=f"p{writer}-c{j}", input=f"task {writer}/{j}", turn_id=f"turn_{j}_a"
        )
        say("SENT", f"p{writer}-c{j}", record.seq, int(created), record.event_id, record.turn_id)
    for j in range(0, int(count), int(every)):
        # A retried submit allocates a new turn id; the meaning (kind, input) is the same.
        try:
            record, created = box.accept(
                "submit", key=f"p{writer}-c{j}", input=f"task {writer}/{j}", turn_id=f"turn_{j}_b"
            )
        except IdempotencyConflict:
            say("CONFLICT", f"p{writer}-c{j}")
            continue
        say("RESENT", f"p{writer}-c{j}", record.seq, int(created), record.event_id, record.turn_id)
    store.close()
    say("DONE")


def write(path: str, total: str, seed: str) -> None:
    """At GO, append ``total`` events in small batches with short pauses between them."""
    store = SQLiteStore(path)
    head = store.head(KEY)
    say("READY")
    wait_for("GO")
    rng = random.Random(int(seed))
    end = head + int(total)
    while head < end:
        n = min(rng.randint(1, 7), end - head)
        events = [Event.create(ITEM, {"n": head + i + 1}, required=False) for i in range(n)]
        head = store.append(KEY, events, expected_seq=head, batch_id=f"w{head}")[-1].seq
        time.sleep(rng.uniform(0, 0.015))
    store.close()
    say("DONE", head)


def lease(path: str, owner: str, ttl: str, renewals: str) -> None:
    """Take the lease, renew it, commit under it, then obey COMMIT / RENEW / EXIT lines."""
    store = SQLiteStore(path)
    held = store.acquire_lease(KEY, owner, float(ttl))
    say("LEASE", held.owner, held.epoch, repr(held.expires_at))
    for _ in range(int(renewals)):
        time.sleep(0.2)
        held = store.renew_lease(held, float(ttl))
        say("RENEWED", repr(held.expires_at))
    head = store.head(KEY)
    done = store.append(
        KEY,
        [Event.create(ITEM, {"by": owner}, required=False)],
        expected_seq=head,
        batch_id=f"{owner}-live",
        fence=held,
    )
    say("COMMITTED", done[0].seq)
    say("IDLE")
    for line in sys.stdin:
        command = line.strip()
        if command == "EXIT":
            break
        try:
            if command == "COMMIT":
                event = Event.create(ITEM, {"by": owner, "stale": True}, required=False)
                head = store.head(KEY)
                store.append(KEY, [event], expected_seq=head, batch_id=f"{owner}-stale", fence=held)
                say("COMMITTED", head + 1)
            elif command == "RENEW":
                held = store.renew_lease(held, float(ttl))
                say("RENEWED", repr(held.expires_at))
        except Fenced:
            say("FENCED", command)
    store.close()


def read(path: str, through: str, page: str) -> None:
    """Read ``(0, through]`` page by page, pausing for NEXT after each; then re-read it."""
    store = SQLiteStore(path)
    store.head(KEY)
    say("READY")
    wait_for("GO")
    end, limit = int(through), int(page)
    seen: list[Event] = []
    while not seen or seen[-1].seq < end:
        pos = seen[-1].seq if seen else 0
        seen += store.read_after(KEY, pos, min(limit, end - pos))
        say("PAGE", seen[-1].seq)
        time.sleep(0.01)
        wait_for("NEXT")
    again = list(store.scan(KEY, 0, end))
    say("DONE", len(seen), digest(seen), digest(again), store.head(KEY))
    store.close()


def first_open(prefix: str, writer: str, count: str) -> None:
    """Open ``count`` new store files, each at a start time shared with the other writers."""
    say("READY")
    start, step = map(float, wait_for("GO"))
    for j in range(int(count)):
        at = start + j * step
        time.sleep(max(0.0, at - time.time() - 0.005))
        while time.time() < at:  # spin the last moment so the writers really collide
            pass
        try:
            store = SQLiteStore(f"{prefix}{j}.sqlite")
            try:
                store.create_session(KEY)
                Inbox(store, KEY).accept("submit", key=f"w{writer}", input="hello")
            finally:
                store.close()
        except Exception as exc:  # reported to the parent, which fails the test with it
            say("ERR", j, type(exc).__name__, str(exc).replace("\n", " "))
        else:
            say("OK", j)


def hold(path: str) -> None:
    """Hold one open read transaction on the file, reporting what it sees before and after."""
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        conn.execute("BEGIN")
        (before,) = conn.execute("SELECT count(*) FROM events").fetchone()
        say("HOLDING", before)
        wait_for("CHECK")
        (after,) = conn.execute("SELECT count(*) FROM events").fetchone()
        conn.execute("COMMIT")
        say("SAW", after)
    finally:
        conn.close()


def keep_writing(path: str) -> None:
    """At GO, write every kind of row (commits, commands, snapshots, watermarks, leases)
    round after round, printing ``WROTE 20`` after twenty rounds, until the session is
    deleted; then try each kind once more, printing ``REFUSED kind`` (or ``WROTE-AFTER``)."""
    store = SQLiteStore(path)
    store.head(KEY)  # the row id is cached from here on, as in any long-lived process
    say("READY")
    wait_for("GO")
    held = None
    rounds = 0
    stop = time.monotonic() + DEADLINE
    kinds = {
        "append": lambda: store.append(
            KEY, [Event.create(ITEM, {"n": rounds}, required=False)],
            expected_seq=store.head(KEY), batch_id=f"k{rounds}",
        ),
        "inbox": lambda: Inbox(store, KEY).accept("inject", input=f"note {rounds}"),
        "snapshot": lambda: store.put_snapshot(KEY, "fold", store.head(KEY), b"state"),
        "watermark": lambda: store.advance_watermark(KEY, "sink", store.head(KEY)),
        "lease": lambda: store.acquire_lease(KEY, "child", 30),
        "renew": lambda: store.renew_lease(held, 30) if held else None,
        "release": lambda: store.release_lease(held) if held else None,
    }  # fmt: skip
    try:
        while time.monotonic() < stop:
            for name, call in kinds.items():
                result = call()
                if name == "lease":
                    held = result
                elif name == "release":
                    held = None
            rounds += 1
            if rounds == 20:
                say("WROTE", rounds)
    except SessionDeleted:
        pass
    if held is None:  # the renew/release checks need a lease this process took before
        held = Lease(KEY, "child", 1, 0.0)
    for name, call in [
        *kinds.items(),
        ("head", lambda: store.head(KEY)),
        ("update", lambda: store.update_session(KEY, title="back")),
        ("archive", lambda: store.set_archived(KEY)),
    ]:
        try:
            call()
        except SessionDeleted:
            say("REFUSED", name)
        else:
            say("WROTE-AFTER", name)
    store.close()
    say("DONE", rounds)


MODES = {
    "crash": crash,
    "commit_and_wait": commit_and_wait,
    "inbox": inbox,
    "write": write,
    "lease": lease,
    "read": read,
    "hold": hold,
    "first_open": first_open,
    "keep_writing": keep_writing,
}


if __name__ == "__main__":
    MODES[sys.argv[1]](*sys.argv[2:])
