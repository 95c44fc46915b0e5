"""The bounds of a session, each with the one function that checks it.

**Text.** Every text a person or a program hands to a session goes through ``check_text``
(or, for structured values such as edited tool arguments, ``check_json_size``) before
anything is written: task inputs (``submit``, ``send``, ``steer``), injected material, answers
of every kind (``ask_user`` and external-execution outputs, rejection reasons, edited
arguments) and reconcile outcomes and their reason. So a 50 MB answer is refused exactly as a
50 MB task is.

One rule for the characters of every such text, on every backend (``check_chars``): a
lone surrogate (not valid Unicode, so no store can encode it) or a NUL character (which
PostgreSQL cannot hold) is refused with ``InvalidInput`` naming where it is. The same rule
guards a session's title, labels, search text and a deletion's reason (``stores/decisions.py``).

**Queues, recovery, size** (``Limits``, set on ``Runtime(limits=...)``; the defaults are the
seeds' bounds):

- ``max_pending_steers`` (256): guidance accepted for the running turn and not yet applied;
  one more ``steer`` (or ``send`` that steers) raises ``QueueFull``.
- ``max_queued_commands`` (64): commands accepted and not yet carried out (tasks waiting to
  start, resumes, answers, cancels, reconciles, compactions); one more ``submit`` (or ``send``
  that queues) raises ``QueueFull``. Answers, resumes and cancels are never refused by it:
  they are how a parked queue drains.

  Both count what the submitting process knows: exact within one process, while a command
  another process accepted a moment ago may not be counted yet (commands are accepted
  unconditionally by the store), so processes submitting at the same time can pass a bound
  by their number.
- ``max_recovery_events`` (1,000,000) and ``max_recovery_bytes`` (128 MiB): what opening a
  session may replay (events after its newest usable snapshot, of both logs, and their payload
  bytes); past them ``RecoveryLimitExceeded``.
- ``max_reply_chars`` (2,000,000) and ``max_tool_calls_per_reply`` (128): one model reply's
  text and tool-call arguments, and how many tool calls it makes. The reply is read until it
  passes one; then the call is stopped and the run ends ``failed`` with ``stop_reason``
  ``reply_too_large`` or ``too_many_tool_calls`` (what streamed so far stays in the log).
- ``max_tool_result_chars`` (1,000,000): one tool call's result. A longer one is not
  recorded: the call's result is an error saying so, which the model sees (it can ask for
  less), and the run goes on.
- ``max_session_events`` and ``max_session_bytes`` (None: no cap): what one session's log may
  hold. A commit that would pass a cap is refused with ``SessionFull``; ``END_RESERVE_EVENTS``
  and ``END_RESERVE_BYTES`` of it are kept for the commits that end runs, so a run refused in
  the middle still ends with its reason committed, and new work starts only below the cap
  less twice that reserve (``check_room``).

**Sub-agents.** ``max_subagent_depth`` (3): how deep sub-agent sessions may nest below their
root; ``max_children_per_turn`` (16): sub-agent calls one task may make. A call past either
is refused with ``SubagentLimitExceeded`` before any child session is made: the calling
model is told why in the call's result (``check_subagent``).

The checks are pure functions of counts the caller read (``check_queue``, ``check_steering``,
``check_replay``, ``check_room``). This module sits at the bottom of the package: it imports
nothing above ``errors.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Literal

from agentnb.errors import (
    AgentnbError,
    InvalidInput,
    QueueFull,
    RecoveryLimitExceeded,
    SessionFull,
    SubagentLimitExceeded,
)

__all__ = [
    "END_RESERVE_BYTES",
    "END_RESERVE_EVENTS",
    "MAX_INPUT_CHARS",
    "Limits",
    "check_chars",
    "check_json_chars",
    "check_json_size",
    "check_queue",
    "check_replay",
    "check_room",
    "check_steering",
    "check_subagent",
    "check_text",
]

MAX_INPUT_CHARS = 1_000_000
"""Most characters one text (or the JSON form of one structured value) may have."""

_HINT = "split large material into parts and inject() them"


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def check_chars(text: str, what: str, *, error: type[AgentnbError] = InvalidInput) -> str:
    """``text`` unless it holds a lone surrogate or a NUL character; else ``error`` naming
    the first one and where it is (nothing is written)."""
    bad = _UNSTORABLE.search(text)
    if bad is not None:
        if bad.group() == "\x00":
            kind, fix = "a NUL character", "remove it"
        else:
            kind = "a lone surrogate (not valid Unicode)"
            fix = "decode the text properly (bytes read with errors='surrogateescape' leave them)"
        raise error(
            f"{what} has {kind} ({bad.group()!r}) at position {bad.start()}; no store can keep "
            f"it: {fix}"
        )
    return text


def check_json_chars(value: object, what: str, *, error: type[AgentnbError] = InvalidInput) -> None:
    """``check_chars`` on every string (keys too) of a structured value."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_chars(item, what, error=error)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)


