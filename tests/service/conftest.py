"""One ``agentnb serve`` (SQLite, tokens for alice and bob) shared by the service tests that
do not stop or kill it; tests that do start their own."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import agentnb as nb
from tests.service.helpers import ServerProcess, issue

_ids = itertools.count(1)


@dataclass
class Service:
    """The shared server and what the tests need to reach it."""

    server: ServerProcess
    store_url: str
    alice: str
    bob: str

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, token: str | None) -> httpx.Client:
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def heads(self, session_id: str, user: str = "alice") -> tuple[int, int]:
        """(log head, inbox head) of a session, read from the store itself."""
        store = nb.open_store(self.store_url)
        try:
            key = nb.SessionKey("default", user, "service-agent", session_id)
            return store.heads(key)
        finally:
            store.close()


@pytest.fixture(scope="session")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """``agentnb serve`` on SQLite, for the whole run."""
    root: Path = tmp_path_factory.mktemp("service")
    url = f"sqlite:///{root / 'agentnb.sqlite'}"
    alice, bob = issue(url, "alice", "tests"), issue(url, "bob", "tests")
    with ServerProcess(url) as server:
        yield Service(server, url, alice, bob)


@pytest.fixture
def alice(service: Service) -> Iterator[httpx.Client]:
    with service.client(service.alice) as client:
        yield client


@pytest.fixture
def bob(service: Service) -> Iterator[httpx.Client]:
    with service.client(service.bob) as client:
        yield client


@pytest.fixture
def sid(alice: httpx.Client) -> str:
    """A new session of alice's."""
    session_id = f"t{next(_ids)}"
    response = alice.post("/v1/sessions", json={"session_id": session_id})
    assert response.status_code == 201, response.text
    return session_id
