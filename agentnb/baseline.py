"""Baselines: a session's working state as data, to start another session from.

``Session.export_state()`` returns agentnb's own shape; ``Session.import_baseline(state)``
reads it and two others, each converted to agentnb's messages:

- ``"agentnb"``: what ``export_state`` returns: ``{"format": "agentnb/state", "version": 1,
  "messages": [...], "plan": [...], "permissions": [...], "source", "source_seq"}``
  (``messages`` are ``Message`` records as JSON; ``plan`` the model's plan steps;
  ``permissions`` the session's permission rules in force).
- ``"openai"``: OpenAI chat messages (``[{"role", "content", "tool_calls",
  "tool_call_id"}, ...]``, or a mapping holding them under ``"messages"``).
- ``"agentscope"``: an AgentScope-style ``AgentState``: a mapping whose ``"messages"`` (or
  ``"memory"``) are messages of content blocks (``text``, ``thinking``, ``tool_use``,
  ``tool_result``, media), roles in any case.

Which one is read: ``source`` names it when it is, or starts with, ``agentnb``, ``openai``
or ``agentscope`` (``"openai:thread-42"``); otherwise the shape decides, and a shape that
fits none asks for ``source``. What agentnb keeps of a message: its role, text, tool calls,
tool results and reasoning. Everything else given (images, audio, speaker names, metadata,
system prompts: the instructions are ``nb.Agent``'s) is listed in ``ImportReport.dropped``,
with its path, never silently lost. A near miss (a missing or ill-typed field, a tool
result answering no call, a call without a result) is ``InvalidInput`` naming the field's
path; nothing is written then.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from agentnb.errors import InvalidInput
from agentnb.events import (
    Message,
    PermissionRuleData,
    PlanItem,
    ReasoningPart,
    ToolCallData,
    canonical_json,
)

__all__ = [
    "FORMATS",
    "STATE_FORMAT",
    "STATE_VERSION",
    "Baseline",
    "Dropped",
    "ImportReport",
    "convert",
    "format_of",
]

STATE_FORMAT = "agentnb/state"
"""The ``format`` marker of agentnb's own exported state."""
STATE_VERSION = 1
"""The version of that shape; a newer one is refused rather than half read."""
FORMATS = ("agentnb", "openai", "agentscope")

_OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool", "function"}
_AGENTSCOPE_BLOCKS = {"tool_use", "tool_result", "thinking"}


@dataclass(frozen=True, slots=True)
class Dropped:
    """Something an import did not keep: where it was in the given state, and why."""

    path: str
    """Its place in the state given, e.g. ``messages[3].content[1]``."""
    reason: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What ``import_baseline`` did."""

    format: str
    """The shape read: ``agentnb``, ``openai`` or ``agentscope``."""
    source: str | None
    """The provenance recorded on the baseline."""
    messages: int
    """How many messages the new session starts from."""
    dropped: tuple[Dropped, ...] = ()
    """Everything given that the session does not hold, in the order it was met."""
    imported: bool = True
    """False when this very baseline was imported already (nothing was written)."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """A state converted to agentnb's shape, ready for a ``migration/baseline`` event."""

    format: str
    state: dict[str, Any]
    dropped: tuple[Dropped, ...] = field(default=())

    @property
    def digest(self) -> str:
        return hashlib.sha256(canonical_json(self.state).encode()).hexdigest()


def format_of(state: object, source: str | None) -> str:
    """The shape ``state`` is read as: named by ``source``, else told by the shape itself."""
    if source is not None:
        head = source.split(":", 1)[0].strip().lower()
        if head in FORMATS:
            return head
    if isinstance(state, Mapping):
        if state.get("format") == STATE_FORMAT:
            return "agentnb"
        if "memory" in state:
            return "agentscope"
        messages = state.get("messages")
        if isinstance(messages, list):
            if not messages or all(_looks_native(m) for m in messages):
                return "agentnb"
            return "agentscope" if _looks_agentscope(messages) else "openai"
    elif isinstance(state, list) and not isinstance(state, str):
        return "agentscope" if _looks_agentscope(state) else "openai"
    raise InvalidInput(
        "cannot tell what kind of state this is: pass what export_state() returned, a list "
        "of OpenAI chat messages, or an AgentScope AgentState (a mapping with 'messages' of "
        "content blocks); name it with source='agentnb' | 'openai' | 'agentscope'"
    )


