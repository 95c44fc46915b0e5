"""Events: the immutable, typed facts every session is made of.

An ``Event`` is an envelope (``schema_version``, ``event_id``, ``seq``, ``occurred_at``, ``type``,
``turn_id``, ``run_id``, ``required``, ``payload``). The payload is JSON, checked and deep-frozen
when the event is created, so nothing can change it after it was accepted. Events are ordered by
``seq`` (gapless per session, from 1), never by time.

Each built-in type has one payload model below (``PAYLOADS`` maps type to model);
``Event.create`` validates the payload against it, and ``Event.data`` decodes it back.
Application types are namespaced ``vendor/name`` and go through ``register_event_type``.

``required`` says whether a reader must understand the type to rebuild state: a reader that
meets a required type it does not know fails closed (``UnknownRequiredEvent``); optional
unknown types are passed over.

The catalogue follows the seeds' (AgentScope's session log), with these differences, each
for a reason:

- ``message/system`` records the instructions a session's runs use, when they change: in
  the commit that binds the session to its agent (``agent/bound``) and in one that records
  an accepted agent change with other instructions (``agent/changed``); they can change
  nowhere else. It is not a context message: the instructions belong to the agent and go
  with each model request (``request/prepared.instructions``), so the context and the
  transcript hold user, assistant and tool messages only.
- ``state/checkpoint`` says what it covers: ``state.context_digest`` chains the digests of
  the context's messages (``agentnb.projections.digest``), and a resume checks it against
  the log (``Corrupt`` when they differ).
- ``state/restored`` is written when a runtime restored a session's state from a snapshot
  plus the log and runs it: ``snapshot_seq`` and the ``restored_seq`` it was brought to.
- ``verification/result`` records each check of an ``Agent(verify=)`` hook.
- ``inbox/opened`` and ``inbox/closed`` are declared inbox types; admission is decided from
  the execution log (a steer binds to the run the execution log shows open with a live
  executor, and a run's completion commits only if the inbox is still at the head it read,
  ``run/end.inbox_seq``), so they are records for readers of the inbox alone.
- Written as the seed names them: ``coverage`` on ``run/start`` (``adapter_chunks``: the
  model's streamed pieces are in the log) and on ``migration/baseline`` (``baseline_only``:
  what came before the baseline is not); ``action_id`` (the seed's ``actionId``), one per
  execution attempt of a tool call, on ``tool/dispatch``, ``tool/chunk``, ``action/start``
  and ``action/end``; ``purpose`` on ``request/prepared`` and ``model/end``;
  ``permission/changed`` for the rules a person grants when approving.

Why it is long: it is the log's schema, every event type's payload model in one registry,
read as one document; the envelope and its freezing rules sit with them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn, get_args

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from agentnb.blocks import BlockPart
from agentnb.errors import InvalidInput, UnknownRequiredEvent
from agentnb.ids import check_id, new_id

__all__ = [
    "BLOB_THRESHOLD",
    "BUILTIN_TYPES",
    "INBOX_TYPES",
    "PAYLOADS",
    "REASONING",
    "SCHEDULE_TYPES",
    "SCHEMA_VERSION",
    "Event",
    "FrozenDict",
    "Message",
    "Payload",
    "ReasoningPart",
    "ToolCallData",
    "app_type",
    "canonical_json",
    "check_readable",
    "check_writable",
    "decode_json",
    "decode_payload",
    "event_digest",
    "freeze_json",
    "made_once",
    "message_of",
    "payload_model",
    "reducers",
    "register_event_type",
    "unregister_event_type",
]

SCHEMA_VERSION = 1
BLOB_THRESHOLD = 64 * 1024
"""Encoded payloads larger than this many bytes may be stored as content-addressed blobs."""

# --------------------------------------------------------------------------------------------
# Frozen JSON


class FrozenDict(dict[str, Any]):
    """A JSON object that refuses mutation once built (payloads are frozen on acceptance)."""

    # The canonical JSON, computed on first use: a store encodes each payload twice per
    # append (batch digest and row), and frozen content cannot go stale. ``_message``: the
    # ``Message`` a message object decodes to, likewise (see ``message_of``).
    __slots__ = ("_json", "_message")
    _json: str
    _message: Message

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
        try:
            return self._json
        except AttributeError:
            self._json = _encode(self)
            return self._json

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


# --------------------------------------------------------------------------------------------
# Payload models


class Payload(BaseModel):
    """Base of every built-in payload: frozen, and unknown fields are refused on write."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCallData(Payload):
    """One tool call the model asked for."""

    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


def _empty(value: object) -> bool:
    # Fields added after logs were written: left out when empty, so older events keep their
    # bytes and a reply without reasoning stores exactly what it stored before.
    return not value


