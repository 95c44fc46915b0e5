"""Scenario tests through the service: the same tests, with sessions that are
``RemoteSession`` objects of an in-process ``agentnb.server`` app serving the test's runtime.

A test module opts in by overriding ``make_runtime`` with ``through_doors`` and
parametrizing ``door`` over ``DOORS`` (``local`` is the runtime as it is)::

    from tests.remote import DOORS, door, through_doors

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

DOORS = ["local", "remote"]


class RemoteDoor:
    """A runtime whose ``session()`` / ``open()`` go through the service (HTTP, auth off).

    Everything else (``store``, ``close`` ...) is the runtime's; closing stops the server.
    """

    def __init__(self, runtime: nb.Runtime) -> None:
        from tests.service.helpers import ServerThread

        self.runtime = runtime
        self.server = ServerThread(runtime, auth=False).start()
        self.remote = nb.connect(self.server.url)

    def session(self, session_id: str, user_id: str = "default") -> Any:
        return self.remote.session(session_id, user_id=user_id)

    def open(self, session_id: str, user_id: str = "default") -> Any:
        return self.remote.open(session_id, user_id=user_id)

    def close(self) -> None:
        self.remote.close()
        self.server.stop()
        self.runtime.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.runtime, name)


@pytest.fixture
def door(request: pytest.FixtureRequest) -> str:
    """How sessions are reached: ``local`` (the Session) or ``remote`` (the service)."""
    return str(getattr(request, "param", "local"))


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