def check_text(
    value: object,
    what: str,
    *,
    allow_empty: bool = False,
    error: type[AgentnbError] = InvalidInput,
) -> str:
    """``value`` if it is a string within ``MAX_INPUT_CHARS``; else ``error`` saying why.

    ``what`` names the text in the message ("input", "the answer to req_..."). Blank text is
    refused too unless ``allow_empty`` (a tool's output may legitimately be empty), and so
    is text ``check_chars`` refuses.
    """
    if not isinstance(value, str):
        raise error(f"{what} must be a string, got {type(value).__name__}")
    check_chars(value, what, error=error)
    if not allow_empty and not value.strip():
        raise error(f"{what} is empty; give the agent something to work on")
    if len(value) > MAX_INPUT_CHARS:
        raise error(
            f"{what} has {len(value):,} characters; the limit is {MAX_INPUT_CHARS:,} ({_HINT})"
        )
    return value


def check_json_size(value: object, what: str, *, error: type[AgentnbError] = InvalidInput) -> None:
    """Refuse a structured value whose JSON text is longer than ``MAX_INPUT_CHARS``, or with
    a string ``check_chars`` refuses.

    Values JSON cannot encode are left to the caller's own validation.
    """
    try:
        size = len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return
    except RecursionError:
        raise error(f"{what} is nested too deeply to store; pass a flatter value") from None
    if size > MAX_INPUT_CHARS:
        raise error(
            f"{what} has {size:,} characters as JSON; the limit is {MAX_INPUT_CHARS:,} ({_HINT})"
        )
    check_json_chars(value, what, error=error)


END_RESERVE_EVENTS = 32
"""Events of a session's cap kept for the commits that end runs (``check_room``)."""
END_RESERVE_BYTES = 64 * 1024
"""Payload bytes of a session's cap kept for the commits that end runs (``check_room``)."""


@dataclass(frozen=True)
class Limits:
    """The bounds a runtime enforces on its sessions (see the module docstring).

    ``Runtime(agent, limits=nb.Limits(max_queued_commands=16))``. Each is a positive int;
    the recovery bounds and the session caps may be None (no bound). A session cap must
    leave room above the reserve kept for ending runs.
    """

    max_pending_steers: int = 256
    max_queued_commands: int = 64
    max_recovery_events: int | None = 1_000_000
    max_recovery_bytes: int | None = 128 * 1024 * 1024
    max_session_events: int | None = None
    max_session_bytes: int | None = None
    max_subagent_depth: int = 3
    max_children_per_turn: int = 16
    max_reply_chars: int = 2_000_000
    max_tool_calls_per_reply: int = 128
    max_tool_result_chars: int = 1_000_000

    def __post_init__(self) -> None:
        for name in (
            "max_pending_steers",
            "max_queued_commands",
            "max_subagent_depth",
            "max_children_per_turn",
            "max_reply_chars",
            "max_tool_calls_per_reply",
            "max_tool_result_chars",
        ):
            _check_count(name, getattr(self, name), optional=False)
        for name in ("max_recovery_events", "max_recovery_bytes"):
            _check_count(name, getattr(self, name), optional=True)
        for name, reserve in (
            ("max_session_events", END_RESERVE_EVENTS),
            ("max_session_bytes", END_RESERVE_BYTES),
        ):
            value = _check_count(name, getattr(self, name), optional=True)
            if value is not None and value <= 2 * reserve:
                raise InvalidInput(
                    f"{name} must be more than {2 * reserve:,} ({reserve:,} of it is kept for "
                    f"the commits that end runs), got {value:,}"
                )


def _check_count(name: str, value: object, *, optional: bool) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        also = " or None" if optional else ""
        raise InvalidInput(f"{name} must be a positive int{also}, got {value!r}")
    return value


