"""The log's JSON: frozen values and the one codec that writes and reads them.

A payload is plain JSON, checked and deep-frozen when it is accepted (``freeze_json``:
objects become ``FrozenDict``, arrays tuples), so nothing can change a fact once it was
accepted. ``canonical_json`` writes compact, key-sorted JSON (the same value always encodes to
the same text: what a store row, a batch digest and a frame hold); ``decode_payload`` reads
it back frozen.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, NoReturn

import orjson
from pydantic import BaseModel

from agentnb.errors import InvalidInput

__all__ = [
    "BLOB_THRESHOLD",
    "FrozenDict",
    "canonical_json",
    "clean_text",
    "decode_json",
    "decode_payload",
    "freeze_json",
]

BLOB_THRESHOLD = 64 * 1024
"""Encoded payloads larger than this many bytes may be stored as content-addressed blobs."""

# --------------------------------------------------------------------------------------------
# Frozen JSON


class FrozenDict(dict[str, Any]):
    """A JSON object that refuses mutation once built (payloads are frozen on acceptance)."""

    # The canonical JSON, computed on first use, or given by the event that holds the
    # payload (``Event.payload_json``): frozen content cannot go stale. ``_message``: the
    # ``Message`` a message object decodes to, likewise (``payloads.made_once``; typed
    # loosely here, where the payload models are not known yet).
    __slots__ = ("_json", "_message")
    _json: str
    _message: Any

    def _refuse(self, *_: Any, **__: Any) -> NoReturn:
        raise TypeError("event payloads are frozen; build a new event instead")

    __setitem__ = _refuse
    __delitem__ = _refuse
    __ior__ = _refuse
    clear = _refuse
    pop = _refuse
    popitem = _refuse
    setdefault = _refuse
    update = _refuse

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._canonical())

    def _canonical(self) -> str:
        text: str | None = getattr(self, "_json", None)  # no exception when it is not made yet
        if text is None:
            self._json = text = _encode(self)
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))


_MAX_DEPTH = 64
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` as valid Unicode: surrogate pairs joined, lone surrogates replaced by U+FFFD.

    Python strings may hold lone surrogates (a tool's output, an emoji split across two
    streamed chunks) that UTF-8 cannot encode; every text that enters an event passes here,
    so no commit fails with a bare ``UnicodeEncodeError``.
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def freeze_json(value: Any, _path: str = "payload", _depth: int = 0) -> Any:
    """Check that ``value`` is plain JSON and return a deep-frozen copy.

    Objects become ``FrozenDict``, arrays become tuples. Raises ``InvalidInput`` naming the
    offending path for anything JSON cannot carry exactly (non-string keys, NaN, sets, objects).
    """
    return _freeze(value, _path, _depth, False)


_SCALARS = (type(None), bool, int)

_Path = str | tuple[Any, str]
"""Where a value sits in a payload, built as (parent, step) and spelled only for an error."""


def _where(path: _Path) -> str:
    steps: list[str] = []
    while isinstance(path, tuple):
        path, step = path
        steps.append(step)
    return path + "".join(reversed(steps))


def _freeze(value: Any, path: _Path, depth: int, keep_models: bool) -> Any:
    """``freeze_json``; with ``keep_models`` pydantic models are kept as they are (already
    validated, they are dumped once, after the payload model took them)."""
    kind = type(value)
    if kind is str:  # the common cases first, by exact type: this runs for every value
        return value if value.isascii() else clean_text(value)
    if kind in _SCALARS:
        return value
    if depth > _MAX_DEPTH:
        raise InvalidInput(f"{_where(path)} is nested deeper than {_MAX_DEPTH} levels")
    if kind is dict or kind is FrozenDict:
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                if not isinstance(k, str):
                    raise InvalidInput(
                        f"{_where(path)} has a non-string key {k!r}; JSON keys are strings"
                    )
                k = str.__str__(k)  # noqa: PLW2901 - the key as a plain str
            value_kind = type(v)
            if value_kind is str:  # plain values are taken here, not by a call each
                v = v if v.isascii() else clean_text(v)  # noqa: PLW2901
            elif value_kind not in _SCALARS:
                v = _freeze(v, (path, "." + k), depth + 1, keep_models)  # noqa: PLW2901
            out[k if k.isascii() else clean_text(k)] = v
        return FrozenDict(out)
    if kind is list or kind is tuple:
        items: list[Any] = []
        for i, v in enumerate(value):
            value_kind = type(v)
            if value_kind is str:
                items.append(v if v.isascii() else clean_text(v))
            elif value_kind in _SCALARS:
                items.append(v)
            else:
                items.append(_freeze(v, (path, f"[{i}]"), depth + 1, keep_models))
        return tuple(items)
    if isinstance(value, str):
        return clean_text(str.__str__(value))
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(f"{_where(path)} is {value!r}; JSON has no NaN or infinity")
        return value
    if isinstance(value, BaseModel):
        if keep_models:
            return value
        return _freeze(value.model_dump(mode="json"), path, depth, keep_models)
    if isinstance(value, Mapping):
        return _freeze(dict(value), path, depth, keep_models)
    if isinstance(value, list | tuple):
        return _freeze(list(value), path, depth, keep_models)
    raise InvalidInput(
        f"{_where(path)} holds a {type(value).__name__}, which is not JSON; "
        "convert it to str, number, bool, None, list or dict first"
    )


def _freeze_dump(value: dict[str, Any], depth: int = 0) -> FrozenDict:
    """``freeze_json`` of what a payload model dumped (``mode="json"``): only dicts with str
    keys, lists, str, int, float, bool and None can be there, so only what a model does not
    check is checked (text cleaned, floats finite, depth). Scalars are taken in the loop, not
    by a call each: this runs for every event the runtime writes."""
    if depth > _MAX_DEPTH:
        raise InvalidInput(f"payload is nested deeper than {_MAX_DEPTH} levels")
    out = {}
    for k, v in value.items():
        kind = type(v)
        if kind is str:
            out[k if k.isascii() else clean_text(k)] = v if v.isascii() else clean_text(v)
            continue
        if not k.isascii():
            k = clean_text(k)  # noqa: PLW2901 - the key as it is stored
        if kind is dict:
            out[k] = _freeze_dump(v, depth + 1)
        elif kind is list:
            out[k] = _freeze_dump_list(v, depth + 1)
        elif kind is float and not math.isfinite(v):
            raise InvalidInput(f"payload.{k} is {v!r}; JSON has no NaN or infinity")
        else:
            out[k] = v
    return FrozenDict(out)


def _freeze_dump_list(value: list[Any], depth: int) -> tuple[Any, ...]:
    if depth > _MAX_DEPTH:
        raise InvalidInput(f"payload is nested deeper than {_MAX_DEPTH} levels")
    out: list[Any] = []
    for v in value:
        kind = type(v)
        if kind is str:
            out.append(v if v.isascii() else clean_text(v))
        elif kind is dict:
            out.append(_freeze_dump(v, depth + 1))
        elif kind is list:
            out.append(_freeze_dump_list(v, depth + 1))
        elif kind is float and not math.isfinite(v):
            raise InvalidInput(f"payload holds {v!r}; JSON has no NaN or infinity")
        else:
            out.append(v)
    return tuple(out)


# The log's one codec. orjson writes what the standard library's sorted, compact encoder
# writes (its floats are the same shortest digits; below 1e-4 it spells the exponent
# without padding: 1e-7, not 1e-07), about ten times faster. Integers past 64 bits, which
# orjson does not take, are written by the standard library; on reading, its decoder takes
# any text with a run of 19 digits or more, which may hold one (orjson would make it a float).
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_SORTED = orjson.OPT_SORT_KEYS
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def _encode(value: Any) -> str:
    """Compact, key-sorted JSON of checked JSON values (dicts, tuples, finite floats)."""
    try:
        return orjson.dumps(value, option=_SORTED).decode()
    except TypeError:  # an int past 64 bits (or no JSON at all: the fallback says so)
        return _ENCODER.encode(value)


def canonical_json(value: Any) -> str:
    """Compact, key-sorted JSON: the same value always encodes to the same text.

    Values that are not JSON raise ``TypeError`` (or ``ValueError``). A NaN or infinity,
    which only unchecked values can hold (``freeze_json`` refuses them), is written as null,
    as pydantic's JSON dump of a model writes it; check values from outside with
    ``freeze_json`` first.
    """
    if type(value) is FrozenDict:
        return value._canonical()
    return _encode(value)


def decode_json(text: str | bytes) -> Any:
    """Plain JSON ``text`` as Python values (dicts and lists, not frozen), by the log's
    codec; ``ValueError`` if it is not JSON."""
    if _LONG_DIGITS.search(text if isinstance(text, str) else text.decode()) is not None:
        return json.loads(text)
    return orjson.loads(text)


def decode_payload(text: str) -> FrozenDict:
    """The frozen payload ``text`` (a JSON object) encodes; ``ValueError`` if it is not one.

    The reading side of ``canonical_json``: objects become ``FrozenDict`` and arrays tuples,
    and NaN, infinities and duplicate-free trickery are refused as not JSON.
    """
    if _LONG_DIGITS.search(text) is not None:
        value = _STRICT_DECODER.decode(text)
    else:
        value = _frozen_decoded(orjson.loads(text))
    if type(value) is not FrozenDict:
        raise ValueError("payload is not a JSON object")
    return value


def _frozen_decoded(value: Any) -> Any:
    """What a JSON decoder returned, frozen (only dicts, lists and scalars can be there)."""
    kind = type(value)
    if kind is dict:
        out = {}
        for k, v in value.items():
            vk = type(v)
            out[k] = _frozen_decoded(v) if vk is dict or vk is list else v
        return FrozenDict(out)
    if kind is list:
        return tuple([_frozen_decoded(v) if type(v) in (dict, list) else v for v in value])
    return value


def _tuples(items: list[Any]) -> tuple[Any, ...]:
    return tuple([_tuples(v) if type(v) is list else v for v in items])


def _frozen_object(obj: dict[str, Any]) -> FrozenDict:
    # Called innermost first, so nested objects are frozen already; only arrays are left.
    return FrozenDict({k: _tuples(v) if type(v) is list else v for k, v in obj.items()})


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


# Freezes while parsing: the decoder of texts that may hold integers past 64 bits.
_STRICT_DECODER = json.JSONDecoder(
    object_hook=_frozen_object, parse_float=_finite, parse_constant=_no_constant
)