class ReasoningPart(Payload):
    """One block of reasoning (thinking) an assistant message carries, as the provider sent it.

    ``text`` is what shows as "Thinking" (Anthropic's thinking text; the joined summaries of
    an OpenAI reasoning item). The other fields are the provider's opaque parts, sent back
    unchanged on the next call of a tool loop (the provider refuses, or forgets, reasoning
    that comes back altered): ``signature`` (Anthropic), ``data`` (Anthropic's redacted
    thinking, or OpenAI's ``encrypted_content``), ``id`` and ``summary`` (an OpenAI reasoning
    item's id and summary texts). ``provider`` names the API that made it (``"anthropic"``,
    ``"openai"``); an adapter sends back only its own provider's parts.
    """

    provider: str | None = None
    text: str = ""
    signature: str | None = Field(default=None, exclude_if=_empty)
    data: str | None = Field(default=None, exclude_if=_empty)
    id: str | None = Field(default=None, exclude_if=_empty)
    summary: tuple[str, ...] = Field(default=(), exclude_if=_empty)


class Message(Payload):
    """One complete conversation message (the public ``Message`` record)."""

    id: str
    role: Literal["user", "assistant", "tool", "system"]
    text: str = ""
    tool_calls: tuple[ToolCallData, ...] = ()
    """Tool calls an assistant message makes."""
    call_id: str | None = None
    """For ``tool`` messages: the call this result answers."""
    turn_id: str | None = None
    name: str | None = None
    """For ``tool`` messages: the tool's name."""
    reasoning: tuple[ReasoningPart, ...] = Field(default=(), exclude_if=_empty)
    """For ``assistant`` messages: the reasoning blocks of the reply, in stream order."""
    blocks: tuple[BlockPart, ...] = Field(default=(), exclude_if=_empty)
    """For ``tool`` messages: the result's blocks (``agentnb.blocks``); ``text`` is their
    stand-in."""

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A message without reasoning (most of them) reads as it did before reasoning was
        # recorded: the empty field is left out of the repr as it is left out of the bytes.
        for name, value in super().__repr_args__():
            if name not in ("reasoning", "blocks") or value:
                yield name, value


def message_of(data: Mapping[str, Any]) -> Message:
    """The ``Message`` a payload's message object holds, decoded once per object: every
    fold of this process that folds the same committed event shares one (frozen) value,
    instead of a copy each."""
    return made_once(data, lambda: Message.model_validate(data))


def made_once(data: Mapping[str, Any], make: Callable[[], Message]) -> Message:
    """``make()``, kept on ``data`` when it is a frozen payload object: the ``Message`` it
    stands for (a message object, or a tool result) is then made once per object."""
    if type(data) is not FrozenDict:
        return make()
    try:
        return data._message
    except AttributeError:
        data._message = message = make()
        return message


RunReason = Literal["submit", "resume", "respond", "recovery", "steer"]
Status = Literal["completed", "suspended", "interrupted", "failed", "cancelled"]


class RunStart(Payload):
    """A run (one execution of a turn) begins."""

    reason: RunReason = "submit"
    command_id: str | None = None
    attempt: int = 1
    coverage: Literal["adapter_chunks"] = "adapter_chunks"
    """What the log holds of this run for replay: ``adapter_chunks``, every streamed piece
    the model adapter produced (grouped in ``model/chunk``), not only the final messages."""


class RunEnd(Payload):
    """A run ends with its final status."""

    status: Status
    reason: str | None = None
    error: str | None = None
    inbox_seq: int | None = None
    stop_reason: str | None = None
    """Why the run stopped, as a code: ``final_answer``, ``needs_person``, ``interrupted``,
    ``time_limit``, ``runtime_closed``, ``session_closed``, ``max_steps``, ``max_turn_tokens``,
    ``max_session_tokens``, ``session_full``, ``error``, ``cancelled``, ``crash`` or
    ``inline_wait_expired`` (a run that waited in place for a person, ``wait_inline``, as long
    as it may; a suspended run's ``reason`` says why its wait ended)."""
    """The inbox head this run had read when it ended: steering after it was not seen."""


class RunStopRequested(Payload):
    """Someone asked the active run to stop (interrupt)."""

    command_id: str | None = None
    reason: str | None = None


class TurnStart(Payload):
    """A turn (one submitted task) begins its first run."""

    input: str
    command_id: str | None = None


class TurnResumed(Payload):
    """A turn continues in a new run (resume, respond, recovery)."""

    command_id: str | None = None
    reason: RunReason = "resume"


class TurnOutput(Payload):
    """The turn's final assistant message; replaces a draft of the same id."""

    message: Message
    status: Literal["completed", "incomplete"] = "completed"


class TurnStatus(Payload):
    """A turn reached a status (completed, suspended, failed, interrupted, cancelled)."""

    reason: str | None = None
    error: str | None = None


class StepStart(Payload):
    """One reasoning iteration begins."""

    step_id: str
    iteration: int


class StepEnd(Payload):
    """One reasoning iteration ends; ``terminal`` means the run stops after it."""

    step_id: str
    status: Literal["continued", "terminal"]


class InputReceived(Payload):
    """Input bound for the model: the task, steering, injected material or an answer."""

    input_id: str
    kind: Literal["submit", "steer", "inject", "answer"]
    text: str
    command_id: str | None = None


