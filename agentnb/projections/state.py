"""Pure folds of a session's two logs: what the runtime and the Session facade decide from.

``SessionState`` folds the execution log (turns, runs, the model context, tool calls, inputs
applied); ``InboxState`` folds the inbox log (commands in acceptance order, which run is open
for steering). ``next_command`` decides which accepted command runs next. No I/O here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentnb.events import Event, Message

__all__ = [
    "FOLDED_TYPES",
    "TERMINAL_TURN",
    "Command",
    "InboxState",
    "RunState",
    "SessionState",
    "TurnState",
    "next_command",
    "tool_message",
]

PROJECTOR_VERSION = 1
"""Bumped whenever the fold changes: older snapshots are then ignored and rebuilt."""

TERMINAL_TURN = frozenset({"completed", "cancelled"})
"""Turn statuses after which nothing more can happen to the turn."""
PARKING = frozenset({"suspended", "interrupted", "failed"})
"""Turn statuses that park the queue until the turn is answered, resumed or cancelled."""


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


def _dc(value: Any) -> dict[str, Any]:
    """A dataclass's fields as JSON-ready data: a shallow copy (``asdict`` deep-copies every
    nested dict, which made snapshots cost more the longer a session lived)."""
    out = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    for k, v in out.items():
        if isinstance(v, datetime):
            out[k] = v.isoformat()
        elif isinstance(v, list):
            out[k] = list(v)
    return out


def _dates(data: dict[str, Any]) -> dict[str, Any]:
    return {
        k: datetime.fromisoformat(v) if k.endswith("_at") and isinstance(v, str) else v
        for k, v in data.items()
    }


def tool_message(call_id: str, name: str, output: str, turn_id: str | None) -> Message:
    """The context message a tool result becomes."""
    return Message(
        id=f"msg_{call_id}", role="tool", text=output, call_id=call_id, name=name, turn_id=turn_id
    )


class SessionState:
    """Fold of the execution log. ``apply`` one event at a time, in seq order."""

    def __init__(self) -> None:
        self.seq = 0
        self.turns: dict[str, TurnState] = {}
        self.runs: dict[str, RunState] = {}
        self.run_of_command: dict[str, str] = {}
        """command_id -> the run that command started."""
        self.active_run: str | None = None
        self.context: list[Message] = []
        self._context_json: list[Any] = []
        """``context`` as JSON, message for message (what snapshots write)."""
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

    @classmethod
    def fold(cls, events: Iterable[Event]) -> SessionState:
        state = cls()
        for event in events:
            state.apply(event)
        return state

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
            "context": list(self._context_json),
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
        }

    @classmethod
    def load(cls, data: dict[str, Any]) -> SessionState:
        """The state ``dump`` described; ``ValueError`` if it comes from another version."""
        if data.get("version") != PROJECTOR_VERSION:
            raise ValueError(f"snapshot version {data.get('version')} is not {PROJECTOR_VERSION}")
        state = cls()
        state.seq = data["seq"]
        state.turns = {t["turn_id"]: TurnState(**_dates(t)) for t in data["turns"]}
        state.runs = {r["run_id"]: RunState(**_dates(r)) for r in data["runs"]}
        state.run_of_command = dict(data["run_of_command"])
        state.active_run = data["active_run"]
        state.context = [Message.model_validate(m) for m in data["context"]]
        state._context_json = list(data["context"])
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
        """Dispatched tool calls that have no result (of ``turn_id`` if given)."""
        return [
            c
            for c in self.tool_calls.values()
            if c.dispatched and c.result is None and (turn_id is None or c.turn_id == turn_id)
        ]

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

    def _turn(self, event: Event) -> TurnState | None:
        return self.turns.get(event.turn_id) if event.turn_id else None

    def _on_turn_start(self, event: Event, p: Any) -> None:
        tid = event.turn_id or ""
        turn = self.turns.get(tid)
        if turn is None:
            turn = self.turns[tid] = TurnState(tid, p["input"], created_at=event.occurred_at)
        turn.command_id = p.get("command_id")
        turn.started_at = turn.started_at or event.occurred_at

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

    def _on_message(self, event: Event, p: Any) -> None:
        self.context.append(Message.model_validate(p["message"]))
        self._context_json.append(p["message"])

    def _on_input_received(self, event: Event, p: Any) -> None:
        self.received_inputs[p["input_id"]] = dict(p, turn_id=event.turn_id)

    def _on_input_applied(self, event: Event, p: Any) -> None:
        self.applied_inputs.update(p["input_ids"])

    def _on_request_prepared(self, event: Event, p: Any) -> None:
        self.requested_messages = len(self.context)

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

    def _on_tool_result(self, event: Event, p: Any) -> None:
        call = self.tool_calls.get(p["call_id"])
        if call is not None:
            call.result = dict(p)
        message = tool_message(p["call_id"], p["name"], p.get("output", ""), event.turn_id)
        self.context.append(message)
        self._context_json.append(message.model_dump(mode="json"))

    def _on_inbox_started(self, event: Event, p: Any) -> None:
        self.handled.add(p["command_id"])

    def _on_inbox_applied(self, event: Event, p: Any) -> None:
        self.handled.update(p["command_ids"])

    def _on_checkpoint(self, event: Event, p: Any) -> None:
        self.last_checkpoint_seq = event.seq

    def _on_interaction_requested(self, event: Event, p: Any) -> None:
        request = dict(p, turn_id=event.turn_id)
        self.interactions[p["request_id"]] = request
        if p["request_id"] not in self.resolved:
            self.pending[p["request_id"]] = request

    def _on_interaction_resolved(self, event: Event, p: Any) -> None:
        self.pending.pop(p["request_id"], None)
        self.resolved[p["request_id"]] = dict(p)

    def _on_baseline(self, event: Event, p: Any) -> None:
        self.context = [Message.model_validate(m) for m in p["state"].get("messages", ())]
        self._context_json = [m.model_dump(mode="json") for m in self.context]

    def _on_input_discarded(self, event: Event, p: Any) -> None:
        self.discarded_inputs.update(p["input_ids"])

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
    "message/user": SessionState._on_message,
    "message/assistant": SessionState._on_message,
    "message/system": SessionState._on_message,
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

    def dump(self) -> dict[str, Any]:
        return {
            "version": PROJECTOR_VERSION,
            "seq": self.seq,
            "rejected": dict(self.rejected),
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
        state.commands = {c["command_id"]: Command(**_dates(c)) for c in data["commands"]}
        return state

    def apply(self, event: Event) -> None:
        self.seq = event.seq
        p = event.payload
        if event.type == "inbox/accepted":
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
            if parked:
                continue
            return command
        if command.kind in {"resume", "respond", "cancel", "reconcile"}:
            return command
    return None


FOLDED_TYPES = frozenset(_HANDLERS)
"""The event types ``SessionState`` reads; it only advances its seq past any other type."""
