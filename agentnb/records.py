"""The frozen records the Session operations return (field names are part of the contract)."""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from agentnb import html
from agentnb.events import Message
from agentnb.ids import SessionKey

__all__ = [
    "Child",
    "Children",
    "Holder",
    "InputReceipt",
    "Inspection",
    "Interaction",
    "Message",
    "Outcome",
    "PermissionRule",
    "PermissionRules",
    "PruneReport",
    "Receipt",
    "Requests",
    "SessionCounts",
    "SessionInfo",
    "SessionInfos",
    "Task",
    "Tasks",
    "ToolCallRef",
    "Transcript",
    "UsageTotals",
    "WorkspaceStatus",
]

TaskStatus = Literal[
    "queued",
    "running",
    "suspended",
    "interrupted",
    "completed",
    "failed",
    "cancelled",
    "rejected",
]


@dataclass(frozen=True, slots=True)
class UsageTotals:
    """What a turn (or a session) consumed: tokens as the provider reported them, and counts.

    ``input_tokens``, ``output_tokens`` and ``model_calls`` are the agent's own model calls
    (its steps). Auxiliary calls (the summariser of a compaction) count apart:
    ``compaction_calls``, ``compaction_input_tokens``, ``compaction_output_tokens``.
    ``total_tokens`` is everything spent, both kinds. Tokens of calls whose provider reported
    no usage are not counted; ``unreported_calls`` says how many of the agent's calls there
    were. A turn's totals include what its sub-agents consumed (tokens, model calls,
    unreported calls, compaction, over their whole tree), counted when each sub-agent call
    ends; the ``subagent_*`` fields say how much of it that was, ``subagent_calls`` how many
    sub-agent calls ended.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0
    steps: int = 0
    retries: int = 0
    unreported_calls: int = 0
    compaction_calls: int = 0
    compaction_input_tokens: int = 0
    compaction_output_tokens: int = 0
    subagent_calls: int = 0
    subagent_input_tokens: int = 0
    subagent_output_tokens: int = 0
    subagent_model_calls: int = 0

    @property
    def total_tokens(self) -> int:
        """Every token spent: the agent's calls and the auxiliary (compaction) calls."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.compaction_input_tokens
            + self.compaction_output_tokens
        )

    def __repr__(self) -> str:
        # The sub-agent counters show only for a turn or session that delegated.
        shown = [
            f"{name}={getattr(self, name)!r}"
            for name in self.__slots__
            if not (name.startswith("subagent_") and not self.subagent_calls)
        ]
        return f"UsageTotals({', '.join(shown)})"

    @classmethod
    def of(cls, counters: Mapping[str, int]) -> UsageTotals:
        """The totals a fold's counters hold (a missing counter is 0)."""
        return cls(**{k: v for k, v in counters.items() if k in cls.__slots__})


SessionStatus = Literal["idle", "queued", "running", "suspended", "interrupted", "failed", "parked"]


@dataclass(frozen=True, slots=True)
class SessionCounts:
    """What a session holds: events in its log, turns started, bytes of event payloads."""

    events: int
    turns: int
    bytes: int


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One session as ``runtime.sessions()`` lists it, read from the catalogue (not the log).

    ``status``: ``running`` (a runtime executes its latest turn), ``suspended`` /
    ``interrupted`` / ``failed`` (the latest turn waits for a person), ``parked`` (one of
    those, with tasks queued behind it), ``queued`` (tasks wait, nothing blocks them) or
    ``idle``. ``title`` is the user's, else the first task's first line (None before any).
    ``cursor`` continues the listing after this record (``sessions(before=...)``).
    """

    key: SessionKey
    title: str | None
    labels: Mapping[str, str]
    status: SessionStatus
    created_at: datetime
    updated_at: datetime
    """The last commit to the session's log, or change of its title or labels."""
    counts: SessionCounts
    last_activity: datetime
    """The last commit or accepted command."""
    archived_at: datetime | None = None
    """When the session was archived (``runtime.archive``); None while it is not."""
    cursor: str = field(default="", repr=False)
    _usage: Any = field(default=None, repr=False, compare=False)
    _lineage: Any = field(default=None, repr=False, compare=False)

    @property
    def archived(self) -> bool:
        """Whether the session is archived: readable, refusing new work until unarchived."""
        return self.archived_at is not None

    def _repr_html_(self) -> str:
        return html.session_info_html(self)

    @property
    def usage(self) -> UsageTotals | None:
        """What the session consumed (tokens, calls, steps), read from its folds when asked:
        its newest snapshot and the events after it, never the whole log."""
        return None if self._usage is None else self._usage(self.key)

    @property
    def parent(self) -> SessionKey | None:
        """The session whose sub-agent call made this one (None for a root session), read
        from its first event (``subagent/linked``) when asked."""
        return self._link()[0]

    @property
    def root(self) -> SessionKey:
        """The session at the top of this one's tree (itself for a root session)."""
        return self._link()[1] or self.key

    @property
    def depth(self) -> int:
        """How many sub-agent calls below its root this session is (0 for a root)."""
        return self._link()[2]

    def _link(self) -> tuple[SessionKey | None, SessionKey | None, int]:
        return (None, None, 0) if self._lineage is None else self._lineage(self.key)


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What ``runtime.prune`` deleted, or with ``dry_run`` would delete."""

    dry_run: bool
    sessions: tuple[SessionInfo, ...]
    """The sessions the rule selected, newest activity first."""
    deleted: int
    """How many were deleted (0 in a dry run)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended: ``completed``, ``suspended``, ``interrupted``, ``failed``,
    ``cancelled``; or ``rejected`` when the command was refused before it started a run
    (``error`` says why; ``run_id`` is None)."""

    status: str
    turn_id: str
    run_id: str | None
    output: str | None = None
    """The turn's final assistant text, if it produced one."""
    error: str | None = None
    usage: UsageTotals | None = None
    """What the run observed consumed (a ``Task``'s outcome: the turn, over all its runs)."""
    stop_reason: str | None = None
    """Why the run stopped, as a code (``RunEnd.stop_reason``): ``final_answer``, ``max_steps``,
    ``max_turn_tokens``, ``time_limit``, ``needs_person``, ``inline_wait_expired``,
    ``interrupted``, ``error``, ..."""

    def _repr_html_(self) -> str:
        return html.outcome_html(self)


