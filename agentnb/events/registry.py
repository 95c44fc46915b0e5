"""Application event types: the registry of ``vendor/name`` types and the readers' rules.

``register_event_type`` records an application type's codec (a model or a validating
function), whether it is ``required`` to rebuild state, and its reducer; ``check_readable``
and ``check_writable`` are the rules a store applies to every type it reads or commits.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from agentnb.errors import InvalidInput, UnknownRequiredEvent
from agentnb.events.payloads import BUILTIN_TYPES, PAYLOADS, Payload

__all__ = [
    "Reducer",
    "app_type",
    "check_readable",
    "check_writable",
    "payload_model",
    "reducers",
    "register_event_type",
    "unregister_event_type",
]

_RESERVED_PREFIXES = frozenset(t.split("/")[0] for t in BUILTIN_TYPES)
_APP_TYPE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}/[a-z0-9][a-z0-9_.-]{0,127}$")

Reducer = Callable[[dict[str, Any], Any], Mapping[str, Any]]
"""``reducer(state, event) -> new state`` of an application type. The event is an
``agentnb.events.Event``; it is spelled ``Any`` here because the envelope, which checks
payloads against this registry, is built on it (``envelope`` imports ``registry``)."""


@dataclass(frozen=True, slots=True)
class _AppType:
    name: str
    validate: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None
    required: bool
    reducer: Reducer | None = None


_app_types: dict[str, _AppType] = {}
_app_lock = threading.Lock()


def register_event_type(
    name: str,
    *,
    model: type[BaseModel] | None = None,
    validate: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    required: bool = False,
    reducer: Reducer | None = None,
) -> None:
    """Register an application event type ``vendor/name`` (its codec).

    ``model`` (a pydantic model) or ``validate`` (a function returning the cleaned payload)
    checks payloads when events of this type are created. ``required=True`` marks the type as
    needed to rebuild state: readers without this registration then refuse the log.
    ``reducer(state, event) -> dict`` folds each event of the type into the session's
    ``session.app_state(name)`` (it starts as ``{}``; the reducer returns the new state and
    should not keep or change the one it is given). The fold is part of the session's state,
    so it is rebuilt from the log and carried by its snapshots. A reducer that raises on a
    ``required=True`` type fails the turn that records the event (``ReducerFailed``, nothing
    of it written: fail closed); on any other type the event is written, the app state stays
    as it was and the failure is logged (``agentnb.events``, WARNING).
    Built-in names, malformed names and names already registered raise ``InvalidInput``.
    """
    if not isinstance(name, str) or not _APP_TYPE.match(name):
        raise InvalidInput(
            f"application event type {name!r} must look like 'vendor/name' "
            "(lowercase letters, digits, '.', '_', '-')"
        )
    if name.split("/", maxsplit=1)[0] in _RESERVED_PREFIXES:
        raise InvalidInput(f"{name!r} uses a built-in prefix; pick your own vendor prefix")
    if model is not None and validate is not None:
        raise InvalidInput("pass either model= or validate=, not both")
    if reducer is not None and not callable(reducer):
        raise InvalidInput(
            f"reducer must be a function (state: dict, event) -> dict, got {type(reducer).__name__}"
        )
    check: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = validate
    if model is not None:
        cls = model

        def check(data: Mapping[str, Any]) -> Mapping[str, Any]:
            return cls.model_validate(data).model_dump(mode="json")

    with _app_lock:
        if name in _app_types:
            raise InvalidInput(f"event type {name!r} is already registered")
        _app_types[name] = _AppType(name, check, required, reducer)


def unregister_event_type(name: str) -> None:
    """Forget a registration (tests only)."""
    with _app_lock:
        _app_types.pop(name, None)


def app_type(name: str) -> _AppType | None:
    """The registration of an application type (its codec, ``required``, ``reducer``)."""
    return _app_types.get(name)


def reducers() -> dict[str, Reducer]:
    """Application type -> its reducer, for the types registered with one."""
    with _app_lock:
        return {n: t.reducer for n, t in _app_types.items() if t.reducer is not None}


def payload_model(type_: str) -> type[Payload] | None:
    """The payload model of a built-in type, or None for application types."""
    return PAYLOADS.get(type_)


def check_readable(type_: str, required: bool, *, session: object, seq: int) -> None:
    """Fail closed when a required event type is unknown to this reader."""
    if type_ in BUILTIN_TYPES or type_ in _app_types or not required:
        return
    raise UnknownRequiredEvent(
        f"session {session} seq {seq}: required event type {type_!r} is unknown to this "
        "reader; register its codec with agentnb.register_event_type() or upgrade agentnb "
        "before reading this session"
    )


def check_writable(type_: object, required: bool) -> None:
    """Refuse (``InvalidInput``) a type a store must not commit: one no reader could read.

    ``Event.create`` already enforces this; stores call it too so an event built around it
    (``model_construct``) cannot poison a log with a type that would fail every later read.
    """
    if isinstance(type_, str) and type_ in BUILTIN_TYPES:
        return
    if (
        not isinstance(type_, str)
        or not _APP_TYPE.match(type_)
        or type_.split("/", maxsplit=1)[0] in _RESERVED_PREFIXES
    ):
        raise InvalidInput(
            f"unknown event type {type_!r}: use a built-in type or a namespaced application "
            "type 'vendor/name'"
        )
    if required and type_ not in _app_types:
        raise InvalidInput(
            f"{type_!r} is marked required but has no registered codec; call "
            "agentnb.register_event_type() first, or record it with required=False"
        )
