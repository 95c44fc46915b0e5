"""The PostgreSQL store passes the store contract, plus what is special to a shared server."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentnb.ids import Clock
from agentnb.stores import SessionStore
from agentnb.testing.store_contract import StoreContract


class TestPostgresStore(StoreContract):
    @pytest.fixture(autouse=True)
    def _database(self, pg_url: str) -> None:
        self.url = pg_url

    def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
        from agentnb.stores.postgres import PostgresStore

        return PostgresStore(self.url, clock=clock)
