from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb

# The browser test's notebook is opened in JupyterLab by test_browser.py; nbval must not run
# it on its own (it would leave a chat.sqlite beside it).
collect_ignore_glob = ["browser/*.ipynb"]


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every chat scenario runs on each backend."""
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'agentnb.sqlite'}"


@pytest.fixture
def make_runtime(store_url: str) -> Iterator[Callable[..., nb.Runtime]]:
    """Build runtimes that are closed after the test (shared store for memory://)."""
    runtimes: list[nb.Runtime] = []
    shared: dict[str, nb.SessionStore] = {}

    def make(model: nb.Model, tools: list[Any] | None = None, **kwargs: Any) -> nb.Runtime:
        store: Any = store_url
        if store_url == "memory://":
            store = shared.setdefault("s", nb.MemoryStore())
        agent = nb.Agent(
            name="Test",
            agent_id="test-agent",
            model=model,
            tools=tools or [],
            instructions="Be brief.",
        )
        runtime = nb.Runtime(agent, store=store, lease_ttl=kwargs.pop("lease_ttl", 5.0), **kwargs)
        runtimes.append(runtime)
        return runtime

    yield make
    for runtime in runtimes:
        runtime.close()