def check_queue(queued: int, limits: Limits, *, session: object) -> None:
    """Raise ``QueueFull`` if ``queued`` commands already wait in ``session``'s inbox."""
    limit = limits.max_queued_commands
    if queued >= limit:
        raise QueueFull(
            f"session {session} has {queued:,} commands waiting to be carried out; the limit "
            f"is {limit:,}. Wait for the queue to drain (tasks(), inspect()), answer or cancel "
            "what blocks it, or raise Limits(max_queued_commands=...)",
            queue="commands",
            limit=limit,
        )


def check_steering(pending: int, limits: Limits, *, turn: str) -> None:
    """Raise ``QueueFull`` if ``pending`` steering inputs of ``turn`` wait to be applied."""
    limit = limits.max_pending_steers
    if pending >= limit:
        raise QueueFull(
            f"turn {turn} has {pending:,} steering inputs not yet applied; the limit is "
            f"{limit:,}. Wait for its next step to take them, put the guidance in fewer "
            "messages, or raise Limits(max_pending_steers=...)",
            queue="steering",
            limit=limit,
        )


def check_subagent(depth: int, children: int, limits: Limits, *, agent: str) -> None:
    """Raise ``SubagentLimitExceeded`` unless a session at ``depth`` (0 for a root session)
    whose turn already made ``children`` sub-agent calls may make one more, to ``agent``."""
    if depth + 1 > limits.max_subagent_depth:
        raise SubagentLimitExceeded(
            f"cannot call sub-agent {agent!r}: this session is {depth} level(s) below its root "
            f"and sub-agents may nest at most {limits.max_subagent_depth} deep "
            "(Limits(max_subagent_depth=...)); do this part of the work without delegating it",
            limit="max_subagent_depth",
            value=limits.max_subagent_depth,
        )
    if children >= limits.max_children_per_turn:
        raise SubagentLimitExceeded(
            f"cannot call sub-agent {agent!r}: this task already made {children} sub-agent "
            f"calls, the limit per task (Limits(max_children_per_turn="
            f"{limits.max_children_per_turn})); use the results you have, or do the rest "
            "without delegating it",
            limit="max_children_per_turn",
            value=limits.max_children_per_turn,
        )


def check_replay(events: int, nbytes: int, limits: Limits, *, session: object) -> None:
    """Raise ``RecoveryLimitExceeded`` if replaying ``events`` events of ``nbytes`` payload
    bytes to open ``session`` passes a recovery bound."""
    for amount, bound, unit, name in (
        (events, limits.max_recovery_events, "events", "max_recovery_events"),
        (nbytes, limits.max_recovery_bytes, "bytes", "max_recovery_bytes"),
    ):
        if bound is not None and amount > bound:
            raise RecoveryLimitExceeded(
                f"opening session {session} would replay more than {bound:,} {unit} (no "
                "usable snapshot covers them). Open it once with a runtime made with a higher "
                f"bound, Limits({name}=...): that replay saves a snapshot, so later opens "
                "replay only what follows it"
            )


def check_room(
    events: int,
    nbytes: int,
    *,
    stage: Literal["start", "run", "end"],
    adding_events: int = 0,
    adding_bytes: int = 0,
    limits: Limits,
    session: object,
) -> None:
    """Raise ``SessionFull`` unless ``session``, holding ``events`` events and ``nbytes``
    payload bytes, has room for ``adding_events`` more of ``adding_bytes`` at ``stage``.

    Three lines under each cap: new work starts (``"start"``) only below the cap less twice
    the reserve; a commit in the middle of a run (``"run"``) may fill up to the cap less the
    reserve; a commit that ends a run (``"end"``) may use the reserve. So a run refused in
    the middle still ends with its reason committed, and (unless its refused commit was
    larger than the reserve) the session is then past the line where new work starts.
    """
    for held, adding, cap, reserve, unit, name in (
        (
            events,
            adding_events,
            limits.max_session_events,
            END_RESERVE_EVENTS,
            "events",
            "max_session_events",
        ),
        (
            nbytes,
            adding_bytes,
            limits.max_session_bytes,
            END_RESERVE_BYTES,
            "bytes",
            "max_session_bytes",
        ),
    ):
        if cap is None:
            continue
        line = cap - {"start": 2 * reserve, "run": reserve, "end": 0}[stage]
        if held + adding > line or (stage == "start" and held >= line):
            raise SessionFull(
                f"session {session} holds {held:,} {unit}; its cap is {cap:,} "
                f"(Limits({name}=...)). It stays readable; continue in a new session "
                "(session.fork(...) carries the conversation over) or raise the cap"
            )
