"""The envelope: ``Event``, one committed (or about to be committed) fact of a session.

An event is built once and never changes: a slotted, immutable record of the envelope's fields
and its payload, frozen JSON. It carries its payload's canonical JSON (``payload_json``) from the
moment it is built, and that one text is what the store row, the batch digest, a stream's frame
and the exports hold: nobody encodes a committed payload again.

Two constructors make events, one for each side of the log:

- ``Event.new`` (the writer's): a new fact from checked fields; its payload is encoded here,
  once. ``Event.create`` (any caller: the payload is validated against its type, the door)
  and ``Event.built`` (the runtime's own payloads, trusted) end in it.
- ``Event.stored`` (the stores'): a committed fact as a row holds it, its payload decoded from
  the canonical text the row keeps; nothing is checked or encoded again (``with_seq`` too).

Foreign data (a service's ``/events`` page, a dict from elsewhere) comes in through
``Event.model_validate``, which checks every field (pydantic's ``ValidationError``) as it did
when the envelope was a pydantic model; ``model_dump``, ``model_copy`` and ``model_construct``
keep pydantic's names and behaviour for their callers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator
from pydantic.fields import FieldInfo

from agentnb.errors import InvalidInput
from agentnb.events.codec import (
    FrozenDict,
    _freeze,
    _freeze_dump,
    canonical_json,
    freeze_json,
)
from agentnb.events.payloads import _OPTIONAL_BUILTINS, PAYLOADS, Payload
from agentnb.events.registry import app_type, check_writable
from agentnb.ids import check_id, new_id

__all__ = ["CHECK_BUILT", "SCHEMA_VERSION", "Event", "builtins_type_name", "event_digest"]

SCHEMA_VERSION = 1

# --------------------------------------------------------------------------------------------
# Payloads: checked at the door, or built by the runtime


def _prepare_payload(type_: str, payload: Any, required: bool | None) -> tuple[Any, bool]:
    """Validate a payload for ``type_`` and return (frozen JSON payload, required flag)."""
    model = PAYLOADS.get(type_)
    if model is not None:
        if isinstance(payload, model):
            data: Any = payload.model_dump(mode="json")
        elif isinstance(payload, Payload):
            raise InvalidInput(
                f"payload for {type_!r} must be {model.__name__}, got {type(payload).__name__}"
            )
        else:
            if payload is None:
                payload = {}
            # Checked as JSON, but models in it (messages) stay as they are: the payload
            # model takes them without validating them again, and they are dumped once.
            frozen = _freeze(payload, "payload", 0, True)
            if not isinstance(frozen, Mapping):
                raise InvalidInput(f"payload for {type_!r} must be a JSON object")
            try:
                # What model_validate(...).model_dump(mode="json") does, without their
                # Python wrappers (this runs for every event the runtime writes).
                data = model.__pydantic_serializer__.to_python(
                    model.__pydantic_validator__.validate_python(frozen), mode="json"
                )
            except ValidationError as exc:
                raise InvalidInput(f"invalid payload for {type_!r}: {exc}") from None
        try:
            frozen_data = _freeze_dump(data)
        except InvalidInput:
            frozen_data = freeze_json(data)  # the checking walk says where (and raises)
        return frozen_data, type_ not in _OPTIONAL_BUILTINS if required is None else required
    check_writable(type_, False)  # a namespaced application type, not a built-in prefix
    app = app_type(type_)
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json")
    frozen = freeze_json({} if payload is None else payload)
    if not isinstance(frozen, Mapping):
        raise InvalidInput(f"payload for {type_!r} must be a JSON object")
    if app is None:
        if required:
            raise InvalidInput(
                f"{type_!r} is marked required but has no registered codec; call "
                "agentnb.register_event_type() first, or record it with required=False"
            )
        return frozen, False
    if app.validate is not None:
        try:
            frozen = freeze_json(app.validate(frozen))
        except (ValidationError, ValueError, TypeError) as exc:
            raise InvalidInput(f"invalid payload for {type_!r}: {exc}") from None
    return frozen, app.required if required is None else required


CHECK_BUILT = False
"""When True, every payload ``Event.built`` makes is also checked by its model and must come
out the same (the test suite turns it on: the trusted path is proven by every test)."""


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a built-in payload model adds to a payload the runtime built: its defaults, and
    floats for the ints given to its float fields."""

    defaults: dict[str, Any]
    floats: frozenset[str]