class InputApplied(Payload):
    """Inputs that are now part of a checkpointed context (never applied twice)."""

    input_ids: tuple[str, ...]


class InputDiscarded(Payload):
    """Inputs that will never be applied (their turn was cancelled)."""

    input_ids: tuple[str, ...]
    reason: str | None = None


class MessageEvent(Payload):
    """A message committed to the conversation."""

    message: Message
    model_call_id: str | None = None


REASONING = "reasoning"
"""The ``purpose`` of a model call that is a step of the agent (not an auxiliary call)."""


class RequestPrepared(Payload):
    """The exact request the next model call will send (what the model sees)."""

    model_call_id: str
    model: str
    prefix: int = 0
    """How many context messages come before ``messages``: the previous request carried them."""
    messages: tuple[Message, ...]
    """The context messages new since the previous request (all of them when prefix is 0)."""
    instructions: str | None = None
    """The system instructions, when they differ from the previous request's."""
    tools: tuple[str, ...] = ()
    """Names of the tools offered."""
    options: dict[str, Any] = Field(default_factory=dict)
    purpose: str = REASONING
    """``reasoning``: a step of the agent (its reply joins the conversation). Anything else
    names the auxiliary job the call serves (``compaction``: the summariser): it is folded
    out of the chat, its tokens are counted under that job, and ``messages`` are not
    repeated (the job's own events say what it read)."""


class ModelDispatch(Payload):
    """A model call is about to be made (durable before the call)."""

    model_call_id: str
    attempt: int = 1


class ToolCallFragment(Payload):
    """A streamed piece of a tool call's arguments."""

    index: int
    call_id: str | None = None
    name: str | None = None
    arguments_delta: str = ""


class ReasoningFragment(Payload):
    """A streamed piece of the reply's reasoning: ``text`` to show, and on a part's last piece
    its opaque fields (see ``ReasoningPart``). ``index`` numbers the reasoning parts of the
    reply from 0."""

    index: int = 0
    text: str = ""
    provider: str | None = Field(default=None, exclude_if=_empty)
    signature: str | None = Field(default=None, exclude_if=_empty)
    data: str | None = Field(default=None, exclude_if=_empty)
    id: str | None = Field(default=None, exclude_if=_empty)
    summary: tuple[str, ...] | None = Field(default=None, exclude_if=_empty)


class ModelChunk(Payload):
    """A group of streamed pieces of a model reply, committed together."""

    model_call_id: str
    index: int
    """Position of the first piece in this event within the reply's stream."""
    text: str = ""
    tool_call_fragments: tuple[ToolCallFragment, ...] = ()
    pieces: int = 1
    """How many streamed chunks this event carries."""
    reasoning_fragments: tuple[ReasoningFragment, ...] = Field(default=(), exclude_if=_empty)
    """Reasoning pieces among them, in stream order (their own kind: never in ``text``)."""


class ModelEnd(Payload):
    """A model call ended: usage, latency and finish reason live here."""

    model_call_id: str
    status: Literal["completed", "failed", "cancelled"]
    model: str
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    """The part of ``input_tokens`` served from the provider's prompt cache (None: unknown)."""
    reasoning_tokens: int | None = None
    """The part of ``output_tokens`` spent on hidden reasoning (None: unknown)."""
    cache_write_tokens: int | None = Field(default=None, exclude_if=_empty)
    """The part of ``input_tokens`` written to the provider's prompt cache (None: unknown)."""
    reasoning_chars: int | None = Field(default=None, exclude_if=_empty)
    """Characters of reasoning text the reply streamed (left out when none)."""
    usage_estimated: bool = Field(default=False, exclude_if=_empty)
    """The server reported no usage: the tokens are the adapter's own count."""
    latency_ms: float | None = None
    finish_reason: str | None = None
    error: str | None = None
    purpose: str = REASONING
    """As ``request/prepared.purpose``: ``reasoning``, or the auxiliary job (``compaction``)."""
    traceback: str | None = None
    """For a failed call: the formatted traceback of what raised (bounded, secrets scrubbed)."""


class ModelRetry(Payload):
    """A model call failed transiently and will be tried again."""

    model_call_id: str
    attempt: int
    error: str
    delay_s: float = 0.0


class ToolRequested(Payload):
    """The model asked for a tool call."""

    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    message_id: str | None = None


class ToolDecision(Payload):
    """Whether a requested call may run now, waits for a person, or is refused."""

    call_id: str
    decision: Literal["allowed", "suspended", "denied"]
    reason: str | None = None
    rule_id: str | None = None
    """The permission rule that allowed a call that would otherwise need approval."""


class PermissionRuleData(Payload):
    """A rule a person granted when approving a call (``Answer.approve(remember=...)``)."""

    rule_id: str
    scope: Literal["session", "agent"]
    """``session``: calls in this session; ``agent``: in every session of this agent for
    this user (and namespace)."""
    tool: str
    match: dict[str, Any] = Field(default_factory=dict)
    """Argument constraints: each named argument must equal its value (empty: any call)."""
    agent: str
    """The digest of the fingerprint of the agent it was granted under: it holds only while
    the agent is that one."""
    request_id: str | None = None
    """The approval that granted it."""


