"""Pure folds of a session's two logs: what the runtime and the Session facade decide from.

``SessionState`` folds the execution log (turns, runs, the model context, tool calls, inputs
applied); ``InboxState`` folds the inbox log (commands in acceptance order, which run is open
for steering). ``next_command`` decides which accepted command runs next. No I/O here.

Why it is long: the two folds (execution log and inbox) and the effective-status and
next-command rules that read them must change together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

from agentnb.errors import Corrupt
from agentnb.events import REASONING, Event, Message, made_once, message_of
from agentnb.projections.app_state import AppStates

__all__ = [
    "CONTEXT_TYPES",
    "FOLDED_TYPES",
    "INSIDE_A_STEP",
    "TERMINAL_TURN",
    "TRANSCRIPT_TYPES",
    "Command",
    "ContextLoader",
    "InboxState",
    "LazyMessages",
    "RunState",
    "SessionState",
    "ToolCallState",
    "TurnState",
    "build_context",
    "next_command",
    "retire_turns",
    "tool_message",
]

PROJECTOR_VERSION = 4
"""Bumped whenever the fold changes: older snapshots are then ignored and rebuilt."""

TERMINAL_TURN = frozenset({"completed", "cancelled"})
"""Turn statuses after which nothing more can happen to the turn."""
PARKING = frozenset({"suspended", "interrupted", "failed"})
"""Turn statuses that park the queue until the turn is answered, resumed or cancelled."""
INSIDE_A_STEP = frozenset(
    {
        "step/start",
        "step/end",
        "context/build",
        "request/prepared",
        "model/dispatch",
        "model/chunk",
        "model/retry",
        "model/end",
        "message/assistant",
        "tool/requested",
        "tool/decision",
        "tool/dispatch",
        "tool/chunk",
        "tool/result",
        "action/start",
        "action/end",
        "state/checkpoint",
    }
)
"""Types of the events inside a step: none changes whether a turn has settled (no run's or
turn's status, no command handled or refused, no question or approval asked), so a commit of
only these wakes nobody who waits for a turn to end."""


@dataclass
class TurnState:
    turn_id: str
    input: str
    status: str = "queued"
    run_ids: list[str] = field(default_factory=list)
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    output: str | None = None
    command_id: str | None = None
    first_seq: int = 0
    """The seq of the turn's ``turn/start``: a turn's events follow it contiguously."""
    usage: dict[str, int] = field(default_factory=dict)
    """Counters of ``UsageTotals`` (absent: 0), over all the turn's runs."""


@dataclass
class RunState:
    run_id: str
    turn_id: str
    command_id: str | None
    reason: str
    status: str = "running"
    steps: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    inbox_seq: int | None = None
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    """Counters of ``UsageTotals`` (absent: 0) of this run alone."""


@dataclass
class ToolCallState:
    call_id: str
    name: str
    arguments: dict[str, Any]
    turn_id: str | None
    run_id: str | None
    idempotent: bool = False
    dispatched: bool = False
    result: dict[str, Any] | None = None
    attempts: int = 0
    """Times it was dispatched."""
    asking: str | None = None
    """The request id of the question it stopped at (``ctx.ask``), until it runs again."""


def _dc(value: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON-ready data: a shallow copy (``asdict`` deep-copies every
    nested dict, which made snapshots cost more the longer a session lived)."""
    out = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    for k, v in out.items():
        if isinstance(v, datetime):
            out[k] = v.isoformat()
        elif isinstance(v, list):
            out[k] = list(v)
        elif type(v) is dict:
            out[k] = dict(v)
    return out


def _dates(data: dict[str, Any]) -> dict[str, Any]:
    return {
        k: datetime.fromisoformat(v) if k.endswith("_at") and isinstance(v, str) else v
        for k, v in data.items()
    }


def build_context(instructions: str, context: Iterable[Message]) -> list[Message]:
    """The messages a model call sees: the instructions, then the conversation."""
    messages = (
        [Message(id="msg_instructions", role="system", text=instructions)] if instructions else []
    )
    return messages + list(context)


def tool_message(
    call_id: str, name: str, output: str, turn_id: str | None, blocks: Any = ()
) -> Message:
    """The context message a tool result becomes (``blocks``: a rich result's parts)."""
    return Message(
        id=f"msg_{call_id}",
        role="tool",
        text=output,
        call_id=call_id,
        name=name,
        turn_id=turn_id,
        blocks=tuple(blocks or ()),
    )


ContextLoader = Callable[[int], list[Message]]
"""through_seq -> the context messages committed at or below that seq (read from the log)."""


class LazyMessages(Sequence[Message]):
    """Messages that are read the first time they are used (then kept).

    What only grows with a conversation (its messages) is read from the log when asked for,
    not whenever a session is opened: ``Inspection.next_context`` and
    ``ChatSnapshot.messages`` are these. It compares equal to a sequence of the same messages.
    """

    __slots__ = ("_items", "_load")

    def __init__(self, load: Callable[[], Sequence[Message]]) -> None:
        self._load: Callable[[], Sequence[Message]] | None = load
        self._items: tuple[Message, ...] | None = None

    @classmethod
    def of(cls, messages: Sequence[Message]) -> LazyMessages:
        """Messages already at hand."""
        lazy = cls(tuple)
        lazy._items = tuple(messages)
        lazy._load = None
        return lazy

    def _all(self) -> tuple[Message, ...]:
        if self._items is None:
            assert self._load is not None
            self._items = tuple(self._load())
            self._load = None
        return self._items

    def __len__(self) -> int:
        return len(self._all())

    @overload
    def __getitem__(self, index: int) -> Message: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...
    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        return self._all()[index]

    def __iter__(self) -> Iterator[Message]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyMessages | tuple | list):
            return self._all() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._items is None:
            return "LazyMessages(<not read yet>)"
        return f"LazyMessages({list(self._items)!r})"


class SessionState:
    """Fold of the execution log. ``apply`` one event at a time, in seq order.

    The working context (``context``) only grows, so a snapshot does not carry it: a state
    loaded from one holds the context's length and the seq it stands at, and reads the
    messages from the log (``context_loader``) the first time someone asks for them.
    Messages folded meanwhile wait in a tail and join them then.
    """

    # Replaced, never changed in place, so a class-level default is safe to share.
    workspace: dict[str, Any] | None = None
    """The workspace the session is bound to (``workspace/bound``), or None."""
    workspace_checkpoint: dict[str, Any] | None = None
    """The last ``workspace/checkpoint`` payload, with its ``seq``, or None."""
    _app: AppStates | None = None

    @property
    def app(self) -> AppStates:
        """The application states registered reducers fold (``session.app_state``)."""
        if self._app is None:
            self._app = AppStates()
        return self._app

    @app.setter
    def app(self, value: AppStates) -> None:
        self._app = value

    def __init__(self) -> None:
        self.seq = 0
        self.turns: dict[str, TurnState] = {}
        self.runs: dict[str, RunState] = {}
        self.run_of_command: dict[str, str] = {}
        """command_id -> the run that command started."""
        self.active_run: str | None = None
        self._context: list[Message] | None = []
        """The messages, or None while the part through ``_context_through`` is unread."""
        self._context_tail: list[Message] = []
        """Messages folded while the context was unread (they follow it)."""
        self._context_through = 0
        self.context_count = 0
        """How many messages the context holds (known without reading them)."""
        self.context_loader: ContextLoader | None = None
        self.transcript_loader: ContextLoader | None = None
        """Reads every message ever committed (nothing replaced), for the transcript."""
        self.compactions = 0
        """How many times the working context was compacted (``context/replaced``)."""
        self.usage: dict[str, int] = {}
        """Counters of ``UsageTotals`` over every turn of the session (retired ones too)."""
        self.retired_turns = 0
        """Finished turns no longer kept here (``retire_turns``): read them from the log."""
        self.retired_through = 0
        """Every event at or below this seq belongs to a retired turn (0: none retired)."""
        self.handled: set[str] = set()
        self.applied_inputs: set[str] = set()
        self.received_inputs: dict[str, dict[str, Any]] = {}
        self.tool_calls: dict[str, ToolCallState] = {}
        self.pending: dict[str, dict[str, Any]] = {}
        """Open requests for a person: request_id -> interaction/requested payload + turn_id."""
        self.interactions: dict[str, dict[str, Any]] = {}
        """Every request ever made, resolved or not."""
        self.resolved: dict[str, dict[str, Any]] = {}
        """request_id -> interaction/resolved payload."""
        self.discarded_inputs: set[str] = set()
        self.last_checkpoint_seq = 0
        self.requested_messages = 0
        """How many context messages the last model request already carried."""
        self.agent: dict[str, Any] | None = None
        """The fingerprint of the agent the session is bound to (``agent/bound``), or None."""
        self.permissions: dict[str, dict[str, Any]] = {}
        """Permission rules granted in this session and not revoked: rule_id -> rule
        (``permission/changed``). An agent change ends them all."""
        self.compacting = False
        """Between a ``compaction/start`` and its ``compaction/end``: model calls there are
        the summariser's (auxiliary), also in logs written before ``purpose`` was recorded."""
        self.children: dict[str, dict[str, Any]] = {}
        """call_id -> a sub-agent call: the ``subagent/spawned`` payload with ``turn_id``,
        ``run_id``, and once it ended the ``subagent/completed`` fields (``status`` is
        ``running`` until then)."""
        self.link: dict[str, Any] | None = None
        """The ``subagent/linked`` payload of a child session (None for a root session)."""
        self.plan: list[dict[str, Any]] = []
        """The newest plan the model keeps (``plan/changed``), step by step."""

    @classmethod
    def fold(cls, events: Iterable[Event]) -> SessionState:
        state = cls()
        for event in events:
            state.apply(event)
        return state

    # -- the working context -----------------------------------------------------------------

    @property
    def context(self) -> list[Message]:
        """Every message of the working context, in order (read from the log if unread)."""
        if self._context is None:
            if self.context_loader is None:
                raise RuntimeError("this state's context was not loaded and has no loader")
            loaded = self.context_loader(self._context_through)
            self._context = loaded + self._context_tail
            self._context_tail = []
            if len(self._context) != self.context_count:
                raise Corrupt(
                    f"the log holds {len(self._context)} context messages through seq "
                    f"{self.seq}, the fold counted {self.context_count}"
                )
        return self._context

    @property
    def context_loaded(self) -> bool:
        return self._context is not None

    def _add_message(self, message: Message) -> None:
        if self._context is None:
            self._context_tail.append(message)
        else:
            self._context.append(message)
        self.context_count += 1

    def messages_through(self, seq: int) -> LazyMessages:
        """The context as it stood at ``seq`` (this state's seq or earlier), read lazily.

        In memory: copied now. Unread: read from the log when first used, so the result never
        changes as this state folds on.
        """
        if self._context is not None and seq == self.seq:
            return LazyMessages.of(self._context)
        loader = self.context_loader
        if loader is None:
            return LazyMessages.of(self.context)
        return LazyMessages(lambda: loader(seq))

    def transcript_through(self, seq: int) -> LazyMessages:
        """Every message committed at or below ``seq``: the context, unless a compaction
        replaced part of it, then read from the log (``transcript_loader``)."""
        loader = self.transcript_loader
        if self.compactions == 0 or loader is None:
            return self.messages_through(seq)
        return LazyMessages(lambda: loader(seq))

    def last_message(self) -> Message | None:
        """The newest context message, without reading the whole context."""
        if self._context_tail:
            return self._context_tail[-1]
        if self.context_count == 0:
            return None
        return self.context[-1]

    # -- snapshots (a cache of the fold, so reopening a long session need not replay it) --

    def dump(self) -> dict[str, Any]:
        """The whole fold as JSON-ready data; ``load`` gives an equal state back."""
        return {
            "version": PROJECTOR_VERSION,
            "seq": self.seq,
            "turns": [_dc(t) for t in self.turns.values()],
            "runs": [_dc(r) for r in self.runs.values()],
            "run_of_command": dict(self.run_of_command),
            "active_run": self.active_run,
            "context_count": self.context_count,
            "usage": dict(self.usage),
            "compactions": self.compactions,
            "retired_turns": self.retired_turns,
            "retired_through": self.retired_through,
            "handled": sorted(self.handled),
            "applied_inputs": sorted(self.applied_inputs),
            "received_inputs": dict(self.received_inputs),
            "tool_calls": [_dc(c) for c in self.tool_calls.values()],
            "pending": dict(self.pending),
            "interactions": dict(self.interactions),
            "resolved": dict(self.resolved),
            "discarded_inputs": sorted(self.discarded_inputs),
            "last_checkpoint_seq": self.last_checkpoint_seq,
            "requested_messages": self.requested_messages,
            "agent": self.agent,
            "workspace": self.workspace,
            "workspace_checkpoint": self.workspace_checkpoint,
            "compacting": self.compacting,
            "permissions": dict(self.permissions),
            "children": dict(self.children),
            "link": self.link,
            "plan": list(self.plan),
            "app": self.app.dump(),
        }

    @classmethod
    def load(
        cls, data: dict[str, Any], context_loader: ContextLoader | None = None
    ) -> SessionState:
        """The state ``dump`` described; ``ValueError`` if it comes from another version.

        ``context_loader`` reads the context's messages from the log when first asked for.
        """
        if data.get("version") != PROJECTOR_VERSION:
            raise ValueError(f"snapshot version {data.get('version')} is not {PROJECTOR_VERSION}")
        state = cls()
        state.seq = data["seq"]
        state.turns = {t["turn_id"]: TurnState(**_dates(t)) for t in data["turns"]}
        state.runs = {r["run_id"]: RunState(**_dates(r)) for r in data["runs"]}
        state.run_of_command = dict(data["run_of_command"])
        state.active_run = data["active_run"]
        state.context_loader = context_loader
        state._context = None if data["context_count"] else []
        state._context_through = state.seq
        state.context_count = data["context_count"]
        state.usage = dict(data["usage"])
        state.compactions = data["compactions"]
        state.retired_turns = data["retired_turns"]
        state.retired_through = data["retired_through"]
        state.handled = set(data["handled"])
        state.applied_inputs = set(data["applied_inputs"])
        state.received_inputs = dict(data["received_inputs"])
        state.tool_calls = {c["call_id"]: ToolCallState(**c) for c in data["tool_calls"]}
        state.pending = dict(data["pending"])
        state.interactions = dict(data["interactions"])
        state.resolved = dict(data["resolved"])
        state.discarded_inputs = set(data["discarded_inputs"])
        state.last_checkpoint_seq = data["last_checkpoint_seq"]
        state.requested_messages = data["requested_messages"]
        state.agent = data.get("agent")  # snapshots older than agent binding have none
        state.workspace = data.get("workspace")  # older snapshots: no workspace bound
        state.workspace_checkpoint = data.get("workspace_checkpoint")
        state.compacting = data["compacting"]
        state.permissions = dict(data["permissions"])
        # Snapshots older than sub-agents have none (their logs held none either).
        state.children = dict(data.get("children") or {})
        state.link = data.get("link")
        state.plan = list(data.get("plan") or ())
        state.app = AppStates.load(data.get("app"))
        return state

    # -- queries -----------------------------------------------------------------------------

    @property
    def latest_turn(self) -> TurnState | None:
        """The most recently started turn."""
        for turn in reversed(self.turns.values()):
            if turn.run_ids or turn.status == "cancelled":
                return turn
        return None

    def uncertain_calls(self, turn_id: str | None = None) -> list[ToolCallState]:
        """Dispatched tool calls that have no result (of ``turn_id`` if given).

        A sub-agent call never is: its child session says what happened, and running it
        again attaches to the same child turn.
        """
        return [
            c
            for c in self.tool_calls.values()
            if c.dispatched
            and c.result is None
            and c.asking is None  # stopped at a question: the answer runs it again
            and (turn_id is None or c.turn_id == turn_id)
            and c.call_id not in self.children
        ]

    def children_of(self, turn_id: str | None = None) -> list[dict[str, Any]]:
        """The sub-agent calls (``children`` values) of ``turn_id``, or of every kept turn."""
        return [c for c in self.children.values() if turn_id is None or c["turn_id"] == turn_id]

    def open_calls(self, turn_id: str) -> list[ToolCallState]:
        """Tool calls of the turn's last assistant message that have no result yet."""
        for message in reversed(self.context):
            if message.role == "assistant" and message.turn_id == turn_id:
                return [
                    self.tool_calls[c.call_id]
                    for c in message.tool_calls
                    if c.call_id in self.tool_calls and self.tool_calls[c.call_id].result is None
                ]
            if message.turn_id != turn_id:
                break
        return []

    def pending_of(self, turn_id: str) -> list[dict[str, Any]]:
        return [r for r in self.pending.values() if r["turn_id"] == turn_id]

    # -- the fold ----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        self.seq = event.seq
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event, event.payload)
        else:
            self.app.apply(event)  # an application type with a reducer, or nothing

    def _turn(self, event: Event) -> TurnState | None:
        return self.turns.get(event.turn_id) if event.turn_id else None

    def _on_turn_start(self, event: Event, p: Any) -> None:
        tid = event.turn_id or ""
        turn = self.turns.get(tid)
        if turn is None:
            turn = self.turns[tid] = TurnState(tid, p["input"], created_at=event.occurred_at)
        turn.command_id = p.get("command_id")
        turn.started_at = turn.started_at or event.occurred_at
        turn.first_seq = turn.first_seq or event.seq

    def _on_run_start(self, event: Event, p: Any) -> None:
        rid = event.run_id or ""
        tid = event.turn_id or ""
        self.runs[rid] = RunState(
            rid, tid, p.get("command_id"), p.get("reason", "submit"), started_at=event.occurred_at
        )
        if p.get("command_id"):
            self.run_of_command[p["command_id"]] = rid
        self.active_run = rid
        turn = self.turns.get(tid)
        if turn is not None:
            turn.run_ids.append(rid)
            turn.status = "running"
            turn.ended_at = None
            turn.error = None

    def _on_run_end(self, event: Event, p: Any) -> None:
        run = self.runs.get(event.run_id or "")
        if run is not None:
            run.status = p["status"]
            run.error = p.get("error")
            run.ended_at = event.occurred_at
            run.inbox_seq = p.get("inbox_seq")
            run.stop_reason = p.get("stop_reason")
        if self.active_run == event.run_id:
            self.active_run = None

    def _on_turn_status(self, event: Event, p: Any) -> None:
        turn = self._turn(event)
        if turn is None:
            return
        turn.status = event.type.split("/")[1]
        turn.error = p.get("error") or (p.get("reason") if turn.status == "failed" else None)
        if turn.status != "running":
            turn.ended_at = event.occurred_at

    def _on_turn_output(self, event: Event, p: Any) -> None:
        turn = self._turn(event)
        if turn is not None:
            turn.output = p["message"].get("text")

    def _on_step_start(self, event: Event, p: Any) -> None:
        run = self.runs.get(event.run_id or "")
        if run is not None:
            run.steps += 1
        self._count(event, steps=1)

    def _count(self, event: Event, **amounts: int) -> None:
        """Add to the usage counters of the event's run, its turn and the session."""
        turn = self._turn(event)
        run = self.runs.get(event.run_id) if event.run_id else None
        for name, amount in amounts.items():
            if amount:
                self.usage[name] = self.usage.get(name, 0) + amount
                if turn is not None:
                    turn.usage[name] = turn.usage.get(name, 0) + amount
                if run is not None:
                    run.usage[name] = run.usage.get(name, 0) + amount

    def auxiliary(self, p: Any) -> bool:
        """Whether a ``request/prepared`` / ``model/*`` payload is of an auxiliary call (not a
        step of the agent): marked so by its ``purpose``, or made during a compaction."""
        return p.get("purpose", REASONING) != REASONING or self.compacting

    def _on_model_end(self, event: Event, p: Any) -> None:
        if self.auxiliary(p):
            # The summariser's call: its tokens count under compaction, never as a model
            # call of the conversation (nor as one that reported nothing).
            self._count(
                event,
                compaction_calls=1,
                compaction_input_tokens=p.get("input_tokens") or 0,
                compaction_output_tokens=p.get("output_tokens") or 0,
            )
            return
        if p.get("status") != "completed" and p.get("input_tokens") is None:
            self._count(event, model_calls=1)
            return
        reported = p.get("input_tokens") is not None or p.get("output_tokens") is not None
        self._count(
            event,
            model_calls=1,
            input_tokens=p.get("input_tokens") or 0,
            output_tokens=p.get("output_tokens") or 0,
            cached_tokens=p.get("cached_tokens") or 0,
            reasoning_tokens=p.get("reasoning_tokens") or 0,
            cache_write_tokens=p.get("cache_write_tokens") or 0,
            unreported_calls=0 if reported else 1,
        )

    def _on_model_retry(self, event: Event, p: Any) -> None:
        self._count(event, retries=1)

    def _on_message(self, event: Event, p: Any) -> None:
        self._add_message(message_of(p["message"]))

    def _on_input_received(self, event: Event, p: Any) -> None:
        self.received_inputs[p["input_id"]] = dict(p, turn_id=event.turn_id)

    def _on_input_applied(self, event: Event, p: Any) -> None:
        self.applied_inputs.update(p["input_ids"])

    def _on_request_prepared(self, event: Event, p: Any) -> None:
        if not self.auxiliary(p):
            self.requested_messages = self.context_count

    def _on_compaction(self, event: Event, p: Any) -> None:
        self.compacting = event.type == "compaction/start"

    def _on_tool_requested(self, event: Event, p: Any) -> None:
        self.tool_calls[p["call_id"]] = ToolCallState(
            p["call_id"], p["name"], dict(p.get("arguments") or {}), event.turn_id, event.run_id
        )

    def _on_tool_dispatch(self, event: Event, p: Any) -> None:
        call = self.tool_calls.get(p["call_id"])
        if call is None:
            call = self.tool_calls[p["call_id"]] = ToolCallState(
                p["call_id"], p["name"], dict(p.get("arguments") or {}), event.turn_id, event.run_id
            )
        call.dispatched = True
        call.idempotent = bool(p.get("idempotent"))
        call.run_id = event.run_id
        call.attempts += 1
        call.asking = None

    def _on_tool_result(self, event: Event, p: Any) -> None:
        call = self.tool_calls.get(p["call_id"])
        if call is not None:
            call.result = dict(p)
        if not p.get("synthetic") and not p.get("reconciled"):
            self._count(event, tool_calls=1)
        turn_id = event.turn_id

        def make() -> Message:
            return tool_message(
                p["call_id"], p["name"], p.get("output", ""), turn_id, p.get("blocks")
            )

        message = made_once(p, make)  # shared by the folds of this process
        self._add_message(message if message.turn_id == turn_id else make())

    def _on_inbox_started(self, event: Event, p: Any) -> None:
        self.handled.add(p["command_id"])

    def _on_inbox_applied(self, event: Event, p: Any) -> None:
        self.handled.update(p["command_ids"])

    def _on_checkpoint(self, event: Event, p: Any) -> None:
        self.last_checkpoint_seq = event.seq

    def _on_interaction_requested(self, event: Event, p: Any) -> None:
        request = dict(p, turn_id=event.turn_id)
        self.interactions[p["request_id"]] = request
        call = self.tool_calls.get(p.get("call_id") or "")
        if call is not None and call.dispatched and call.result is None:
            call.asking = p["request_id"]  # a running call asked the person
        if p["request_id"] not in self.resolved:
            self.pending[p["request_id"]] = request

    def _on_interaction_resolved(self, event: Event, p: Any) -> None:
        self.pending.pop(p["request_id"], None)
        self.resolved[p["request_id"]] = dict(p)

    def _on_baseline(self, event: Event, p: Any) -> None:
        self._context = [Message.model_validate(m) for m in p["state"].get("messages", ())]
        self._context_tail = []
        self.context_count = len(self._context)
        # An exported state carries the plan and the session's permission rules too.
        self.plan = [dict(item) for item in p["state"].get("plan") or ()]
        self.permissions = {r["rule_id"]: dict(r) for r in p["state"].get("permissions") or ()}

    def _on_context_replaced(self, event: Event, p: Any) -> None:
        # A replacement needs the whole working context: read it now if it is unread.
        kept = self.context[p.get("replaced_count", 0) :]
        self._context = [Message.model_validate(m) for m in p["messages"]] + kept
        self._context_tail = []
        self.context_count = len(self._context)
        self.compactions += 1
        self.requested_messages = 0  # the next request carries the whole, shorter, context

    def _on_input_discarded(self, event: Event, p: Any) -> None:
        self.discarded_inputs.update(p["input_ids"])

    def _on_agent_bound(self, event: Event, p: Any) -> None:
        self.agent = dict(p)

    def _on_workspace_bound(self, event: Event, p: Any) -> None:
        self.workspace = dict(p)

    def _on_workspace_checkpoint(self, event: Event, p: Any) -> None:
        self.workspace_checkpoint = {**dict(p), "seq": event.seq}

    def _on_agent_changed(self, event: Event, p: Any) -> None:
        self.agent = dict(p["current"])
        self.permissions = {}  # a rule never outlives an agent change

    def _on_permission_changed(self, event: Event, p: Any) -> None:
        rule = p["rule"]
        if p["action"] == "granted":
            self.permissions[rule["rule_id"]] = dict(rule)
        else:
            self.permissions.pop(rule["rule_id"], None)

    def _on_subagent_spawned(self, event: Event, p: Any) -> None:
        self.children[p["call_id"]] = dict(
            p, turn_id=event.turn_id, run_id=event.run_id, status="running"
        )

    def _on_subagent_completed(self, event: Event, p: Any) -> None:
        child = self.children.get(p["call_id"])
        if child is not None:
            self.children[p["call_id"]] = dict(
                child, status=p["status"], output=p.get("output"), error=p.get("error")
            )
        used = p.get("usage") or {}
        # What the sub-agent consumed counts as this turn's (and session's): budgets see it.
        self._count(
            event,
            input_tokens=used.get("input_tokens", 0),
            output_tokens=used.get("output_tokens", 0),
            cached_tokens=used.get("cached_tokens", 0),
            reasoning_tokens=used.get("reasoning_tokens", 0),
            cache_write_tokens=used.get("cache_write_tokens", 0),
            model_calls=used.get("model_calls", 0),
            unreported_calls=used.get("unreported_calls", 0),
            compaction_calls=used.get("compaction_calls", 0),
            compaction_input_tokens=used.get("compaction_input_tokens", 0),
            compaction_output_tokens=used.get("compaction_output_tokens", 0),
            subagent_calls=1,
            subagent_input_tokens=used.get("input_tokens", 0),
            subagent_output_tokens=used.get("output_tokens", 0),
            subagent_model_calls=used.get("model_calls", 0),
        )

    def _on_subagent_linked(self, event: Event, p: Any) -> None:
        self.link = dict(p)

    def _on_plan_changed(self, event: Event, p: Any) -> None:
        self.plan = [dict(item) for item in p["items"]]

    def _on_recovery(self, event: Event, p: Any) -> None:
        for run_id in p.get("interrupted_runs", ()):
            run = self.runs.get(run_id)
            if run is not None and run.status == "running":
                run.status = "interrupted"
            if self.active_run == run_id:
                self.active_run = None


_HANDLERS = {
    "turn/start": SessionState._on_turn_start,
    "run/start": SessionState._on_run_start,
    "run/end": SessionState._on_run_end,
    "turn/completed": SessionState._on_turn_status,
    "turn/failed": SessionState._on_turn_status,
    "turn/suspended": SessionState._on_turn_status,
    "turn/interrupted": SessionState._on_turn_status,
    "turn/cancelled": SessionState._on_turn_status,
    "turn/output": SessionState._on_turn_output,
    "step/start": SessionState._on_step_start,
    "model/end": SessionState._on_model_end,
    "model/retry": SessionState._on_model_retry,
    "message/user": SessionState._on_message,
    "message/assistant": SessionState._on_message,
    "input/received": SessionState._on_input_received,
    "input/applied": SessionState._on_input_applied,
    "request/prepared": SessionState._on_request_prepared,
    "tool/requested": SessionState._on_tool_requested,
    "tool/dispatch": SessionState._on_tool_dispatch,
    "tool/result": SessionState._on_tool_result,
    "inbox/started": SessionState._on_inbox_started,
    "inbox/applied": SessionState._on_inbox_applied,
    "state/checkpoint": SessionState._on_checkpoint,
    "interaction/requested": SessionState._on_interaction_requested,
    "interaction/resolved": SessionState._on_interaction_resolved,
    "input/discarded": SessionState._on_input_discarded,
    "recovery/applied": SessionState._on_recovery,
    "migration/baseline": SessionState._on_baseline,
    "context/replaced": SessionState._on_context_replaced,
    "compaction/start": SessionState._on_compaction,
    "compaction/end": SessionState._on_compaction,
    "agent/bound": SessionState._on_agent_bound,
    "agent/changed": SessionState._on_agent_changed,
    "workspace/bound": SessionState._on_workspace_bound,
    "workspace/checkpoint": SessionState._on_workspace_checkpoint,
    "permission/changed": SessionState._on_permission_changed,
    "subagent/spawned": SessionState._on_subagent_spawned,
    "subagent/completed": SessionState._on_subagent_completed,
    "subagent/linked": SessionState._on_subagent_linked,
    "plan/changed": SessionState._on_plan_changed,
}


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One accepted inbox command."""

    seq: int
    command_id: str
    kind: str
    turn_id: str | None
    run_id: str | None
    input: str | None
    key: str | None
    data: dict[str, Any]
    accepted_at: datetime


class InboxState:
    """Fold of the inbox log."""

    def __init__(self) -> None:
        self.seq = 0
        self.commands: dict[str, Command] = {}
        self.rejected: dict[str, str] = {}
        """command_id -> why it was refused (or withdrawn)."""
        self.cancelled: set[str] = set()
        """Refused commands that were withdrawn by ``cancel`` (a queued task), not refused."""

    def dump(self) -> dict[str, Any]:
        return {
            "version": PROJECTOR_VERSION,
            "seq": self.seq,
            "rejected": dict(self.rejected),
            "cancelled": sorted(self.cancelled),
            "commands": [
                dict(_dc(c), accepted_at=c.accepted_at.isoformat()) for c in self.commands.values()
            ],
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> InboxState:
        if data.get("version") != PROJECTOR_VERSION:
            raise ValueError(f"snapshot version {data.get('version')} is not {PROJECTOR_VERSION}")
        state = cls()
        state.seq = data["seq"]
        state.rejected = dict(data["rejected"])
        state.cancelled = set(data["cancelled"])
        state.commands = {c["command_id"]: Command(**_dates(c)) for c in data["commands"]}
        return state

    def apply(self, event: Event) -> None:
        self.seq = event.seq
        p = event.payload
        if event.type == "inbox/accepted":
            if p["kind"] == "update":
                return  # the store carried it out when it accepted it: nothing to dispatch
            self.commands[p["command_id"]] = Command(
                event.seq,
                p["command_id"],
                p["kind"],
                p.get("turn_id"),
                p.get("run_id"),
                p.get("input"),
                p.get("key"),
                dict(p.get("data") or {}),
                event.occurred_at,
            )
        elif event.type == "inbox/rejected":
            self.rejected[p["command_id"]] = p["reason"]
            if p.get("cancelled"):
                self.cancelled.add(p["command_id"])

    def steers_for(self, turn_id: str) -> list[Command]:
        """Steering commands bound to ``turn_id`` that were not refused."""
        return [
            c
            for c in self.commands.values()
            if c.kind == "steer" and c.turn_id == turn_id and c.command_id not in self.rejected
        ]

    def injects(self) -> list[Command]:
        return [
            c
            for c in self.commands.values()
            if c.kind == "inject" and c.command_id not in self.rejected
        ]


def next_command(inbox: InboxState, state: SessionState) -> Command | None:
    """The accepted command that should run next, or None if nothing can run now.

    Commands run in acceptance order; a submit waits while the latest turn is parked
    (suspended, interrupted or failed), and a command for that parked turn goes ahead of it.
    Steering and injected material are not dispatched: runs pick them up at step boundaries.
    """
    if state.active_run is not None:
        return None
    latest = state.latest_turn
    parked = latest is not None and latest.status in PARKING
    for command in inbox.commands.values():
        if command.command_id in state.handled or command.command_id in inbox.rejected:
            continue
        if command.kind == "submit":
            if parked and not _preempts(command, latest):
                continue
            return command
        if command.kind in _BETWEEN_RUNS:
            return command
    return None


def _preempts(command: Command, latest: TurnState | None) -> bool:
    """Whether a submit goes ahead of the parked ``latest`` turn: it was accepted with
    ``if_busy="interrupt"``, which stopped that turn for it (``data.preempts``), and the
    turn stopped as interrupted or failed (one that stopped to ask a person keeps its
    place)."""
    return (
        latest is not None
        and command.data.get("preempts") == latest.turn_id
        and latest.status in {"interrupted", "failed"}
    )


_BETWEEN_RUNS = frozenset(
    {"resume", "respond", "cancel", "reconcile", "compact", "revoke", "feedback"}
)
"""Commands that run between runs, ahead of submits parked behind the latest turn."""

KEEP_TURNS = 20
"""Finished turns a fold keeps (in memory and in its snapshot) besides the unfinished ones."""


def retire_turns(state: SessionState, inbox: InboxState | None, keep: int = KEEP_TURNS) -> set[str]:
    """Forget finished turns older than the newest ``keep``: what only grows stays bounded.

    A completed or cancelled turn that ``keep`` newer turns follow can no longer change: its
    runs, tool calls, requests, inputs and inbox commands leave both folds (``inbox`` too, so
    a command never looks unhandled), and the counts say how many turns were retired. Readers
    that want them (``Session.tasks()``, a receipt of an old turn, older chat items) read the
    log. Returns the retired turn ids.
    """
    turns = list(state.turns.values())
    if len(turns) <= keep:
        return set()
    old: list[TurnState] = []
    for turn in turns[:-keep]:
        if turn.status not in TERMINAL_TURN:
            break  # retire a prefix only, so "everything before seq X" stays true
        old.append(turn)
    if not old:
        return set()
    ids = {t.turn_id for t in old}
    commands: set[str] = set()
    for turn in old:
        del state.turns[turn.turn_id]
        if turn.command_id:
            commands.add(turn.command_id)
        for run_id in turn.run_ids:
            run = state.runs.pop(run_id, None)
            if run is not None and run.command_id:
                commands.add(run.command_id)
                state.run_of_command.pop(run.command_id, None)
    state.tool_calls = {k: c for k, c in state.tool_calls.items() if c.turn_id not in ids}
    state.children = {k: c for k, c in state.children.items() if c.get("turn_id") not in ids}
    requests = {r for r, i in state.interactions.items() if i.get("turn_id") in ids}
    for request_id in requests:
        state.interactions.pop(request_id, None)
        state.resolved.pop(request_id, None)
    inputs = {i for i, r in state.received_inputs.items() if r.get("turn_id") in ids}
    for input_id in inputs:
        state.received_inputs.pop(input_id, None)
    state.applied_inputs -= inputs
    state.discarded_inputs -= inputs
    commands |= inputs
    state.retired_turns += len(old)
    newest = turns[len(old)] if len(turns) > len(old) else None
    state.retired_through = (newest.first_seq - 1) if newest is not None else state.seq
    if inbox is not None:
        first_kept = inbox.commands.get(newest.command_id or "") if newest else None
        for command in list(inbox.commands.values()):
            if (
                command.turn_id in ids
                or command.command_id in commands
                or (
                    first_kept is not None
                    and command.seq < first_kept.seq
                    and command.command_id in inbox.rejected
                )
            ):
                commands.add(command.command_id)
                del inbox.commands[command.command_id]
                inbox.rejected.pop(command.command_id, None)
                inbox.cancelled.discard(command.command_id)
    state.handled -= commands
    return ids


CONTEXT_TYPES = frozenset(
    {
        "message/user",
        "message/assistant",
        "tool/result",
        "migration/baseline",
        "context/replaced",
    }
)
"""The event types that add to (or replace) the working context."""
TRANSCRIPT_TYPES = CONTEXT_TYPES - {"context/replaced"}
"""The event types of every message ever committed (the transcript; nothing replaced)."""
FOLDED_TYPES = frozenset(_HANDLERS)
"""The event types ``SessionState`` reads; it only advances its seq past any other type."""
