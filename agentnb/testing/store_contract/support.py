"""What every part of the store contract stands on: the fixtures, the events it writes and
the helpers its tests share."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from agentnb.events import (
    Event,
)
from agentnb.ids import Clock, FakeClock, SessionKey
from agentnb.stores._rows import blob_digest
from agentnb.stores.base import (
    SessionStore,
)

__all__ = ["ContractBase", "command", "run_threads", "session_key", "step"]

DIGEST_A = "a" * 64
DIGEST_B = "0123456789abcdef" * 4

GUARD = 30.0
"""Seconds a wait-based test allows before it declares a hang (a failure guard only)."""


def session_key(
    session_id: str = "s1",
    *,
    namespace: str = "default",
    user_id: str = "alice",
    agent_id: str = "agent",
) -> SessionKey:
    """A session key with test defaults."""
    return SessionKey(namespace, user_id, agent_id, session_id)


def step(i: int = 1) -> Event:
    """A small, valid execution event."""
    return Event.create("step/start", {"step_id": f"step_{i}", "iteration": i})


def command(text: str = "hello") -> Event:
    """A small, valid inbox event."""
    return Event.create(
        "inbox/accepted",
        {"command_id": f"cmd_{text}", "kind": "submit", "input": text},
    )


def text_digest(text: str) -> str:
    """The digest a long text of a large payload is stored under (its JSON text's)."""
    return blob_digest(orjson.dumps(text))


def run_threads(targets: list[Callable[[], None]], timeout: float = GUARD) -> None:
    """Run each target in its own thread; re-raise the first failure in the caller."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(targets))

    def wrap(target: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                start.wait(timeout)
                target()
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread below
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t), daemon=True) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]


class ContractBase:
    """The fixtures of the contract; subclasses provide ``make_store``."""

    # -- fixtures -------------------------------------------------------------------------------

    def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        """A new, empty store of the backend under test that uses ``clock``."""
        raise NotImplementedError("subclasses of StoreContract implement make_store()")

    def make_peer(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore | None:
        """Another store object over the data ``make_store`` made (what another process
        sees), or None for a backend whose data lives in one object (the default)."""
        return None

    def rows_of(self, tmp_path: Path, key: SessionKey) -> dict[str, int] | None:
        """Rows each table still holds for ``key`` (deleted or not), read around the store;
        None for a backend that cannot say (the default)."""
        return None

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def store(self, tmp_path: Path, clock: FakeClock) -> Iterator[SessionStore]:
        store = self.make_store(tmp_path, clock=clock)
        try:
            yield store
        finally:
            store.close()

    @pytest.fixture
    def key(self, store: SessionStore) -> SessionKey:
        key = session_key()
        store.create_session(key)
        return key

    @staticmethod
    def fill(store: SessionStore, key: SessionKey, n: int, *, batch: int = 500) -> list[Event]:
        """Append ``n`` step events in batches after the current head."""
        out: list[Event] = []
        head = store.head(key)
        while len(out) < n:
            size = min(batch, n - len(out))
            events = [step(head + i + 1) for i in range(size)]
            out += store.append(key, events, expected_seq=head, batch_id=f"fill-{head}")
            head += size
        return out

    def _sessions(self, store: SessionStore, clock: FakeClock, n: int) -> list[SessionKey]:
        keys = []
        for i in range(n):
            clock.advance(1)
            keys.append(session_key(f"s{i}", user_id="alice" if i % 2 else "bob"))
            store.create_session(keys[-1])
        return keys

    @staticmethod
    def _claims(store: SessionStore) -> Any:
        if not hasattr(store, "claim_pending"):
            pytest.skip("this backend has no pending-work index (one process executes)")
        return store


def require_text(data: Any) -> Any:
    if not isinstance(data.get("text"), str):
        raise ValueError("text must be a string")
    return data
