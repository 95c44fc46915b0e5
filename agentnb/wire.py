"""Records on the wire: JSON built from the records' own dataclass fields, both ways.

The service (``agentnb.server``) answers with the records ``Session`` returns, and the remote
client (``agentnb.client``) rebuilds the same records from the answers. Neither spells a
record out by hand: ``dump`` walks a record's dataclass fields, ``load`` rebuilds it from its
type hints, and ``model_of`` makes the pydantic model (for the OpenAPI schema) from the same
fields. A field added to a record is carried by all three at once.

Fields whose name starts with ``_`` are the record's private handles (the session a receipt
waits through, a lazy reader) and never travel; the client passes its own as keywords to
``load``. Nested records, pydantic models (``Message``), ``datetime`` (ISO 8601), tuples and
mappings are handled; a field typed ``Any`` travels as plain JSON and comes back as such.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, Union, cast, get_args, get_origin, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from agentnb.errors import InvalidInput

__all__ = ["dump", "load", "model_of"]

T = TypeVar("T")

_MISSING = dataclasses.MISSING


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


@functools.cache
def _public(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    return tuple(f for f in dataclasses.fields(cls) if not f.name.startswith("_"))


def dump(value: Any) -> Any:
    """``value`` as JSON-ready data: records as objects of their public fields."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump(getattr(value, f.name)) for f in _public(type(value))}
    if isinstance(value, Mapping):
        return {str(k): dump(v) for k, v in value.items()}
    if isinstance(value, Sequence | set | frozenset):
        return [dump(v) for v in value]
    raise InvalidInput(f"cannot put a {type(value).__name__} on the wire")


def load(cls: type[T], data: Any, **private: Any) -> T:
    """The record ``cls`` from ``dump``'s JSON (unknown keys are ignored: a newer server may
    send fields this client does not know); ``private`` sets ``_``-fields."""
    if not isinstance(data, Mapping):
        raise InvalidInput(f"a {cls.__name__} must be a JSON object, got {type(data).__name__}")
    hints = _hints(cast(type, cls))
    values: dict[str, Any] = {}
    for f in _public(cast(type, cls)):
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name])
    return cls(**values, **private)


def _convert(tp: Any, value: Any) -> Any:
    if value is None or tp is Any:
        return value
    origin = get_origin(tp)
    args = get_args(tp)
    if origin is Union or origin is types.UnionType:
        options = [a for a in args if a is not type(None)]
        for option in options:
            if _fits(option, value):
                return _convert(option, value)
        return value
    if origin is typing.Literal:
        return value
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return load(tp, value)
        if issubclass(tp, BaseModel):
            return tp.model_validate(value)
        if tp is datetime:
            return datetime.fromisoformat(value)
        return value
    if origin is tuple:
        item = args[0] if args else Any
        return tuple(_convert(item, v) for v in value)
    if origin in (list, Sequence, set, frozenset):
        item = args[0] if args else Any
        items = [_convert(item, v) for v in value]
        return origin(items) if origin in (set, frozenset) else items
    if origin in (dict, Mapping):
        item = args[1] if len(args) == 2 else Any
        return {k: _convert(item, v) for k, v in value.items()}
    return value


def _fits(tp: Any, value: Any) -> bool:
    """Whether JSON ``value`` can be a ``tp`` (to pick the branch of a union)."""
    origin = get_origin(tp) or tp
    if isinstance(origin, type):
        if dataclasses.is_dataclass(origin) or issubclass(origin, BaseModel | Mapping | dict):
            return isinstance(value, Mapping)
        if origin in (tuple, list, Sequence, set, frozenset):
            return isinstance(value, list)
        if origin is datetime:
            return isinstance(value, str)
        return isinstance(value, origin)
    return True


@functools.cache
def model_of(cls: type) -> type[BaseModel]:
    """The pydantic model of a record's public fields (same names, same types, nested records
    as their own models): what the OpenAPI schema shows and responses are checked against."""
    hints = _hints(cls)
    fields: dict[str, Any] = {}
    for f in _public(cls):
        tp = _wire_type(hints[f.name])
        if f.default is not _MISSING:
            fields[f.name] = (tp, f.default)
        elif f.default_factory is not _MISSING:
            fields[f.name] = (tp, Field(default_factory=f.default_factory))
        else:
            fields[f.name] = (tp, ...)
    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    model: type[BaseModel] = create_model(
        cls.__name__,
        __config__=ConfigDict(extra="allow"),
        __doc__=doc,
        **fields,
    )
    return model


def _wire_type(tp: Any) -> Any:
    """A record field's type as the JSON schema shows it."""
    origin = get_origin(tp)
    args = get_args(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return model_of(tp)
    if origin is Union or origin is types.UnionType:
        converted = tuple(_wire_type(a) for a in args)
        return Union[converted]  # noqa: UP007 - built from a runtime tuple of types
    if origin is tuple:
        return list[_wire_type(args[0]) if args else Any]  # type: ignore[misc]
    if origin in (list, Sequence, set, frozenset):
        return list[_wire_type(args[0]) if args else Any]  # type: ignore[misc]
    if origin in (dict, Mapping):
        value = _wire_type(args[1]) if len(args) == 2 else Any
        return dict[str, value]  # type: ignore[valid-type]
    if tp is typing.Any or origin is typing.Literal:
        return tp
    return tp