_PLANS: dict[str, _Plan] = {}


def _plan(type_: str, model: type[Payload]) -> _Plan:
    defaults: dict[str, Any] = {}
    floats: set[str] = set()
    for name, info in model.model_fields.items():
        if float in (info.annotation, *get_args(info.annotation)):
            floats.add(name)
        if not info.is_required():
            default = info.get_default(call_default_factory=True)
            if info.exclude_if is not None and info.exclude_if(default):
                continue  # stored only when set (see _empty)
            annotation = Any if info.annotation is None else info.annotation
            defaults[name] = TypeAdapter(annotation).dump_python(default, mode="json")
    plan = _PLANS[type_] = _Plan(freeze_json(defaults), frozenset(floats))
    return plan


def _built_payload(type_: str, payload: Mapping[str, Any]) -> FrozenDict:
    """``payload`` of a built-in type as its model would store it, without validating it:
    the fields it leaves out take their defaults, and ints given to float fields become
    floats. It is still checked to be JSON (and its text cleaned) as it is frozen."""
    model = PAYLOADS[type_]
    plan = _PLANS.get(type_) or _plan(type_, model)
    data = dict(plan.defaults)
    floats = plan.floats
    for name, value in payload.items():
        data[name] = float(value) if name in floats and type(value) is int else value
    frozen: FrozenDict = _freeze(data, "payload", 0, False)
    if CHECK_BUILT:
        checked, _ = _prepare_payload(type_, payload, None)
        if frozen != checked or canonical_json(frozen) != canonical_json(checked):
            raise AssertionError(
                f"{type_} built as {canonical_json(frozen)}, but its model stores "
                f"{canonical_json(checked)}"
            )
    return frozen


# --------------------------------------------------------------------------------------------
# The envelope

_FIELDS = (
    "schema_version",
    "event_id",
    "seq",
    "occurred_at",
    "type",
    "turn_id",
    "run_id",
    "required",
    "payload",
)
_REQUIRED_FIELDS = frozenset({"event_id", "occurred_at", "type", "payload"})