def _looks_native(message: object) -> bool:
    return isinstance(message, Mapping) and "text" in message and "content" not in message


def _looks_agentscope(messages: Iterable[object]) -> bool:
    for m in messages:
        if not isinstance(m, Mapping):
            continue
        role = m.get("role")
        if isinstance(role, str) and role != role.lower():
            return True
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(b, Mapping) and b.get("type") in _AGENTSCOPE_BLOCKS for b in content
        ):
            return True
    return False


def convert(state: object, *, source: str | None) -> Baseline:
    """``state`` in agentnb's shape, with what was dropped; ``InvalidInput`` naming the
    field of a near miss."""
    kind = format_of(state, source)
    if kind == "agentnb":
        return _native(state)
    report = _Report()
    if kind == "openai":
        raw = _message_list(state, "messages")
        messages = _OpenAI(report).convert(raw)
    else:
        messages = _AgentScope(report).convert(state)
    _check_calls_answered(messages)
    return Baseline(
        kind,
        {"format": STATE_FORMAT, "version": STATE_VERSION, "messages": messages},
        tuple(report.items),
    )


# -- agentnb's own ------------------------------------------------------------------------------


def _native(state: object) -> Baseline:
    if not isinstance(state, Mapping):
        raise InvalidInput(
            f"state must be a mapping (what export_state() returned), got {type(state).__name__}"
        )
    version = state.get("version", STATE_VERSION)
    if not isinstance(version, int) or isinstance(version, bool) or version > STATE_VERSION:
        raise InvalidInput(
            f"version: this agentnb reads exported state up to version {STATE_VERSION}, got "
            f"{version!r}; export it with this version, or upgrade agentnb"
        )
    messages = [
        _validated(Message, m, f"messages[{i}]").model_dump(mode="json")
        for i, m in enumerate(_message_list(state, "messages"))
    ]
    plan = [
        _validated(PlanItem, item, f"plan[{i}]").model_dump(mode="json")
        for i, item in enumerate(_list(state, "plan"))
    ]
    dropped: list[Dropped] = []
    rules = []
    for i, rule in enumerate(_list(state, "permissions")):
        checked = _validated(PermissionRuleData, rule, f"permissions[{i}]")
        if checked.scope == "agent":
            dropped.append(
                Dropped(
                    f"permissions[{i}]",
                    f"rule {checked.rule_id} is agent-wide: it stays with the session that "
                    "granted it (it already holds for every session of that agent and user)",
                )
            )
            continue
        rules.append(checked.model_dump(mode="json"))
    known = {"format", "version", "messages", "plan", "permissions", "source", "source_seq"}
    for name in state:
        if name not in known:
            raise InvalidInput(
                f"{name}: not a field of agentnb's exported state (it has "
                f"{', '.join(sorted(known))}); pass source='openai' or 'agentscope' for "
                "another framework's state"
            )
    converted: dict[str, Any] = {
        "format": STATE_FORMAT,
        "version": STATE_VERSION,
        "messages": messages,
    }
    if plan:
        converted["plan"] = plan
    if rules:
        converted["permissions"] = rules
    for name in ("source", "source_seq"):
        if state.get(name) is not None:
            converted[name] = state[name]
    return Baseline("agentnb", converted, tuple(dropped))


_M = TypeVar("_M", Message, PlanItem, PermissionRuleData)


def _validated(model: type[_M], value: object, path: str) -> _M:
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise InvalidInput(
            f"{path}{'.' + where if where else ''}: {error['msg']} (got "
            f"{_short(error.get('input'))}); see Session.export_state() for the shape"
        ) from None


# -- OpenAI chat messages -----------------------------------------------------------------------


