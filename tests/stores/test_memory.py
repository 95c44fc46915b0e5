"""The in-process store passes the store contract."""

from __future__ import annotations

from pathlib import Path

from agentnb.ids import Clock
from agentnb.stores import MemoryStore, SessionStore
from agentnb.testing.store_contract import StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        return MemoryStore(clock=clock)
