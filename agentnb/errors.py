"""Every error agentnb raises on purpose.

One tree, so callers can catch as broadly or as narrowly as they need::

    AgentnbError
    ├── InvalidInput                 bad argument from the caller; nothing was written
    │   ├── UnknownTurn              a turn id that is not this session's (feedback)
    │   ├── WorkspaceEscape          a workspace path that leads out (absolute, .., symlink)
    │   └── InvalidBlock             a result block that cannot be kept (type, bytes, path, JSON)
    │       └── BlockTooLarge        a block (or all of one answer's) past agentnb.blocks' bounds
    ├── IdempotencyConflict          a key or batch id reused with other content
    ├── NotRunning                   the turn or run named is not the active one
    ├── InvalidAnswer                a respond() that cannot apply; nothing was written
    ├── CannotResume                 resume() refused (pending requests, finished turn, ...)
    │   └── UncertainToolCalls       dispatched tool calls with no result: reconcile first
    ├── SessionNotFound              open() of a session that does not exist
    │   └── SessionDeleted           the session was deleted; its tombstone says by whom
    ├── SessionBusy                  work in hand: delete() while a turn runs, if_busy="reject"
    ├── SessionArchived              new work for an archived session (unarchive() it first)
    ├── Parked                       wait() on a task queued behind a turn that needs a person
    ├── AgentChanged                 new work for a session bound to an agent that differs
    ├── WorkspaceChanged             new work for a session bound to another workspace
    ├── QueueFull                    too much steering or too many queued commands; nothing written
    ├── ToolsetUnavailable           a toolset (an MCP server) would not start or list its tools
    ├── SubagentLimitExceeded        a sub-agent call past the depth or children-per-turn bound
    ├── MiddlewareFailed             an Agent(middleware=) hook raised: its run ends failed
    ├── ReducerFailed                a required app event type's reducer raised: the turn fails
    ├── Unauthorized                 the service refused the credentials (none, wrong, revoked)
    ├── EvalRegression               nb.evals.assert_no_regression: cases scored lower than before
    ├── HistoryError                 history paging
    │   ├── InvalidLimit
    │   ├── InvalidCursor            (also an InvalidInput)
    │   ├── CrossSessionCursor
    │   ├── ExpiredCursor
    │   └── HistoryTooLarge
    └── StorageError                 the store refused or could not do what was asked
        ├── AppendConflict           expected seq is stale: another writer committed first
        │   └── InboxChanged         a commit conditioned on the inbox head saw new commands
        ├── Fenced                   the lease epoch is stale: this writer lost its lease
        ├── LeaseHeld                another holder has a live lease on the session
        ├── Corrupt                  the stored data is not what agentnb wrote (fail closed)
        │   ├── UnknownRequiredEvent a required event type this reader does not know
        │   └── ArchiveCorrupt       a backup archive fails its checks (names session and byte)
        ├── RecoveryLimitExceeded    a replay would exceed its configured bound
        ├── SessionFull              a commit would pass the session's event or byte cap
        └── StoreNotEmpty            a restore or migration would overwrite sessions there

Every message says what happened and what to do next. Backends translate driver errors
(``sqlite3``, ``psycopg``) into this tree; the store contract suite checks that they do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = [
    "DISTRIBUTION",
    "AgentChanged",
    "AgentnbError",
    "AppendConflict",
    "ArchiveCorrupt",
    "BlockTooLarge",
    "CannotResume",
    "Corrupt",
    "CrossSessionCursor",
    "EvalRegression",
    "ExpiredCursor",
    "Fenced",
    "HistoryError",
    "HistoryTooLarge",
    "IdempotencyConflict",
    "InboxChanged",
    "InvalidAnswer",
    "InvalidBlock",
    "InvalidCursor",
    "InvalidInput",
    "InvalidLimit",
    "LeaseHeld",
    "MiddlewareFailed",
    "NotRunning",
    "Parked",
    "QueueFull",
    "RecoveryLimitExceeded",
    "ReducerFailed",
    "SessionArchived",
    "SessionBusy",
    "SessionDeleted",
    "SessionFull",
    "SessionNotFound",
    "StorageError",
    "StoreNotEmpty",
    "SubagentLimitExceeded",
    "ToolsetUnavailable",
    "Unauthorized",
    "UncertainToolCalls",
    "UnknownRequiredEvent",
    "UnknownTurn",
    "WorkspaceChanged",
    "WorkspaceEscape",
    "describe",
    "install_hint",
]


class AgentnbError(Exception):
    """Base of every error agentnb raises on purpose."""


class InvalidInput(AgentnbError, ValueError):
    """An argument the caller passed cannot be used; nothing was written."""


class UnknownTurn(InvalidInput):
    """The turn named is not a turn of this session (unknown, or another session's)."""


class InvalidBlock(InvalidInput):
    """A result block (``nb.blocks``) cannot be kept: an unknown block type, an image whose
    bytes are not the type they claim, a path that does not exist, JSON that does not encode."""


class BlockTooLarge(InvalidBlock):
    """A block's bytes, or the blocks of one answer or result, pass the bounds of
    ``agentnb.blocks`` (``MAX_BLOCK_BYTES``, ``MAX_BLOCKS``, ``MAX_TOTAL_BYTES``)."""


class IdempotencyConflict(AgentnbError):
    """An idempotency key (command key, batch id) was reused with different content."""


class NotRunning(AgentnbError):
    """The turn or run the caller named is not the one currently running."""


class InvalidAnswer(AgentnbError):
    """A respond() call cannot apply (unknown, resolved, wrong kind, mixed turns)."""


class CannotResume(AgentnbError):
    """resume() is refused; the message says what to do first."""


class UncertainToolCalls(CannotResume):
    """Tool calls were dispatched but have no recorded result; reconcile them first.

    ``calls`` lists them (``ToolCallRef`` records) so the caller can build the
    ``reconcile`` mapping.
    """

    def __init__(self, message: str, calls: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.calls = list(calls)


class SessionNotFound(AgentnbError, LookupError):
    """The session does not exist; use ``runtime.session(...)`` to create it."""


class SessionDeleted(SessionNotFound):
    """The session was deleted; only its tombstone (who, when, why) is left."""


class SessionBusy(AgentnbError):
    """The session has work in hand: a turn running (``delete``: interrupt it first, or pass
    ``force=True``), or, for ``submit(..., if_busy="reject")``, anything a new task would
    wait for. ``turn_id`` is that turn (None when not known) and ``status`` how it stands
    (``running``, ``queued``, ``suspended``, ...); nothing was written."""

    def __init__(self, message: str, *, turn_id: str | None = None, status: str = "") -> None:
        super().__init__(message)
        self.turn_id = turn_id
        self.status = status


class SessionArchived(AgentnbError):
    """The session is archived: readable, but it takes no new work until ``unarchive()``."""


class Parked(AgentnbError):
    """The task waits in the queue behind a turn that will not move without a person.

    The queue parks behind a suspended, interrupted or failed turn (DESIGN: later tasks run
    only after it is answered, resumed or cancelled). ``turn_id`` is the waiting task,
    ``blocking_turn`` the turn it waits behind and ``blocking_status`` that turn's status;
    the message names the ways out.
    """

    def __init__(
        self, message: str, *, turn_id: str, blocking_turn: str, blocking_status: str
    ) -> None:
        super().__init__(message)
        self.turn_id = turn_id
        self.blocking_turn = blocking_turn
        self.blocking_status = blocking_status


class AgentChanged(AgentnbError):
    """The session is bound to an agent that differs from this runtime's; new work is refused.

    A session records the fingerprint of its agent (id, instructions, tools with their
    schemas, model name) at its first turn. ``changes`` says what differs, one phrase each
    ("instructions changed", "tools added: x", "model: a → b"); ``bound`` and ``current``
    are the two fingerprints. Reading the session always works; to let this agent take the
    session over, make the runtime with ``Runtime(..., accept_agent_change=True)``.
    """

    def __init__(
        self,
        message: str,
        *,
        changes: Sequence[str] = (),
        bound: Any = None,
        current: Any = None,
    ) -> None:
        super().__init__(message)
        self.changes = tuple(changes)
        self.bound = bound
        self.current = current


class WorkspaceChanged(AgentnbError):
    """The session is bound to another workspace than this runtime's; new work is refused.

    A session binds its working directory at its first run (``workspace/bound``) and never
    switches (Everruns: "a session can never switch heads"). ``bound`` and ``current`` are
    the two bindings (``root``, ``path``, ``fingerprint``). Use the same ``nb.Workspace`` as
    before, or make the runtime with ``accept_workspace_change=True`` to rebind it.
    """

    def __init__(self, message: str, *, bound: Any = None, current: Any = None) -> None:
        super().__init__(message)
        self.bound = bound
        self.current = current


class WorkspaceEscape(InvalidInput):
    """A workspace path that leads out of the session's workspace (an absolute path, ``..``,
    or a symlink pointing out), or names nothing there: refused, nothing touched. The
    built-in file tools return it to the model as the call's error."""


class QueueFull(AgentnbError):
    """A session's queue is at its capacity; the command was not accepted (nothing written).

    ``queue`` is ``"steering"`` (guidance not yet applied to the running turn) or
    ``"commands"`` (commands accepted and not yet carried out); ``limit`` its capacity (see
    ``agentnb.Limits``). Wait for the session to catch up, or raise the limit.
    """

    def __init__(self, message: str, *, queue: str, limit: int) -> None:
        super().__init__(message)
        self.queue = queue
        self.limit = limit


class EvalRegression(AgentnbError, AssertionError):
    """``nb.evals.assert_no_regression``: cases of an experiment scored lower than in its
    baseline. The message holds their table; ``cases`` their names."""

    def __init__(self, message: str, *, cases: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.cases = tuple(cases)


class Unauthorized(AgentnbError):
    """The agentnb service refused the request's credentials: no token, a wrong, revoked or
    expired one, or (from a browser) a missing CSRF header. Nothing was read or written;
    ask for a token with ``agentnb token add USER`` and pass it to ``nb.connect``."""


class ToolsetUnavailable(AgentnbError):
    """A toolset could not be opened: its server would not start, answer or list its tools.

    ``toolset`` names it (the command or URL); the message says why, with the end of what the
    server wrote to stderr when there is any. Nothing was written to any session: fix the
    command (or start the server) and create the runtime again.
    """

    def __init__(self, message: str, *, toolset: str = "") -> None:
        super().__init__(message)
        self.toolset = toolset


class MiddlewareFailed(AgentnbError):
    """A hook of ``Agent(middleware=[...])`` raised: the run ends ``failed`` with this as its
    reason (the hook's name and its error). Fix the middleware, then ``resume()`` the task."""


class ReducerFailed(AgentnbError):
    """The reducer of a ``required=True`` application event type raised on an event being
    recorded: nothing of it is written and the turn fails with the reason (fail closed).
    Also raised by ``session.app_state(name)`` when that state could not be rebuilt."""


class SubagentLimitExceeded(AgentnbError):
    """A sub-agent call would pass ``Limits(max_subagent_depth=...)`` or
    ``Limits(max_children_per_turn=...)``; no child session was made (nothing written).

    The calling agent's model is told why (the call's tool result), and decides what next.
    ``limit`` names the bound (``"max_subagent_depth"`` or ``"max_children_per_turn"``) and
    ``value`` its setting.
    """

    def __init__(self, message: str, *, limit: str, value: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.value = value


def describe(exc: BaseException, limit: int = 2000, *, typed: bool = True) -> str:
    """``"TypeName: message"`` (or the message alone) for any exception, never raising.

    A broken ``__str__`` does not break the description: failures are recorded from here.
    """
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - the description of an error must not fail itself
        text = "<the error's message could not be read>"
    name = type(exc).__name__
    out = (f"{name}: {text}" if text else name) if typed or not text else text
    return out if len(out) <= limit else out[: limit - 1] + "\u2026"


DISTRIBUTION = "agentnb-sessions"
"""The name this project is (to be) published under: ``agentnb`` in the package index is
another project, so no advice here names that distribution."""


def install_hint(extra: str) -> str:
    """The command that installs optional dependencies ``extra``, for ``ImportError`` texts.

    Until the distribution is published the way in is a clone of the repository, so the
    advice is an editable install of it (in the clone's ``.venv``, as the README says).
    """
    return f'pip install -e ".[{extra}]" (in the agentnb clone; published as {DISTRIBUTION})'


class HistoryError(AgentnbError):
    """Base of history-paging errors."""


class InvalidLimit(HistoryError, ValueError):
    """A page limit outside 1..256."""


class InvalidCursor(HistoryError, InvalidInput):
    """A cursor that is malformed or was tampered with (of a history page, a stream or a
    listing); an ``InvalidInput`` too, as every argument the caller got wrong."""


class CrossSessionCursor(HistoryError, ValueError):
    """A cursor issued for another session."""


class ExpiredCursor(HistoryError):
    """A cursor that no longer matches the session (its snapshot is gone or ahead)."""


class HistoryTooLarge(HistoryError):
    """A page would need to replay more events than the configured bound."""


class StorageError(AgentnbError):
    """The store refused an operation or could not complete it."""


class AppendConflict(StorageError):
    """The expected seq is stale: another writer committed first. Re-read the head and retry."""


class InboxChanged(AppendConflict):
    """A commit conditioned on the inbox head found new commands; re-read the inbox."""


class Fenced(StorageError):
    """The writer's lease epoch is stale; it must stop writing (another holder took over)."""


class LeaseHeld(StorageError):
    """Another holder has a live lease on the session; wait for it to expire or be released."""


class Corrupt(StorageError):
    """Stored data is not what agentnb wrote; reads fail closed instead of skipping it."""


class UnknownRequiredEvent(Corrupt):
    """A required event type that this reader has no codec for; recovery stops here."""


class ArchiveCorrupt(Corrupt):
    """A backup archive fails its checks: a line's checksum, a session's digest or head, or
    its format. ``path``, ``offset`` (the byte where the failing line starts) and ``session``
    (the session that line belongs to, None outside any) say where; nothing was restored."""

    def __init__(
        self, message: str, *, path: str = "", offset: int = 0, session: str | None = None
    ) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset
        self.session = session


class StoreNotEmpty(StorageError):
    """A restore into a store that already holds sessions (restore into an empty store, or
    pass ``merge=True`` when no session overlaps), or a merge or migration whose sessions
    exist at the target with another log. ``sessions`` names the overlapping ones."""

    def __init__(self, message: str, *, sessions: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.sessions = tuple(sessions)


class RecoveryLimitExceeded(StorageError):
    """A replay or read would exceed its configured bound."""


class SessionFull(StorageError):
    """The session holds as many events or bytes as its cap allows (``agentnb.Limits``).

    The commit that would pass the cap is refused; the run it belongs to ends with the
    reason committed (in headroom the cap keeps for ending runs), and the session stays
    readable. Start a new session (``fork`` carries its state over), or raise the cap.
    """
