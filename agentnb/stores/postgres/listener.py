"""Waiting on a PostgreSQL store: one listener connection per store LISTENs on ``CHANNEL``,
records the heads notifications tell and wakes those logs' waiters.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from agentnb.errors import (
    InvalidInput,
    StorageError,
)
from agentnb.ids import SessionKey
from agentnb.stores.postgres.core import CHANNEL, PostgresCore
from agentnb.stores.postgres.driver import (
    conninfo_to_dict,
    psycopg,
)

__all__ = ["PostgresListening"]

log = logging.getLogger("agentnb.stores.postgres")


class PostgresListening(PostgresCore):
    """Waits woken by notifications, and the database read only when one names the session.

    One listener connection per store (a thread, started by the first wait) LISTENs and
    wakes waiters on every notification; a waiter reads the database only when a
    notification names its session, after the listener (re)connects (commits made while it
    was away had no one to hear them), and every ``poll_interval`` seconds as a safety net.
    """

    _listener: _Listener | None = None
    _unlisten: Callable[[], object] | None = None
    _listener_lock: threading.Lock

    def _on_notify(self, payload: str) -> bool:
        """Take one notification: record the head it tells, wake that log's waiters. False
        when it names a session this object never resolved (the caller wakes the waiters
        of no session in particular)."""
        kind, _, rest = payload.partition(":")
        sid_text, _, seq_text = rest.partition(":")
        try:
            sid, seq = int(sid_text), int(seq_text)
        except ValueError:
            return True  # not ours
        self._seen(self._heads if kind == "e" else self._inbox_heads, sid, seq)
        key = self._keys.get(sid)
        if kind == "i":
            self._wake_pending(key)
        if key is None:
            return False
        if kind == "e" and seq <= max(self._committing.get(sid, 0), self.head_hint(key)):
            return True  # this object's own commit: it wakes the waiters after hand-over
        # An inbox record can settle a turn too, so it wakes both logs' waiters.
        self._notify(key, inbox=False if kind == "e" else None)
        return True

    def inbox_head_hint(self, key: SessionKey) -> int:
        """Also what notifications said of other writers' commands (see the base class)."""
        sid = self._ids.get(key)
        notified = 0 if sid is None else self._inbox_heads.get(sid, 0)
        return max(super().inbox_head_hint(key), notified)

    def wait_for_head(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        *,
        stop: threading.Event | None = None,
        local: bool = False,
        settling: bool = False,
        poll: float | None = None,
    ) -> int:
        return self._wait_on(
            key, after, timeout, stop, inbox=False, local=local, settling=settling, poll=poll
        )

    def wait_for_inbox(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        *,
        stop: threading.Event | None = None,
        local: bool = False,
        poll: float | None = None,
    ) -> int:
        return self._wait_on(key, after, timeout, stop, inbox=True, local=local, poll=poll)

    def _wait_on(
        self,
        key: SessionKey,
        after: int,
        timeout: float | None,
        stop: threading.Event | None,
        *,
        inbox: bool,
        local: bool = False,
        settling: bool = False,
        poll: float | None = None,
    ) -> int:
        if not isinstance(key, SessionKey):
            raise InvalidInput(f"expected a SessionKey, got {type(key).__name__}")
        every = self._poll(poll)
        self._listen()
        heads = self._inbox_heads if inbox else self._heads
        column = "inbox_head" if inbox else "head"
        sid = -1
        checked = (-1, 0.0)  # (listener connection, time) of the last database read
        if local and key in self._ids:
            # The caller knows what this object knows: its own commits (of a session whose
            # lease it holds) and what notifications told. No first read; the poll comes.
            sid, checked = self._ids[key], (self._resyncs, time.monotonic())

        def known() -> int:
            return max(after, self.inbox_head_hint(key) if inbox else heads.get(sid, 0))

        def read() -> int:
            # The database is read first, after each (re)connect of the listener and every
            # poll_interval; a wake-up in between is a notification, for this session or not.
            nonlocal sid, checked
            resync, at = self._resyncs, time.monotonic()
            if sid >= 0 and (
                at - checked[1] < every and (checked[0] == resync or not self._listening())
            ):
                return known()
            try:
                value = self._column(key, column, timeout=1.0)
            except StorageError:
                if sid < 0:
                    raise
                checked = (checked[0], at)  # the server is away: the listener's reconnect
                return known()  # wakes this waiter to read again
            sid, checked = self._ids[key], (resync, at)
            return value

        return self._wait(
            read, after, timeout, stop, key=key, inbox=inbox, settling=settling, poll=every
        )

    def _listening(self) -> bool:
        listener = self._listener
        return listener is not None and listener.listening

    def _listen(self) -> None:
        with self._listener_lock:
            if self._listener is None and not self._closed:
                listener = self._listener = _Listener(self)
                # Stopped by close(), or as soon as a store nobody closed is collected: its
                # thread, connection and wake-up sockets go with it, not 30 s later.
                self._unlisten = weakref.finalize(self, listener.stop)
                listener.start()


_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}


class _Listener(threading.Thread):
    """One connection LISTENing on ``CHANNEL`` for a store; reconnects until stopped."""

    def __init__(self, store: PostgresListening) -> None:
        super().__init__(name="agentnb-pg-listener", daemon=True)
        self._store = weakref.ref(store)
        # TCP keepalives (unless the URL sets its own): a silent network drop ends the
        # listener's connection within about a minute instead of the system's hours.
        params = conninfo_to_dict(store._conninfo)
        for name, value in _KEEPALIVES.items():
            params.setdefault(name, value)
        self._conninfo = psycopg.conninfo.make_conninfo("", **params)
        self._stopped = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self.listening = False

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self is not threading.current_thread():
            self.join(10)
        for sock in (self._wake_r, self._wake_w):
            sock.close()

    def run(self) -> None:
        backoff = 0.05
        while not self._stopped.is_set() and self._store() is not None:
            try:
                self._serve()
                backoff = 0.05
            except (psycopg.Error, OSError) as exc:
                log.debug("listener lost its connection: %s", exc)
            self.listening = False
            self._stopped.wait(backoff)
            backoff = min(backoff * 2, 1.0)

    def _serve(self) -> None:
        with (
            psycopg.connect(self._conninfo, autocommit=True) as conn,
            selectors.DefaultSelector() as selector,
        ):
            conn.execute(f"LISTEN {CHANNEL}")
            selector.register(conn.fileno(), selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            self.listening = True
            if not self._deliver(conn, resynced=True):
                return
            while not self._stopped.is_set():
                ready = selector.select(30.0)
                if self._stopped.is_set():
                    return
                if not ready:
                    conn.execute("SELECT 1")  # a silent network drop shows here
                if not self._deliver(conn, resynced=False):
                    return

    def _deliver(self, conn: psycopg.Connection[Any], *, resynced: bool) -> bool:
        """Hand the notifications received to the store; False once the store is gone."""
        store = self._store()
        if store is None:
            return False
        unknown = False
        for note in conn.notifies(timeout=0):
            if not store._on_notify(note.payload):
                unknown = True  # a session it never resolved: no waiter of it sleeps
        if resynced:
            store._resyncs += 1  # waiters read the database again: commits made while
            # nobody listened sent notifications nobody heard
            store._wake_pending(None)
            store._notify()
        elif unknown:  # another worker's session, say: only waiters of every session care
            store._notify_unkeyed()
        return True
