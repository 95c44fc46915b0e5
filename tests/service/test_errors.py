"""The service's error mapping walks the whole error tree: every agentnb error has a status
and a problem type on the server, and the remote client raises the same class again, with
the same message and the data it carries."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import agentnb as nb
from agentnb import errors
from agentnb.client import error_of
from agentnb.server.problems import STATUS, problem_of, status_of

ALL = [
    obj
    for name in errors.__all__
    if inspect.isclass(obj := getattr(errors, name)) and issubclass(obj, errors.AgentnbError)
]

DOCUMENTED = {  # the statuses the issue names, by kind
    errors.InvalidInput: 400,
    errors.Unauthorized: 401,
    errors.SessionNotFound: 404,
    errors.SessionDeleted: 410,
    errors.IdempotencyConflict: 409,
    errors.SessionBusy: 409,
    errors.SessionArchived: 423,
    errors.QueueFull: 429,
    errors.StorageError: 503,
    errors.SubagentLimitExceeded: 409,
    errors.ToolsetUnavailable: 503,
}


def example(klass: type[errors.AgentnbError]) -> errors.AgentnbError:
    """An instance of ``klass`` with the data it can carry."""
    message = f"{klass.__name__} happened; do the next thing"
    if klass is errors.Parked:
        return klass(message, turn_id="turn_b", blocking_turn="turn_a", blocking_status="failed")
    if klass is errors.QueueFull:
        return klass(message, queue="commands", limit=64)
    if klass is errors.UncertainToolCalls:
        call = nb.ToolCallRef("call_1", "pay", {"amount": 5}, "turn_a", "run_a")
        return klass(message, [call])
    if klass is errors.AgentChanged:
        return klass(message, changes=["instructions changed"])
    if klass is errors.SubagentLimitExceeded:
        return klass(message, limit="max_subagent_depth", value=3)
    if klass is errors.ToolsetUnavailable:
        return klass(message, toolset="python -m some_mcp_server")
    return klass(message)


def data_of(exc: BaseException) -> dict[str, Any]:
    keys = (
        "turn_id",
        "blocking_turn",
        "blocking_status",
        "queue",
        "limit",
        "value",
        "calls",
        "changes",
        "toolset",
    )
    return {k: getattr(exc, k) for k in keys if hasattr(exc, k)}


@pytest.mark.parametrize("klass", ALL, ids=lambda k: k.__name__)
def test_every_error_round_trips_through_a_problem(klass: type[errors.AgentnbError]) -> None:
    """The server answers the error as a problem of its own type and status; the client
    raises the same class from it, with the same message and data."""
    exc = example(klass)
    status, body = problem_of(exc, "/v1/x")
    assert body["type"] == klass.__name__
    assert body["status"] == status == status_of(exc)
    assert body["detail"] == str(exc)
    again = error_of(body, status)
    assert type(again) is klass
    assert str(again) == str(exc)
    assert data_of(again) == data_of(exc)


@pytest.mark.parametrize("klass", ALL, ids=lambda k: k.__name__)
def test_every_error_has_a_deliberate_status(klass: type[errors.AgentnbError]) -> None:
    """Every class resolves to a listed status; only the base, corrupt data and a failing
    middleware hook (the service's own code, not the request) are 500."""
    status = status_of(example(klass))
    assert any(issubclass(klass, listed) for listed in STATUS)
    assert status != 500 or klass in (
        errors.AgentnbError,
        errors.Corrupt,
        errors.UnknownRequiredEvent,
        errors.MiddlewareFailed,
    )


def test_statuses_are_the_documented_ones() -> None:
    """The kinds the service documents answer their documented statuses."""
    for klass, status in DOCUMENTED.items():
        assert status_of(example(klass)) == status, klass.__name__


def test_timeouts_and_unknown_errors() -> None:
    """A timeout is a 504 the client raises as TimeoutError; an error that is not
    agentnb's is a 500 that says nothing of it."""
    status, body = problem_of(TimeoutError("command accepted but not carried out"))
    assert status == 504
    assert isinstance(error_of(body, status), TimeoutError)
    status, body = problem_of(ZeroDivisionError("secret internals"))
    assert status == 500
    assert "secret" not in str(body)
    assert isinstance(error_of(body, status), errors.AgentnbError)