class PermissionChanged(Payload):
    """``permission/changed``: a permission rule was granted or revoked."""

    action: Literal["granted", "revoked"]
    rule: PermissionRuleData
    reason: str | None = None
    command_id: str | None = None


class ToolDispatch(Payload):
    """A tool call is about to run (durable before it runs)."""

    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    idempotent: bool = False
    attempt: int = 1
    action_id: str | None = None
    """This execution attempt of the call (a call run again after a crash gets a new one);
    its ``tool/chunk``, ``action/start`` and ``action/end`` carry it."""


class ToolChunk(Payload):
    """Progress reported by a running tool."""

    call_id: str
    index: int
    data: Any = None
    skipped: int = 0
    """Reports before this one that were not recorded (past the per-call bound)."""
    action_id: str | None = None
    """The execution attempt that reported it (``tool/dispatch.action_id``)."""


ToolResultStatus = Literal["success", "error", "cancelled", "denied", "unknown"]


class ToolResult(Payload):
    """The outcome of a tool call (or its reconciled/synthetic stand-in)."""

    call_id: str
    name: str
    status: ToolResultStatus
    output: str = ""
    duration_ms: float | None = None
    synthetic: bool = False
    """No call ran: the result was made up (for example when the turn was cancelled)."""
    reconciled: bool = False
    """A person recorded this outcome with ``reconcile``; the call was not run again."""
    traceback: str | None = None
    """When the tool raised: its formatted traceback (``agentnb.tracebacks``: at most 16 KiB,
    secrets scrubbed). ``output`` holds the one line the model is told."""
    blocks: tuple[BlockPart, ...] = Field(default=(), exclude_if=_empty)
    """A rich result's blocks (``agentnb.blocks``: bytes past a size are in the store's
    blobs); ``output`` holds their text stand-in."""


class ActionStart(Payload):
    """The tool body starts executing."""

    call_id: str
    name: str
    action_id: str | None = None
    """The execution attempt (``tool/dispatch.action_id``)."""


class ActionEnd(Payload):
    """The tool body stopped executing."""

    call_id: str
    name: str
    status: Literal["returned", "failed", "interrupted", "suspended", "denied"]
    action_id: str | None = None
    """The execution attempt (``tool/dispatch.action_id``)."""
    rule_id: str | None = None
    """The permission rule that let this call run without asking a person, if one did."""


InteractionKind = Literal["confirmation", "external_execution", "ask_user"]


class InteractionRequested(Payload):
    """The turn needs a person (or an outside system) before it can go on."""

    request_id: str
    kind: InteractionKind
    call_id: str | None = None
    tool_name: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    prompt: str | None = None


class InteractionResolved(Payload):
    """A pending request was answered or closed."""

    request_id: str
    kind: InteractionKind
    status: Literal["answered", "cancelled"] = "answered"
    answer: dict[str, Any] = Field(default_factory=dict)
    command_id: str | None = None


class ContextBuild(Payload):
    """The context for a model call was assembled.

    ``message_count`` messages (instructions included); ``details``: ``model_call_id``,
    ``tokens`` (the model's count, tools included) and ``compactions`` (how many replacements
    the working context went through): with the log, enough to rebuild the call's context.
    """

    message_count: int = 0
    details: dict[str, Any] = Field(default_factory=dict)


class ContextReplaced(Payload):
    """The oldest ``replaced_count`` messages of the working context were replaced by
    ``messages`` (history itself is never erased: the log keeps every original message)."""

    reason: str
    messages: tuple[Message, ...]
    previous_as_of_seq: int | None = None
    replaced_count: int = 0
    compaction_id: str | None = None


class CompactionStart(Payload):
    """Context compaction begins."""

    before_count: int | None = None
    """Messages in the working context."""
    compaction_id: str | None = None
    reason: str | None = None
    """``trigger`` (the context passed the compactor's share of the window) or ``requested``."""
    tokens_before: int | None = None
    compactor: str | None = None


class CompactionEnd(Payload):
    """Context compaction ended; on ``completed`` a ``context/replaced`` is in the same commit."""

    status: Literal["completed", "failed"]
    before_count: int | None = None
    after_count: int | None = None
    compaction_id: str | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    replaced: tuple[str, ...] = ()
    """Ids of the first and last message replaced."""
    summary: str | None = None
    error: str | None = None


class StateCheckpoint(Payload):
    """Everything needed to continue: the last one wins on recovery."""

    reason: str
    state: dict[str, Any]
    projector_version: int = 1


class RecoveryApplied(Payload):
    """Recovery closed runs cut off by a crash and/or recorded reconciled outcomes."""

    reason: str
    interrupted_runs: tuple[str, ...] = ()
    resolved_call_ids: tuple[str, ...] = ()
    outcomes: dict[str, Any] = Field(default_factory=dict)
    source_seq: int | None = None


