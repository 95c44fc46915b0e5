"""Scenario tests through the service: the same tests, with sessions that are
``RemoteSession`` objects of an in-process ``agentnb.server`` app serving the test's runtime.

The ``door`` fixture (``tests/conftest.py``) is ``local`` unless parametrized. A test module
opts in by overriding ``make_runtime`` with ``through_doors`` and
parametrizing ``door`` over ``DOORS`` (``local`` is the runtime as it is)::

    from tests.remote import DOORS, through_doors

    @pytest.fixture
    def make_runtime(make_runtime, door, request):
        return through_doors(make_runtime, request)

    @pytest.mark.parametrize("door", DOORS, indirect=True)
    class TestSomething: ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import agentnb as nb
from agentnb import tokens

DOORS = ["local", "remote"]


class RemoteDoor:
    """A runtime whose ``session()`` / ``open()`` go through the service, each user with a
    token of its own. Everything else (``store``, ...) is the runtime's; closing it stops
    the server too."""

    def __init__(self, runtime: nb.Runtime) -> None:
        from tests.service.helpers import ServerThread

        self.runtime = runtime
        self.server = ServerThread(runtime).start()
        self.remotes: dict[str, Any] = {}

    def _remote(self, user_id: str) -> Any:
        remote = self.remotes.get(user_id)
        if remote is None:
            token, _ = tokens.issue(self.runtime.store, user_id)
            remote = self.remotes[user_id] = nb.connect(self.server.url, token)
        return remote

    def session(self, session_id: str, user_id: str = "default") -> Any:
        return self._remote(user_id).session(session_id)

    def open(self, session_id: str, user_id: str = "default") -> Any:
        return self._remote(user_id).open(session_id)

    def close(self) -> None:
        for remote in self.remotes.values():
            remote.close()
        self.server.stop()
        self.runtime.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)


def through_doors(
    make_runtime: Callable[..., nb.Runtime], request: pytest.FixtureRequest
) -> Callable[..., Any]:
    """``make_runtime`` reaching sessions through the test's ``door`` (``tests/conftest.py``
    keeps the remote door to the SQLite backend: both doors share the stores)."""
    door = request.getfixturevalue("door")
    doors: list[RemoteDoor] = []

    def make(*args: Any, **kwargs: Any) -> Any:
        runtime = make_runtime(*args, **kwargs)
        if door == "local":
            return runtime
        wrapped = RemoteDoor(runtime)
        doors.append(wrapped)
        return wrapped

    def close() -> None:
        for wrapped in doors:
            wrapped.close()

    request.addfinalizer(close)
    return make
