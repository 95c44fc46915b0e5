"""The payload models: one frozen pydantic model per built-in event type.

``PAYLOADS`` maps each built-in type to its model; the type sets below it say which log a type
belongs to (``INBOX_TYPES``) and which a reader may pass over (the optional ones). The package's
docstring (``agentnb.events``) says how the catalogue follows the seeds'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentnb.blocks import BlockPart
from agentnb.events.codec import FrozenDict

__all__ = [
    "BUILTIN_TYPES",
    "INBOX_TYPES",
    "PAYLOADS",
    "REASONING",
    "SCHEDULE_TYPES",
    "ActionEnd",
    "ActionStart",
    "AgentBinding",
    "AgentRebound",
    "CommandKind",
    "CompactionEnd",
    "CompactionStart",
    "ContextBuild",
    "ContextReplaced",
    "FeedbackAdded",
    "FeedbackRemoved",
    "InboxAccepted",
    "InboxApplied",
    "InboxHandled",
    "InboxMark",
    "InboxRejected",
    "InboxStarted",
    "InputApplied",
    "InputDiscarded",
    "InputReceived",
    "InteractionKind",
    "InteractionRequested",
    "InteractionResolved",
    "Message",
    "MessageEvent",
    "MigrationBaseline",
    "ModelChunk",
    "ModelDispatch",
    "ModelEnd",
    "ModelRetry",
    "Payload",
    "PermissionChanged",
    "PermissionRuleData",
    "PlanChanged",
    "PlanItem",
    "PlanStatus",
    "PresentationHint",
    "ReasoningFragment",
    "ReasoningPart",
    "RecoveryApplied",
    "RequestPrepared",
    "RunEnd",
    "RunReason",
    "RunStart",
    "RunStopRequested",
    "ScheduleAdded",
    "ScheduleFired",
    "ScheduleRemoved",
    "SessionRef",
    "StateCheckpoint",
    "StateRestored",
    "Status",
    "StepEnd",
    "StepStart",
    "SubagentCompleted",
    "SubagentLinked",
    "SubagentSpawned",
    "TaskChanged",
    "ToolCallData",
    "ToolCallFragment",
    "ToolChunk",
    "ToolDecision",
    "ToolDispatch",
    "ToolRequested",
    "ToolResult",
    "ToolResultStatus",
    "TurnOutput",
    "TurnResumed",
    "TurnStart",
    "TurnStatus",
    "VerificationResult",
    "WorkspaceBound",
    "WorkspaceCheckpoint",
    "made_once",
    "message_of",
]


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
    message: Message
    try:
        message = data._message
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