class MigrationBaseline(Payload):
    """The first event of a session built from another one's state (fork, import)."""

    state: dict[str, Any]
    source: str | None = None
    source_version: int | str | None = None
    source_hash: str | None = None
    coverage: Literal["baseline_only"] = "baseline_only"
    """What the log holds of the history before this event: only the baseline state, never
    the execution that produced it."""
    format: str | None = Field(default=None, exclude_if=_empty)
    """The shape the state was read from: ``agentnb``, ``openai`` or ``agentscope``
    (``agentnb.baseline``); absent on baselines written before imports converted."""
    dropped: tuple[str, ...] = Field(default=(), exclude_if=_empty)
    """What the import did not keep, one ``path: reason`` line each."""


class StateRestored(Payload):
    """``state/restored``: a runtime restored the session's state from a snapshot plus the
    log after it, before it executed the session again (written in that run's first commit).

    Snapshots are a cache of the fold, never the truth: this records which one a run's
    decisions started from, so an audit can tell a state folded from the first event from
    one restored from a cache."""

    snapshot_seq: int
    """The seq the snapshot stood at."""
    restored_seq: int
    """The seq the state was brought to (the snapshot, then the log's events after it)."""


class VerificationResult(Payload):
    """``verification/result``: what the agent's ``verify`` hook said of a turn's output,
    before the turn completed.

    A failed verification sends the turn back to the model once, with the reason as a user
    message (``retry``); a second failure fails the turn. A hook that raises fails the run
    with the error (no ``verification/result`` then; the ``turn/failed`` says why)."""

    passed: bool
    reason: str | None = None
    """Why it failed (the hook's words), or None."""
    message_id: str
    """The assistant message that was checked."""
    attempt: int = 1
    """Which verification of this turn it is (1, then 2 after a retry)."""
    retry: bool = False
    """Whether the turn goes back to the model with the reason."""


class InboxMark(Payload):
    """``inbox/opened`` / ``inbox/closed`` (inbox log): a run of the envelope's turn began
    taking that turn's input, or stopped taking it (``status``: how the run ended).

    Written after the execution log's ``run/start`` and ``run/end``, as a record for
    readers of the inbox alone; admission is still decided from the execution log (a steer
    binds to the run it shows open, and a completion commits only at the inbox head it read),
    so a mark a crash kept from being written changes no decision."""

    status: str | None = None


class AgentBinding(Payload):
    """``agent/bound``: the fingerprint of the agent a session is bound to (first turn).

    A runtime whose agent has another fingerprint may not start new work in the session
    (``AgentChanged``) unless it was made with ``accept_agent_change=True``.
    """

    agent_id: str
    instructions_sha256: str
    """SHA-256 (hex) of the instructions' UTF-8 text."""
    tools: dict[str, Any] = Field(default_factory=dict)
    """Tool name -> the JSON schema of its parameters."""
    model: str
    """The model's ``name``."""


class WorkspaceBound(Payload):
    """``workspace/bound``: the working directory a session is bound to (its first run;
    again only when a runtime with ``accept_workspace_change=True`` rebinds it).

    A runtime with another workspace may not start new work in the session
    (``WorkspaceChanged``). Tools reach the directory as ``ctx.workspace``.
    """

    root: str
    """The ``nb.Workspace`` root (resolved)."""
    path: str
    """The session's own directory under it (``root`` itself when not per session)."""
    fingerprint: str
    """Identifies the binding (root, per-session or not, path); another one is a change."""
    previous: str | None = None
    """The path bound before, when a runtime accepted a change."""


class WorkspaceCheckpoint(Payload):
    """``workspace/checkpoint``: the manifest of the session's workspace at a run's end.

    Each file's SHA-256 (contents are never copied into the log), so ``inspect().workspace``
    can say whether the files still match.
    """

    path: str
    files: dict[str, str] = Field(default_factory=dict)
    """Relative path -> ``sha256:<hex>`` (or ``symlink:<target>``); empty if ``truncated``."""
    count: int
    bytes: int
    digest: str
    """SHA-256 over ``files`` (all of them, also when truncated)."""
    truncated: bool = False


class AgentRebound(Payload):
    """``agent/changed``: a runtime that accepts agent changes took the session over with
    an agent of another fingerprint; from here on ``current`` is the session's."""

    previous: AgentBinding
    current: AgentBinding
    changes: tuple[str, ...]
    """What differs, one phrase each ("instructions changed", "tools added: x", ...)."""
    reason: str
    """The changes as one line."""


class SessionRef(Payload):
    """A session's key as data (the four parts of ``SessionKey``)."""

    namespace: str
    user_id: str
    agent_id: str
    session_id: str


class SubagentSpawned(Payload):
    """``subagent/spawned``, in the parent: a sub-agent call made a child session (durable
    before the child is created; the child's key and its task's submit key derive from the
    call, so a re-dispatch attaches to the same child turn)."""

    call_id: str
    child: SessionRef
    agent_id: str
    task: str
    name: str | None = None
    """The sub-agent tool's name, as the parent's model called it."""
    on_parent_stop: Literal["interrupt", "cancel", "abandon"] = "interrupt"