class Waiter(Protocol):
    """What a ``Receipt`` waits through: the session that accepted its command."""

    def wait(self, receipt: Receipt | Task, timeout: float | None = None) -> Outcome: ...


@dataclass(frozen=True)
class Receipt:
    """Proof that a command was durably accepted; ``wait()`` (or ``await``) observes its run.

    A receipt observes the run its command started, never a later one: after a suspension,
    ``respond`` (and ``resume``) return new receipts that observe the runs they start, and
    ``Task.wait()`` observes the whole turn. ``status`` and ``run_id`` are as of when the
    receipt was made (a retried ``submit`` returns them as they stand then).
    """

    command_id: str
    turn_id: str
    run_id: str | None
    """None while the turn is queued."""
    status: str
    disposition: str | None = None
    """For ``send`` only: ``started``, ``queued`` or ``steered``."""
    _session: Waiter | None = field(default=None, repr=False, compare=False, hash=False)

    def wait(self, timeout: float | None = None) -> Outcome:
        """Block until the run this command started ends (or ``TimeoutError``); at once
        with ``rejected`` if the command was refused."""
        if self._session is None:
            raise RuntimeError("this receipt is not bound to a session; use session.wait()")
        return self._session.wait(self, timeout)

    def __await__(self) -> Generator[Any, None, Outcome]:
        return asyncio.to_thread(self.wait).__await__()

    def _repr_html_(self) -> str:
        return html.receipt_html(self)


@dataclass(frozen=True, slots=True)
class InputReceipt:
    """Proof that steering or injected material was durably accepted."""

    input_id: str
    turn_id: str | None
    """The turn steered; None for inject (it applies to whatever runs next)."""

    def _repr_html_(self) -> str:
        return html.input_receipt_html(self)


@dataclass(frozen=True, slots=True)
class Task:
    """One turn as a task: its status, input, runs and timings, and the turn's outcome.

    ``status`` is ``rejected`` for a task the runtime refused before it ran (``error`` says
    why). ``outcome`` is the whole turn's: its latest run once the turn settled and nothing
    accepted for it (an answer, a resume, a cancel) is still to carry it on; ``wait()``
    blocks until then (where a ``Receipt`` observes only the run its command started).
    """

    turn_id: str
    status: str
    input: str
    run_ids: tuple[str, ...]
    created_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    usage: UsageTotals | None = None
    """What the turn consumed over all its runs so far."""
    outcome: Outcome | None = None
    """The turn's outcome as of this read (None while it is queued, runs or goes on)."""
    command_id: str | None = field(default=None, repr=False)
    """The submit that created the task."""
    _session: Waiter | None = field(default=None, repr=False, compare=False, hash=False)

    def wait(self, timeout: float | None = None) -> Outcome:
        """Block until the whole turn settles (following it through answers and resumes
        accepted for it) and return its outcome; ``TimeoutError`` past ``timeout``."""
        if self._session is None:
            raise RuntimeError("this task is not bound to a session; use session.wait(task)")
        return self._session.wait(self, timeout)

    def __await__(self) -> Generator[Any, None, Outcome]:
        return asyncio.to_thread(self.wait).__await__()

    def _repr_html_(self) -> str:
        return html.task_html(self)


