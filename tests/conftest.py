"""Shared fixtures: runtimes on every store backend, closed after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb import events

# Every payload the runtime builds without validation is validated here as well, and must
# come out as its model would store it (``Event.built``).
events.CHECK_BUILT = True


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every runtime, chat and widget scenario runs on each backend."""
    if request.param == "memory":
        return "memory://"
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_store_url")
        return url
    return f"sqlite:///{tmp_path / 'agentnb.sqlite'}"


@pytest.fixture
def make_runtime(store_url: str) -> Iterator[Callable[..., nb.Runtime]]:
    """Build runtimes that are closed after the test (shared store for memory://)."""
    runtimes: list[nb.Runtime] = []
    shared: dict[str, nb.SessionStore] = {}

    def make(
        model: nb.Model, tools: list[Any] | None = None, *, store: Any = None, **kwargs: Any
    ) -> nb.Runtime:
        if store is None:
            if store_url == "memory://":
                store = shared.setdefault("s", nb.MemoryStore())
            else:
                store = store_url
        agent = nb.Agent(
            name="Test",
            agent_id="test-agent",
            model=model,
            tools=tools or [],
            instructions=kwargs.pop("instructions", "Be brief."),
            max_steps=kwargs.pop("max_steps", 25),
            wait_inline=kwargs.pop("wait_inline", 0.0),
        )
        runtime = nb.Runtime(agent, store=store, lease_ttl=kwargs.pop("lease_ttl", 5.0), **kwargs)
        runtimes.append(runtime)
        return runtime

    yield make
    for runtime in runtimes:
        runtime.close()


@pytest.fixture
def door(request: pytest.FixtureRequest) -> str:
    """How scenario tests reach sessions: ``local`` (the Session), or ``remote`` where a test
    parametrizes it (a RemoteSession of the service, ``tests/remote.py``)."""
    return str(getattr(request, "param", "local"))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Any]:
    """One throwaway PostgreSQL cluster per test run (``tests/pg.py``); skipped without a
    server, except under CI=true, where that fails."""
    from tests.pg import cluster_or_skip

    cluster = cluster_or_skip()
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture
def pg_url(pg_cluster: Any) -> Iterator[str]:
    """The URL of a fresh, empty database in that cluster (one per test, dropped after)."""
    url: str = pg_cluster.database()
    yield url
    pg_cluster.drop(url)


@pytest.fixture(scope="session")
def pg_store_template(pg_cluster: Any) -> str:
    """A database holding an empty agentnb store of the current schema, to clone."""
    from agentnb.stores.postgres import PostgresStore  # the postgres extra

    def fill(url: str) -> None:
        PostgresStore(url).close()

    name: str = pg_cluster.template("agentnb_store", fill)
    return name


@pytest.fixture
def pg_store_url(pg_cluster: Any, pg_store_template: str) -> Iterator[str]:
    """The URL of a fresh database that already holds an empty agentnb store (one per
    test): what scenario tests need, without migrating the schema each time."""
    url: str = pg_cluster.database(template=pg_store_template)
    yield url
    pg_cluster.drop(url)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scenario tests parametrized over the remote door (``tests.remote``) run it on the
    SQLite backend only: the other backends' remote variants are deselected, not skipped."""
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        remote_elsewhere = params.get("door") == "remote" and params.get("store_url") not in (
            None,
            "sqlite",
        )
        (drop if remote_elsewhere else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