class SubagentCompleted(Payload):
    """``subagent/completed``, in the parent: the child's turn ended and the call has its
    result (with the tool/result in the same commit)."""

    call_id: str
    child: SessionRef
    status: Literal["completed", "failed", "cancelled"]
    output: str | None = None
    error: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    """The child turn's usage counters (``UsageTotals``; its own children's included)."""


class SubagentLinked(Payload):
    """``subagent/linked``, the first event of a child session: who spawned it."""

    parent: SessionRef
    turn_id: str
    """The parent's turn that made the call."""
    call_id: str
    root: SessionRef
    """The session at the top of the tree (the parent itself for a first-level child)."""
    depth: int = Field(ge=1)
    """1 for a child of a root session, 2 for a grandchild, ..."""
    path: tuple[str, ...] = ()
    """The agent ids from the root down to this session's agent."""


PlanStatus = Literal["pending", "in_progress", "completed"]


class PlanItem(Payload):
    """One step of a plan the model keeps (the built-in ``todo`` tool)."""

    id: str
    content: str
    status: PlanStatus = "pending"


class PlanChanged(Payload):
    """``plan/changed``: the whole plan after the model rewrote it."""

    items: tuple[PlanItem, ...]
    call_id: str | None = None


class TaskChanged(Payload):
    """``task/changed``: one step of the plan was added, changed status, or removed."""

    id: str
    content: str
    status: PlanStatus | Literal["removed"]
    previous: PlanStatus | None = None
    """Its status before (None: the step is new)."""
    call_id: str | None = None


class PresentationHint(Payload):
    """``presentation/hint``: how a front end should present something; changes no state.

    ``hint`` names it (the view knows ``expand``, ``collapse`` and ``subagent``); ``target``
    is the id of the item it is about (a tool card's call id, ...), ``data`` the rest.
    """

    hint: str
    target: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)


class FeedbackAdded(Payload):
    """``feedback/added``: a person (or a judge) rated a turn's answer.

    Written by the runtime when it carries out the ``feedback`` command that
    ``session.feedback`` accepted; the envelope's ``turn_id`` is the turn rated. At least one
    of ``score``, ``label`` and ``comment`` is set. A turn may hold many; a retraction
    (``feedback/removed``) takes one back. Nothing in the session's state depends on it.
    """

    feedback_id: str
    """Stable id (``fb_...``): what ``session.feedback`` returns, ``retract_feedback`` takes."""
    score: float | None = None
    """A number: thumbs are 1 (up) and 0 (down); 0 or below counts as negative."""
    label: str | None = None
    """A short tag (``positive``, ``negative``, ``wrong-tool``, ...)."""
    comment: str | None = None
    by: str | None = None
    """Who gave it (a user id, ``judge:...``); None when the caller did not say."""
    command_id: str | None = None


class FeedbackRemoved(Payload):
    """``feedback/removed``: a ``feedback/added`` was retracted (it no longer counts)."""

    feedback_id: str
    command_id: str | None = None


class InboxStarted(Payload):
    """The runtime started handling an inbox command (execution log)."""

    command_id: str
    kind: str


class InboxApplied(Payload):
    """Inbox commands whose effect is now committed (execution log)."""

    command_ids: tuple[str, ...]


CommandKind = Literal[
    "submit",
    "steer",
    "inject",
    "respond",
    "resume",
    "interrupt",
    "cancel",
    "reconcile",
    "compact",
    "update",
    "revoke",
    "feedback",
]


class InboxAccepted(Payload):
    """A command durably accepted into the inbox (inbox log)."""

    command_id: str
    kind: CommandKind
    turn_id: str | None = None
    run_id: str | None = None
    input: str | None = None
    key: str | None = None
    """The caller's idempotency key, if any."""
    data: dict[str, Any] = Field(default_factory=dict)
    """Kind-specific details: answers for respond, outcomes for reconcile, ..."""


class ScheduleAdded(Payload):
    """A schedule was added to the session (inbox log; ``session.schedule``): the runtime
    submits ``text`` at each due time, with a key derived from the schedule and the time."""

    schedule_id: str
    text: str
    cron: str | None = None
    """A cron expression (five fields), read in ``tz``."""
    every: float | None = None
    """Seconds between due times, counted from ``anchor``."""
    at: str | None = None
    """One due time (ISO 8601, with its offset)."""
    tz: str = "UTC"
    overlap: str = "skip"
    """What a firing does while a turn runs: ``skip``, ``queue`` or ``steer``."""
    catch_up: str = "one"
    """Missed due times after downtime: ``one`` (the latest), ``all`` or ``none``."""
    key: str | None = None
    """The caller's idempotency key of the ``schedule()`` call."""
    anchor: float
    """When it was added (seconds since the epoch): due times come after it."""


class ScheduleRemoved(Payload):
    """A schedule was removed (inbox log; ``session.unschedule``): it fires no more."""

    schedule_id: str