@dataclass(frozen=True, slots=True)
class Interaction:
    """An open request for a person (or an outside system) to answer.

    A sub-agent's request shows in its callers' ``pending()`` too: ``path`` names the agents
    of the sessions it came through (from the child of the session asked, down to the one
    asking; empty for the session's own), ``session`` the session it lives in (None: this
    one), and ``turn_id`` is that session's turn. Answer it through the caller (it is
    routed) or in that session directly.
    """

    request_id: str
    kind: str
    turn_id: str
    call_id: str | None
    tool_name: str | None
    arguments: dict[str, Any]
    prompt: str | None
    path: tuple[str, ...] = ()
    session: SessionKey | None = None


@dataclass(frozen=True, slots=True)
class Child:
    """One sub-agent call of a session and the child session that carries it out.

    ``status`` is the child's task as it stands now (``queued``, ``running``, ``suspended``,
    ``interrupted``, ``completed``, ``failed``, ``cancelled``); ``output`` / ``error`` its
    answer or why it failed, once it ended; ``usage`` what it consumed so far (its own
    children's included). ``session.child(call_id)`` opens the child session.
    """

    call_id: str
    turn_id: str
    """The calling session's turn that made the call."""
    key: SessionKey
    agent_id: str
    name: str | None
    """The sub-agent tool's name, as the caller's model called it."""
    task: str
    status: str
    output: str | None = None
    error: str | None = None
    usage: UsageTotals | None = None
    child_turn_id: str | None = None
    """The child session's turn that does the task (None until it was accepted)."""

    def _repr_html_(self) -> str:
        return html.child_html(self)


@dataclass(frozen=True, slots=True)
class Transcript:
    """Complete committed messages as of one seq."""

    messages: tuple[Message, ...]
    as_of_seq: int
    sources: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    """message id -> ``steer`` or ``material``: user messages that were guidance or material
    handed over, not a task (the table labels them so, as the view does)."""

    def _repr_html_(self) -> str:
        return html.transcript_html(self)


@dataclass(frozen=True, slots=True)
class ToolCallRef:
    """A tool call, by id, with what was asked."""

    call_id: str
    tool_name: str
    arguments: dict[str, Any]
    turn_id: str | None
    run_id: str | None


@dataclass(frozen=True, slots=True)
class PermissionRule:
    """A permission rule in force: calls of ``tool_name`` whose arguments equal ``match``
    (every call when empty) run without asking (``Answer.approve(remember=...)``)."""

    rule_id: str
    scope: str
    """``session`` (this session's calls) or ``agent`` (every session of the agent, for
    this user)."""
    tool_name: str
    match: Mapping[str, Any]
    session_id: str
    """The session whose approval granted it (it lives in that session's log)."""
    request_id: str | None = None
    """The approval that granted it."""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds the session's execution lease now."""

    owner: str
    """``host:pid:rt_...``: the runtime executing the session."""
    epoch: int
    expires_in: float
    """Seconds until the lease runs out unless its holder renews it."""
    alive: bool | None
    """Whether the holder's process lives: None when it runs on another host (unknowable)."""
    local: bool
    """The holder is this runtime."""


@dataclass(frozen=True)
class WorkspaceStatus:
    """``inspect().workspace``: the session's bound directory and whether its files still
    match the manifest of the last run's end.

    ``matches`` is None before any run ended; ``changed`` lists the files added, removed or
    modified since (empty when ``matches``, or when the manifest was too large to list).
    """

    root: str
    path: str
    fingerprint: str
    checkpoint_seq: int | None
    matches: bool | None
    changed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Inspection:
    """A read-only look at what the runtime would do next.

    A dispatched tool call without a result is *running* while a live executor holds the
    session (``running_tool_calls``) and *uncertain* once none does (its process stopped:
    ``uncertain_tool_calls``, to reconcile before resuming).
    """

    as_of_seq: int
    uncertain_tool_calls: tuple[ToolCallRef, ...]
    active_runs: tuple[str, ...]
    interrupted_turn: str | None
    next_context: Sequence[Message]
    """The messages the next model call would see; read from the log when first used."""
    exports: tuple[Any, ...] = ()
    """One ``ExportStatus`` per ``export_to`` sink: lag, failures, last error, next retry."""
    blocked_by: str | None = None
    """The turn queued tasks wait behind (suspended, interrupted or failed), if any."""
    blocked_status: str | None = None
    """That turn's status."""
    holder: Holder | None = None
    """The lease holder executing the session, or None when nobody holds the lease."""
    context_window: int | None = None
    """Tokens the model takes in one call (``Agent(context_window=)`` or the model's own)."""
    usage: UsageTotals | None = None
    """What the whole session consumed so far."""
    running_tool_calls: tuple[ToolCallRef, ...] = ()
    """Dispatched calls of the run a live executor runs now: no result yet, and none is
    uncertain (``uncertain_tool_calls`` are those whose run has no live executor)."""
    model: str | None = None
    """The name of the model the next model call uses."""
    tools: tuple[Mapping[str, Any], ...] = ()
    """The tools the next model call offers, as the model sees them (``Tool.spec()``)."""
    instructions: str | None = None
    """The system instructions the next model call sends."""
    children: tuple[Child, ...] = field(default=(), repr=False)
    """Sub-agent calls of the session whose child sessions have not ended (running, queued,
    or waiting for a person); the HTML form shows them."""
    workspace: WorkspaceStatus | None = None
    """The session's working directory and whether its files still match the manifest of
    the last run's end (``nb.Workspace``); None without one."""
    _tokens: Any = field(default=None, repr=False, compare=False)

    @property
    def context_tokens(self) -> int | None:
        """Tokens of ``next_context`` (with the tools' schemas), as the model counts them.

        Reads the messages on first use, like ``next_context``.
        """
        return None if self._tokens is None else int(self._tokens())

    def _repr_html_(self) -> str:
        return html.inspection_html(self)