class _Report:
    def __init__(self) -> None:
        self.items: list[Dropped] = []
        self._ids = 0

    def drop(self, path: str, reason: str) -> None:
        self.items.append(Dropped(path, reason))

    def message_id(self, given: object, seen: set[str]) -> str:
        if isinstance(given, str) and given and given not in seen and len(given) <= 256:
            seen.add(given)
            return given
        while True:
            self._ids += 1
            made = f"msg_import_{self._ids:06d}"
            if made not in seen:
                seen.add(made)
                return made


class _OpenAI:
    def __init__(self, report: _Report) -> None:
        self.report = report
        self.seen: set[str] = set()
        self.names: dict[str, str] = {}
        """call id -> tool name, for the tool messages that answer them."""

    def convert(self, messages: Sequence[object]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, m in enumerate(messages):
            path = f"messages[{i}]"
            if not isinstance(m, Mapping):
                raise InvalidInput(f"{path}: a message must be a mapping, got {_short(m)}")
            role = m.get("role")
            if role not in _OPENAI_ROLES:
                raise InvalidInput(
                    f"{path}.role: must be one of {', '.join(sorted(_OPENAI_ROLES))}, got "
                    f"{_short(role)}"
                )
            converted = self.message(m, str(role), path)
            if converted is not None:
                out.append(converted)
        return out

    def message(self, m: Mapping[str, Any], role: str, path: str) -> dict[str, Any] | None:
        if role in ("system", "developer"):
            self.report.drop(
                path,
                f"{role} message: a session's instructions are its agent's "
                "(nb.Agent(instructions=...))",
            )
            return None
        if role == "function":
            self.report.drop(path, "legacy 'function' message (use tool messages)")
            return None
        text = self.content(m.get("content"), f"{path}.content")
        out: dict[str, Any] = {"id": self.report.message_id(m.get("id"), self.seen), "role": role}
        kept = {"role", "content", "id"}
        if role == "assistant":
            refusal = m.get("refusal")
            kept.add("refusal")
            if isinstance(refusal, str) and refusal:
                if text:
                    self.report.drop(f"{path}.refusal", "a refusal beside content")
                else:
                    text = refusal
            calls = m.get("tool_calls") or []
            kept.add("tool_calls")
            if not isinstance(calls, list):
                raise InvalidInput(f"{path}.tool_calls: must be a list, got {_short(calls)}")
            converted = (self.call(c, f"{path}.tool_calls[{j}]") for j, c in enumerate(calls))
            tool_calls = [c for c in converted if c is not None]
            if tool_calls:
                out["tool_calls"] = tool_calls
        if role == "tool":
            call_id = m.get("tool_call_id")
            kept.add("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidInput(
                    f"{path}.tool_call_id: a tool message names the call it answers, got "
                    f"{_short(call_id)}"
                )
            if call_id not in self.names:
                raise InvalidInput(
                    f"{path}.tool_call_id: {call_id!r} answers no tool call of an earlier "
                    "assistant message"
                )
            out["call_id"] = call_id
            out["name"] = self.names[call_id]
            kept.add("name")
        out["text"] = text
        for name, value in m.items():
            if name not in kept and value not in (None, "", [], {}):
                self.report.drop(f"{path}.{name}", f"field {name!r} (agentnb keeps no {name})")
        return out

    def content(self, content: object, path: str) -> str:
        if content is None:
            return ""
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            raise InvalidInput(
                f"{path}: must be text or a list of content parts, got {_short(content)}"
            )
        texts: list[str] = []
        for j, part in enumerate(content):
            where = f"{path}[{j}]"
            if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                raise InvalidInput(f"{where}: a content part is a mapping with a 'type'")
            if part["type"] in ("text", "refusal"):
                value = part.get(part["type"])
                if not isinstance(value, str):
                    raise InvalidInput(f"{where}.{part['type']}: must be text, got {_short(value)}")
                texts.append(value)
            else:
                self.report.drop(where, f"{part['type']} part (only text is kept)")
        return "\n".join(texts)

    def call(self, call: object, path: str) -> dict[str, Any] | None:
        if not isinstance(call, Mapping):
            raise InvalidInput(f"{path}: a tool call must be a mapping, got {_short(call)}")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidInput(f"{path}.id: a tool call needs its id, got {_short(call_id)}")
        if call.get("type", "function") != "function":
            self.report.drop(path, f"{call.get('type')} tool call (only function calls)")
            return None
        function = call.get("function")
        if not isinstance(function, Mapping):
            raise InvalidInput(
                f"{path}.function: must be a mapping with name and arguments, got "
                f"{_short(function)}"
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"{path}.function.name: must be the tool's name, got {_short(name)}")
        arguments = _arguments(function.get("arguments"), f"{path}.function.arguments")
        self.names[call_id] = name
        return ToolCallData(call_id=call_id, name=name, arguments=arguments).model_dump(mode="json")


def _arguments(raw: object, path: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise InvalidInput(f"{path}: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise InvalidInput(f"{path}: must be a JSON object, got {_short(raw)}")
    return raw


# -- AgentScope AgentState ----------------------------------------------------------------------


class _AgentScope:
    def __init__(self, report: _Report) -> None:
        self.report = report
        self.seen: set[str] = set()
        self.names: dict[str, str] = {}

    def convert(self, state: object) -> list[dict[str, Any]]:
        if isinstance(state, list):
            return self.messages(state, "messages")
        if not isinstance(state, Mapping):
            raise InvalidInput(
                f"an AgentScope AgentState is a mapping with 'messages', got {_short(state)}"
            )
        if "messages" in state:
            name, messages = "messages", state["messages"]
        elif "memory" in state:
            name, messages = "memory", state["memory"]
            if isinstance(messages, Mapping):  # a memory module's state: {"content": [...]}
                name, messages = "memory.content", messages.get("content")
        else:
            raise InvalidInput("messages: an AgentState holds its messages under 'messages'")
        if not isinstance(messages, list):
            raise InvalidInput(f"{name}: must be a list of messages, got {_short(messages)}")
        for key, value in state.items():
            if key not in ("messages", "memory") and value not in (None, "", [], {}):
                reason = (
                    "the system prompt: a session's instructions are its agent's"
                    if key in ("sys_prompt", "system_prompt", "instructions")
                    else f"field {key!r} of the state"
                )
                self.report.drop(key, reason)
        return self.messages(messages, name)

    def messages(self, messages: list[object], name: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for i, entry in enumerate(messages):
            path = f"{name}[{i}]"
            m = entry
            if isinstance(entry, list) and entry and isinstance(entry[0], Mapping):
                m = entry[0]  # a memory entry: [message, marks]
            if not isinstance(m, Mapping):
                raise InvalidInput(f"{path}: a message must be a mapping, got {_short(m)}")
            out += self.message(m, path)
        return out

    def message(self, m: Mapping[str, Any], path: str) -> list[dict[str, Any]]:
        role = m.get("role")
        if not isinstance(role, str) or role.lower() not in ("user", "assistant", "system", "tool"):
            raise InvalidInput(
                f"{path}.role: must be user, assistant, system or tool (any case), got "
                f"{_short(role)}"
            )
        role = role.lower()
        content = m.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        elif content is None:
            content = []
        if not isinstance(content, list):
            raise InvalidInput(
                f"{path}.content: must be text or a list of content blocks, got {_short(content)}"
            )
        texts: list[str] = []
        reasoning: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for j, block in enumerate(content):
            where = f"{path}.content[{j}]"
            if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
                raise InvalidInput(f"{where}: a content block is a mapping with a 'type'")
            kind = block["type"]
            if kind == "text":
                texts.append(_text(block, "text", where))
            elif kind == "thinking" and role == "assistant":
                thought = _text(block, "thinking", where)
                reasoning.append(ReasoningPart(text=thought).model_dump(mode="json"))
            elif kind == "tool_use" and role == "assistant":
                calls.append(self.call(block, where))
            elif kind == "tool_result":
                results.append(self.result(block, where))
            else:
                self.report.drop(where, f"{kind} block in a {role} message (not kept)")
        for key, value in m.items():
            if key not in ("role", "content", "id") and value not in (None, "", [], {}):
                self.report.drop(f"{path}.{key}", f"field {key!r} of the message")
        out: list[dict[str, Any]] = []
        if role == "system":
            if texts:
                self.report.drop(path, "system message: a session's instructions are its agent's")
        elif role == "tool":
            if texts:
                self.report.drop(path, "text of a tool message outside its tool_result blocks")
        elif texts or calls or reasoning:
            message: dict[str, Any] = {
                "id": self.report.message_id(m.get("id"), self.seen),
                "role": role,
                "text": "\n".join(texts),
            }
            if calls:
                message["tool_calls"] = calls
            if reasoning:
                message["reasoning"] = reasoning
            out.append(message)
        out += results
        return out

    def call(self, block: Mapping[str, Any], path: str) -> dict[str, Any]:
        call_id, name = _block_ids(block, path)
        arguments = _arguments(block.get("input"), f"{path}.input")
        self.names[call_id] = name
        return ToolCallData(call_id=call_id, name=name, arguments=arguments).model_dump(mode="json")

    def result(self, block: Mapping[str, Any], path: str) -> dict[str, Any]:
        call_id, name = _block_ids(block, path)
        if call_id not in self.names:
            raise InvalidInput(
                f"{path}.id: {call_id!r} answers no tool_use block of an earlier message"
            )
        output = block.get("output")
        if isinstance(output, str):
            text = output
        elif isinstance(output, list):
            texts = []
            for k, part in enumerate(output):
                where = f"{path}.output[{k}]"
                if isinstance(part, Mapping) and part.get("type") == "text":
                    texts.append(_text(part, "text", where))
                else:
                    kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                    self.report.drop(where, f"{kind} block of a tool result (only text is kept)")
            text = "\n".join(texts)
        elif output is None:
            text = ""
        else:
            raise InvalidInput(
                f"{path}.output: must be text or a list of content blocks, got {_short(output)}"
            )
        return {
            "id": self.report.message_id(None, self.seen),
            "role": "tool",
            "text": text,
            "call_id": call_id,
            "name": self.names[call_id] or name,
        }


def _block_ids(block: Mapping[str, Any], path: str) -> tuple[str, str]:
    call_id, name = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidInput(f"{path}.id: a {block['type']} block needs the call's id")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{path}.name: a {block['type']} block needs the tool's name")
    return call_id, name


def _text(block: Mapping[str, Any], key: str, path: str) -> str:
    value = block.get(key)
    if not isinstance(value, str):
        raise InvalidInput(f"{path}.{key}: must be text, got {_short(value)}")
    return value


# -- shared -----------------------------------------------------------------------------------


def _message_list(state: object, name: str) -> list[object]:
    messages = state if isinstance(state, list) else None
    if isinstance(state, Mapping):
        if name not in state:
            raise InvalidInput(f"{name}: the state holds no {name!r} list")
        messages = state[name]
    if not isinstance(messages, list):
        raise InvalidInput(f"{name}: must be a list of messages, got {_short(messages)}")
    return messages


def _list(state: Mapping[str, Any], name: str) -> list[object]:
    value = state.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput(f"{name}: must be a list, got {_short(value)}")
    return value


def _check_calls_answered(messages: Sequence[Mapping[str, Any]]) -> None:
    answered = {m["call_id"] for m in messages if m["role"] == "tool"}
    for i, m in enumerate(messages):
        for call in m.get("tool_calls", ()):
            if call["call_id"] not in answered:
                raise InvalidInput(
                    f"tool call {call['call_id']!r} ({call['name']}) of the {_ordinal(i)} "
                    "converted message has no result: a baseline starts at a quiescent point "
                    "(give the call's result, or leave the call out)"
                )


def _ordinal(i: int) -> str:
    n = i + 1
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
