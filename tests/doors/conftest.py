"""One ``agentnb serve`` (SQLite, tokens for alice and bob) with the door test agent, shared
by the door tests that do not stop or kill it; tests that do start their own."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import agentnb as nb
from tests.service.helpers import ServerProcess, issue

AGENT = "door-agent"


@dataclass
class Doors:
    """The shared server and what the tests need to reach it."""

    server: ServerProcess
    store_url: str
    alice: str
    bob: str

    @property
    def url(self) -> str:
        return self.server.url

    def heads(self, session_id: str, user: str = "alice") -> tuple[int, int]:
        """(log head, inbox head) of a session, read from the store itself."""
        store = nb.open_store(self.store_url)
        try:
            return store.heads(nb.SessionKey("default", user, AGENT, session_id))
        finally:
            store.close()

    def events(self, session_id: str, user: str = "alice") -> list[nb.Event]:
        """A session's whole log, read from the store itself."""
        store = nb.open_store(self.store_url)
        try:
            return list(store.scan(nb.SessionKey("default", user, AGENT, session_id), 0, None))
        finally:
            store.close()


@pytest.fixture(scope="session")
def doors(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Doors]:
    """``agentnb serve`` of the door test agent on SQLite, for the whole run."""
    root = tmp_path_factory.mktemp("doors")
    url = f"sqlite:///{root / 'agentnb.sqlite'}"
    alice, bob = issue(url, "alice", "tests"), issue(url, "bob", "tests")
    with ServerProcess(url, agent="tests.doors._agent:agent") as server:
        yield Doors(server, url, alice, bob)