# -- the lists a notebook shows ----------------------------------------------------------------
# Plain lists and dicts (equal to them, JSON-able, indexable) that display as one table in
# Jupyter and whose text form is a few short lines, never a wall of dataclass reprs.

_REPR_ROWS = 10
"""Rows a list's text form shows before it says how many more there are."""


def _line(text: str, width: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "\u2026"


def _lines(head: str, rows: Sequence[str]) -> str:
    shown = [f"  {row}" for row in rows[:_REPR_ROWS]]
    if len(rows) > _REPR_ROWS:
        shown.append(f"  \u2026 {len(rows) - _REPR_ROWS} more")
    return "\n".join([head, *shown])


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class _Shown:
    """IPython's pretty printer uses the repr (it would print a list's items one by one)."""

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


class Tasks(_Shown, list[Task]):
    """``session.tasks()``: a list of ``Task``, shown as one table, oldest first."""

    def _repr_html_(self) -> str:
        return html.tasks_html(self)

    def __repr__(self) -> str:
        rows = [f"{t.status:<11} \u201c{_line(t.input)}\u201d" for t in self]
        return _lines(_count(len(self), "task"), rows)


class Requests(_Shown, dict[str, Interaction]):
    """``session.pending()``: open requests by id, shown as one table."""

    def _repr_html_(self) -> str:
        return html.interactions_html(self)

    def __repr__(self) -> str:
        kinds = {"confirmation": "approval", "external_execution": "result", "ask_user": "answer"}
        rows = []
        for request in self.values():
            what = kinds.get(request.kind, request.kind)
            args = ", ".join(f"{k}={v!r}" for k, v in request.arguments.items())
            call = f"{request.tool_name}({_line(args, 40)})" if request.tool_name else ""
            # An approval's prompt restates the call; a question's prompt is the question.
            asked = request.prompt if request.kind != "confirmation" else None
            asked = f" \u201c{_line(asked, 40)}\u201d" if asked else ""
            rows.append(f"waits for your {what}: {call}{asked}".rstrip(": "))
        return _lines(_count(len(self), "pending request"), rows)


class Children(_Shown, list[Child]):
    """``session.children()``: the sub-agent calls, shown as one table."""

    def _repr_html_(self) -> str:
        return html.children_html(self)

    def __repr__(self) -> str:
        rows = [f"{c.name or c.agent_id}: {c.status} \u201c{_line(c.task)}\u201d" for c in self]
        return _lines(_count(len(self), "sub-agent call"), rows)


class PermissionRules(_Shown, list[PermissionRule]):
    """``session.permissions()``: the rules in force, shown as one table."""

    def _repr_html_(self) -> str:
        return html.permissions_html(self)

    def __repr__(self) -> str:
        rows = [
            f"{r.tool_name} runs without asking ({r.scope})"
            + (
                f" when {_line(', '.join(f'{k}={v!r}' for k, v in r.match.items()), 40)}"
                if r.match
                else ""
            )
            for r in self
        ]
        return _lines(_count(len(self), "permission rule"), rows)


class SessionInfos(_Shown, list[SessionInfo]):
    """``runtime.sessions()``: a page of sessions, shown as one table."""

    def _repr_html_(self) -> str:
        return html.sessions_html(self)

    def __repr__(self) -> str:
        rows = [
            f"{i.key.session_id}: {i.status}"
            + (f" \u201c{_line(i.title, 40)}\u201d" if i.title else "")
            for i in self
        ]
        return _lines(_count(len(self), "session"), rows)