class ScheduleFired(Payload):
    """A due time of a schedule was handled (inbox log), once per (schedule, due time)."""

    schedule_id: str
    due: float
    """The due time (seconds since the epoch)."""
    disposition: str
    """``submitted``, ``queued`` (behind a running turn), ``steered`` or ``skipped``."""
    key: str
    """The idempotency key of the submit it made (derived from schedule and due time)."""
    missed: int = 0
    """Earlier due times left out by ``catch_up`` (downtime)."""


class InboxHandled(Payload):
    """An inbox command was carried out (inbox log)."""

    command_id: str


class InboxRejected(Payload):
    """An inbox command was refused, with the reason (inbox log)."""

    command_id: str
    reason: str
    kind: str | None = None
    """The refused command's kind: a refused ``submit`` leaves the catalogue's queue."""
    cancelled: bool = False
    """The command was withdrawn by the user's ``cancel`` (a queued task), not refused:
    its outcome is ``cancelled``, where a refusal's is ``rejected``."""


PAYLOADS: dict[str, type[Payload]] = {
    "run/start": RunStart,
    "run/end": RunEnd,
    "run/stop_requested": RunStopRequested,
    "turn/start": TurnStart,
    "turn/resumed": TurnResumed,
    "turn/output": TurnOutput,
    "turn/completed": TurnStatus,
    "turn/suspended": TurnStatus,
    "turn/failed": TurnStatus,
    "turn/interrupted": TurnStatus,
    "turn/cancelled": TurnStatus,
    "step/start": StepStart,
    "step/end": StepEnd,
    "input/received": InputReceived,
    "input/applied": InputApplied,
    "input/discarded": InputDiscarded,
    "message/system": MessageEvent,
    "message/user": MessageEvent,
    "message/assistant": MessageEvent,
    "request/prepared": RequestPrepared,
    "model/dispatch": ModelDispatch,
    "model/chunk": ModelChunk,
    "model/end": ModelEnd,
    "model/retry": ModelRetry,
    "tool/requested": ToolRequested,
    "tool/decision": ToolDecision,
    "tool/dispatch": ToolDispatch,
    "tool/chunk": ToolChunk,
    "tool/result": ToolResult,
    "action/start": ActionStart,
    "action/end": ActionEnd,
    "permission/changed": PermissionChanged,
    "interaction/requested": InteractionRequested,
    "interaction/resolved": InteractionResolved,
    "context/build": ContextBuild,
    "context/replaced": ContextReplaced,
    "compaction/start": CompactionStart,
    "compaction/end": CompactionEnd,
    "state/checkpoint": StateCheckpoint,
    "state/restored": StateRestored,
    "verification/result": VerificationResult,
    "recovery/applied": RecoveryApplied,
    "migration/baseline": MigrationBaseline,
    "agent/bound": AgentBinding,
    "agent/changed": AgentRebound,
    "workspace/bound": WorkspaceBound,
    "workspace/checkpoint": WorkspaceCheckpoint,
    "subagent/spawned": SubagentSpawned,
    "subagent/completed": SubagentCompleted,
    "subagent/linked": SubagentLinked,
    "plan/changed": PlanChanged,
    "task/changed": TaskChanged,
    "presentation/hint": PresentationHint,
    "inbox/started": InboxStarted,
    "inbox/applied": InboxApplied,
    "feedback/added": FeedbackAdded,
    "feedback/removed": FeedbackRemoved,
    # inbox log
    "inbox/accepted": InboxAccepted,
    "inbox/handled": InboxHandled,
    "inbox/rejected": InboxRejected,
    "inbox/opened": InboxMark,
    "inbox/closed": InboxMark,
    "schedule/added": ScheduleAdded,
    "schedule/removed": ScheduleRemoved,
    "schedule/fired": ScheduleFired,
}

SCHEDULE_TYPES = frozenset({"schedule/added", "schedule/removed", "schedule/fired"})
"""Schedule facts: kept in the inbox log, so any writer records them without the lease."""
INBOX_TYPES = (
    frozenset({"inbox/accepted", "inbox/handled", "inbox/rejected", "inbox/opened", "inbox/closed"})
    | SCHEDULE_TYPES
)
"""Types that belong to a session's inbox log, not its execution log."""

BUILTIN_TYPES = frozenset(PAYLOADS)

# Observability-only types: a reader that does not know them can still rebuild state.
_OPTIONAL_BUILTINS = frozenset(
    {
        "model/chunk",
        "tool/chunk",
        "model/retry",
        "context/build",
        "request/prepared",
        "compaction/start",
        "compaction/end",
        "action/start",
        "action/end",
        "task/changed",
        "presentation/hint",
        "schedule/added",
        "schedule/removed",
        "schedule/fired",
        "feedback/added",
        "feedback/removed",
        "workspace/checkpoint",
        "message/system",
        "state/restored",
        "verification/result",
        "inbox/opened",
        "inbox/closed",
    }
)