class _Fields(BaseModel):
    """The envelope's fields as a pydantic model: what checks foreign data
    (``Event.model_validate``) and writes pydantic's dumps (``Event.model_dump``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", title="Event")

    schema_version: int = SCHEMA_VERSION
    event_id: str
    seq: int = Field(default=0, ge=0)
    occurred_at: datetime
    type: str
    turn_id: str | None = None
    run_id: str | None = None
    required: bool = True
    payload: dict[str, Any]

    @model_validator(mode="after")
    def _freeze_payload(self) -> _Fields:
        if not isinstance(self.payload, FrozenDict):
            object.__setattr__(self, "payload", freeze_json(self.payload))
        return self


class Event:
    """One committed (or about to be committed) fact of a session.

    Create events with ``Event.create``; stores assign ``seq`` when they commit a batch
    (``seq == 0`` means not committed yet). Immutable: assigning a field raises pydantic's
    ``ValidationError`` (``frozen_instance``), as it did when the envelope was a model.
    """

    __slots__ = (*_FIELDS, "__weakref__", "payload_json")

    schema_version: int
    event_id: str
    """Globally unique, time-ordered id (``evt_<uuid7>``); exports deduplicate by it."""
    seq: int
    """Position in the session log, gapless from 1; 0 before commit."""
    occurred_at: datetime
    """When the fact happened (UTC). Informational: order by ``seq``."""
    type: str
    turn_id: str | None
    run_id: str | None
    required: bool
    """A reader must know this type to rebuild state; see the package docstring."""
    payload: dict[str, Any]
    """The fact itself: JSON, frozen (see ``FrozenDict``)."""
    payload_json: str
    """The payload's canonical JSON (``canonical_json``): made once, when the event was
    built, or the text the store row it was read from keeps. Rows, digests, frames and
    exports write this text."""

    model_fields: ClassVar[dict[str, FieldInfo]] = _Fields.model_fields

    def __init__(
        self,
        schema_version: int,
        event_id: str,
        seq: int,
        occurred_at: datetime,
        type: str,
        turn_id: str | None,
        run_id: str | None,
        required: bool,
        payload: dict[str, Any],
        payload_json: str,
        /,
    ) -> None:
        # The fields as given: nothing is checked or encoded here. Events come from the
        # constructors below (``new``, ``stored``) and the factories built on them. Each slot
        # is set through its own descriptor (``__setattr__`` refuses every assignment).
        (
            set_schema_version,
            set_event_id,
            set_seq,
            set_occurred_at,
            set_type,
            set_turn_id,
            set_run_id,
            set_required,
            set_payload,
            set_payload_json,
        ) = _SLOTS
        set_schema_version(self, schema_version)
        set_event_id(self, event_id)
        set_seq(self, seq)
        set_occurred_at(self, occurred_at)
        set_type(self, type)
        set_turn_id(self, turn_id)
        set_run_id(self, run_id)
        set_required(self, required)
        set_payload(self, payload)
        set_payload_json(self, payload_json)

    # -- the two constructors ----------------------------------------------------------------

    @classmethod
    def new(
        cls,
        type: str,
        payload: dict[str, Any],
        *,
        required: bool,
        turn_id: str | None = None,
        run_id: str | None = None,
        event_id: str | None = None,
        occurred_at: datetime | None = None,
        seq: int = 0,
        schema_version: int = SCHEMA_VERSION,
    ) -> Event:
        """The writer's constructor: a new event from fields already checked (``payload``
        frozen JSON), its payload encoded here, once. A new ``event_id`` and the time now
        unless given. ``create`` and ``built`` check or build the fields, then call this."""
        if payload.__class__ is not FrozenDict:  # a plain dict from a caller: frozen first
            payload = freeze_json(payload)
        return cls(
            schema_version,
            event_id or new_id("evt"),
            seq,
            occurred_at or datetime.now(UTC),
            type,
            turn_id,
            run_id,
            required,
            payload,
            canonical_json(payload),
        )

    @classmethod
    def stored(
        cls,
        schema_version: int,
        event_id: str,
        seq: int,
        occurred_at: datetime,
        type: str,
        turn_id: str | None,
        run_id: str | None,
        required: bool,
        payload: dict[str, Any],
        payload_json: str,
    ) -> Event:
        """The stores' constructor: a committed event as its row holds it, ``payload``
        decoded from ``payload_json``, the canonical text the row keeps (checksummed when it
        was read). Nothing is checked or encoded again: a store checks what it reads
        (``check_readable``, the checksum) before it builds the event."""
        if payload.__class__ is FrozenDict:  # ``type`` is the event's type here
            payload._json = payload_json  # its canonical text is this one: never encoded again
        return cls(
            schema_version,
            event_id,
            seq,
            occurred_at,
            type,
            turn_id,
            run_id,
            required,
            payload,
            payload_json,
        )

    # -- new events ----------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        type: str,
        payload: Any = None,
        *,
        turn_id: str | None = None,
        run_id: str | None = None,
        required: bool | None = None,
        event_id: str | None = None,
        occurred_at: datetime | None = None,
    ) -> Event:
        """Build a new, uncommitted event, validating its payload for ``type``.

        Raises ``InvalidInput`` for unknown types, payloads that are not JSON or do not fit the
        type's model, and ids that are not strings.
        """
        if not isinstance(type, str):
            raise InvalidInput(f"event type must be a string, got {builtins_type_name(type)}")
        data, req = _prepare_payload(type, payload, required)
        if turn_id is not None:
            check_id(turn_id, "turn_id")
        if run_id is not None:
            check_id(run_id, "run_id")
        if event_id is not None:
            check_id(event_id, "event_id")
        return cls.new(
            type,
            data,
            required=req,
            turn_id=turn_id,
            run_id=run_id,
            event_id=event_id,
            occurred_at=occurred_at,
        )

    @classmethod
    def built(
        cls,
        type: str,
        payload: Mapping[str, Any],
        *,
        turn_id: str | None = None,
        run_id: str | None = None,
        required: bool | None = None,
    ) -> Event:
        """A new event of a built-in type whose payload the runtime built (its own code, from
        values it checked): stored as ``create`` would store it, without validating it again
        (``CHECK_BUILT`` makes it check). Other types, and payloads that are not plain
        mappings, go through ``create``."""
        if type not in PAYLOADS or not isinstance(payload, dict):
            return cls.create(type, payload, turn_id=turn_id, run_id=run_id, required=required)
        return cls.new(
            type,
            _built_payload(type, payload),
            required=type not in _OPTIONAL_BUILTINS if required is None else required,
            turn_id=turn_id,
            run_id=run_id,
        )

    def with_seq(self, seq: int) -> Event:
        """This event as committed at ``seq``."""
        return Event.stored(
            self.schema_version,
            self.event_id,
            seq,
            self.occurred_at,
            self.type,
            self.turn_id,
            self.run_id,
            self.required,
            self.payload,
            self.payload_json,
        )

    # -- reading -------------------------------------------------------------------------------

    @property
    def data(self) -> BaseModel | Mapping[str, Any]:
        """The payload decoded into its model (built-in types) or the raw mapping."""
        model = PAYLOADS.get(self.type)
        return model.model_validate(self.payload) if model is not None else self.payload

    def content_key(self) -> str:
        """Everything but ``seq`` as one string, cheaply (ids hold no control characters)."""
        return (
            f"{self.schema_version}\x1f{self.event_id}\x1f{_ts(self.occurred_at)}\x1f"
            f"{self.type}\x1f{self.turn_id or ''}\x1f{self.run_id or ''}\x1f{self.required}\x1f"
            f"{self.payload_json}"
        )

    # -- pydantic's names, for the callers that use them ---------------------------------------

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
    ) -> Event:
        """An event from foreign data (a mapping of the envelope's fields), every field checked
        (pydantic's ``ValidationError`` if one does not fit) and the payload frozen."""
        if isinstance(obj, Event):
            return obj
        fields = _Fields.model_validate(
            obj, strict=strict, from_attributes=from_attributes, context=context
        )
        return cls._of(fields)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes, *, strict: bool | None = None) -> Event:
        """``model_validate`` of a JSON text."""
        return cls._of(_Fields.model_validate_json(json_data, strict=strict))

    @classmethod
    def _of(cls, fields: _Fields) -> Event:
        return cls.new(
            fields.type,
            fields.payload,
            required=fields.required,
            turn_id=fields.turn_id,
            run_id=fields.run_id,
            event_id=fields.event_id,
            occurred_at=fields.occurred_at,
            seq=fields.seq,
            schema_version=fields.schema_version,
        )

    @classmethod
    def model_construct(cls, **fields: Any) -> Event:
        """An event from its fields, unchecked (tests build events a store must refuse with
        it): only a payload that is not frozen yet is frozen (``InvalidInput`` if it is not
        JSON), then encoded. The fields ``Event.create`` fills take its defaults."""
        unknown = fields.keys() - set(_FIELDS)
        missing = _REQUIRED_FIELDS - fields.keys()
        if unknown or missing:
            raise TypeError(
                f"Event.model_construct: unknown fields {sorted(unknown)}, "
                f"missing fields {sorted(missing)}"
            )
        return cls.new(
            fields["type"],
            fields["payload"],
            required=fields.get("required", True),
            turn_id=fields.get("turn_id"),
            run_id=fields.get("run_id"),
            event_id=fields["event_id"],
            occurred_at=fields["occurred_at"],
            seq=fields.get("seq", 0),
            schema_version=fields.get("schema_version", SCHEMA_VERSION),
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Event:
        """This event with the fields in ``update`` replaced (unchecked, as pydantic's is); a
        new payload is frozen and encoded, an unchanged one keeps its text. ``deep`` changes
        nothing: every part of an event is immutable already."""
        fields = self.__dict__
        if update:
            fields.update(update)
            if "payload" in update:
                return Event.model_construct(**fields)
        return Event.stored(**fields, payload_json=self.payload_json)

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:
        """The envelope as a dict, as pydantic dumps it (``mode="json"``: JSON values, the
        time in ISO 8601); pydantic's keyword arguments apply."""
        return self._fields().model_dump(**kwargs)

    def model_dump_json(self, **kwargs: Any) -> str:
        """The envelope as JSON text, as pydantic writes it."""
        return self._fields().model_dump_json(**kwargs)

    def _fields(self) -> _Fields:
        return _Fields.model_construct(**self.__dict__)

    # -- a value -------------------------------------------------------------------------------

    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        """The envelope's fields by name (a new dict each time: the event does not change)."""
        return {name: getattr(self, name) for name in _FIELDS}

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        """(name, value) of each field, as a pydantic model iterates."""
        for name in _FIELDS:
            yield name, getattr(self, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise _frozen(name, value)

    def __delattr__(self, name: str) -> None:
        raise _frozen(name, None)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (
            self.seq == other.seq
            and self.event_id == other.event_id
            and self.type == other.type
            and self.occurred_at == other.occurred_at
            and self.turn_id == other.turn_id
            and self.run_id == other.run_id
            and self.required == other.required
            and self.schema_version == other.schema_version
            and self.payload == other.payload
        )

    def __hash__(self) -> int:
        return hash(
            (
                self.schema_version,
                self.event_id,
                self.seq,
                self.occurred_at,
                self.type,
                self.turn_id,
                self.run_id,
                self.required,
                self.payload_json,
            )
        )

    def __repr__(self) -> str:
        return f"Event({self._repr_args(', ')})"

    def __str__(self) -> str:
        return self._repr_args(" ")

    def _repr_args(self, sep: str) -> str:
        return sep.join(f"{name}={getattr(self, name)!r}" for name in _FIELDS)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            Event.stored,
            (
                self.schema_version,
                self.event_id,
                self.seq,
                self.occurred_at,
                self.type,
                self.turn_id,
                self.run_id,
                self.required,
                self.payload,
                self.payload_json,
            ),
        )

    def __copy__(self) -> Event:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Event:
        return self


_SLOTS: tuple[Callable[[Event, Any], None], ...] = tuple(
    getattr(Event, name).__set__ for name in (*_FIELDS, "payload_json")
)
"""The setter of each slot ``Event.__init__`` fills, in its arguments' order."""


def _frozen(name: str, value: Any) -> ValidationError:
    """What assigning to a field of an event raises (pydantic's error for a frozen model)."""
    return ValidationError.from_exception_data(
        "Event", [{"type": "frozen_instance", "loc": (name,), "input": value}]
    )


def builtins_type_name(value: object) -> str:
    return type(value).__name__


def _ts(value: datetime) -> int:
    """Microseconds since the epoch (how stores keep ``occurred_at``)."""
    return round(value.timestamp() * 1_000_000)


def event_digest(events: Iterable[Event]) -> str:
    """SHA-256 over the canonical content of a batch (batch-id replay detection)."""
    text = "\x1e".join([event.content_key() for event in events])
    return hashlib.sha256(text.encode()).hexdigest()