_RESERVED_PREFIXES = frozenset(t.split("/")[0] for t in BUILTIN_TYPES)
_APP_TYPE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}/[a-z0-9][a-z0-9_.-]{0,127}$")


# --------------------------------------------------------------------------------------------
# Application types


@dataclass(frozen=True, slots=True)
class _AppType:
    name: str
    validate: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None
    required: bool
    reducer: Callable[[dict[str, Any], Event], Mapping[str, Any]] | None = None


_app_types: dict[str, _AppType] = {}
_app_lock = threading.Lock()


def register_event_type(
    name: str,
    *,
    model: type[BaseModel] | None = None,
    validate: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    required: bool = False,
    reducer: Callable[[dict[str, Any], Event], Mapping[str, Any]] | None = None,
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


def reducers() -> dict[str, Callable[[dict[str, Any], Event], Mapping[str, Any]]]:
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
    if (
        not isinstance(type_, str)
        or not _APP_TYPE.match(type_)
        or (type_.split("/", maxsplit=1)[0] in _RESERVED_PREFIXES)
    ):
        raise InvalidInput(
            f"unknown event type {type_!r}: use a built-in type or a namespaced application "
            "type 'vendor/name'"
        )
    app = _app_types.get(type_)
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


# --------------------------------------------------------------------------------------------
# Payloads the runtime builds

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


class Event(BaseModel):
    """One committed (or about to be committed) fact of a session.

    Create events with ``Event.create``; stores assign ``seq`` when they commit a batch
    (``seq == 0`` means not committed yet).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    event_id: str
    """Globally unique, time-ordered id (``evt_<uuid7>``); exports deduplicate by it."""
    seq: int = Field(default=0, ge=0)
    """Position in the session log, gapless from 1; 0 before commit."""
    occurred_at: datetime
    """When the fact happened (UTC). Informational: order by ``seq``."""
    type: str
    turn_id: str | None = None
    run_id: str | None = None
    required: bool = True
    """A reader must know this type to rebuild state; see the module docstring."""
    payload: dict[str, Any]
    """The fact itself: JSON, frozen (see ``FrozenDict``)."""

    @model_validator(mode="after")
    def _freeze_payload(self) -> Event:
        if not isinstance(self.payload, FrozenDict):
            object.__setattr__(self, "payload", freeze_json(self.payload))
        return self

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
        # Every field is checked above: build the frozen model directly, as ``with_seq``
        # does, without pydantic's generic ``model_construct`` (this is on every step's path).
        event = object.__new__(cls)
        object.__setattr__(
            event,
            "__dict__",
            {
                "schema_version": SCHEMA_VERSION,
                "event_id": event_id or new_id("evt"),
                "seq": 0,
                "occurred_at": occurred_at or datetime.now(UTC),
                "type": type,
                "turn_id": turn_id,
                "run_id": run_id,
                "required": req,
                "payload": data,
            },
        )
        object.__setattr__(event, "__pydantic_fields_set__", set(_ALL_FIELDS))
        object.__setattr__(event, "__pydantic_extra__", None)
        object.__setattr__(event, "__pydantic_private__", None)
        return event

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
        event = object.__new__(cls)
        object.__setattr__(
            event,
            "__dict__",
            {
                "schema_version": SCHEMA_VERSION,
                "event_id": new_id("evt"),
                "seq": 0,
                "occurred_at": datetime.now(UTC),
                "type": type,
                "turn_id": turn_id,
                "run_id": run_id,
                "required": type not in _OPTIONAL_BUILTINS if required is None else required,
                "payload": _built_payload(type, payload),
            },
        )
        object.__setattr__(event, "__pydantic_fields_set__", set(_ALL_FIELDS))
        object.__setattr__(event, "__pydantic_extra__", None)
        object.__setattr__(event, "__pydantic_private__", None)
        return event

    def with_seq(self, seq: int) -> Event:
        """This event as committed at ``seq``."""
        # A shallow copy of an already valid, frozen event: what pydantic's __copy__ does,
        # without its generic machinery (this is on every commit's path).
        event = object.__new__(Event)
        fields = dict(self.__dict__)
        fields["seq"] = seq
        object.__setattr__(event, "__dict__", fields)
        object.__setattr__(event, "__pydantic_fields_set__", self.__pydantic_fields_set__)
        object.__setattr__(event, "__pydantic_extra__", self.__pydantic_extra__)
        object.__setattr__(event, "__pydantic_private__", self.__pydantic_private__)
        return event

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
            f"{canonical_json(self.payload)}"
        )


_ALL_FIELDS = frozenset(Event.model_fields)


def builtins_type_name(value: object) -> str:
    return type(value).__name__


def _ts(value: datetime) -> int:
    """Microseconds since the epoch (how stores keep ``occurred_at``)."""
    return round(value.timestamp() * 1_000_000)


def event_digest(events: Iterable[Event]) -> str:
    """SHA-256 over the canonical content of a batch (batch-id replay detection)."""
    text = "\x1e".join([event.content_key() for event in events])
    return hashlib.sha256(text.encode()).hexdigest()
