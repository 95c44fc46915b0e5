"""Events: the immutable, typed facts every session is made of.

An ``Event`` is an envelope (``schema_version``, ``event_id``, ``seq``, ``occurred_at``, ``type``,
``turn_id``, ``run_id``, ``required``, ``payload``). The payload is JSON, checked and deep-frozen
when the event is created, so nothing can change it after it was accepted, and its canonical JSON
(``payload_json``) travels with it from then on. Events are ordered by ``seq`` (gapless per
session, from 1), never by time.

Each built-in type has one payload model (``payloads``; ``PAYLOADS`` maps type to model);
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

The package is in four parts, each importable on its own, and this module names them all:
``codec`` (frozen JSON and the one codec: ``FrozenDict``, ``freeze_json``, ``canonical_json``),
``payloads`` (the payload models, ``PAYLOADS`` and the type sets), ``registry`` (application
types: ``register_event_type``, ``check_readable``) and ``envelope`` (``Event``: two
constructors, one for the writer and one for the stores; its payload encoded once).
"""

from __future__ import annotations

import sys
import types

from agentnb.events import envelope as _envelope
from agentnb.events.codec import (
    BLOB_THRESHOLD,
    FrozenDict,
    canonical_json,
    clean_text,
    decode_json,
    decode_payload,
    freeze_json,
)
from agentnb.events.envelope import (
    SCHEMA_VERSION,
    Event,
    builtins_type_name,
    event_digest,
)
from agentnb.events.payloads import (
    BUILTIN_TYPES,
    INBOX_TYPES,
    PAYLOADS,
    REASONING,
    SCHEDULE_TYPES,
    ActionEnd,
    ActionStart,
    AgentBinding,
    AgentRebound,
    CommandKind,
    CompactionEnd,
    CompactionStart,
    ContextBuild,
    ContextReplaced,
    FeedbackAdded,
    FeedbackRemoved,
    InboxAccepted,
    InboxApplied,
    InboxHandled,
    InboxMark,
    InboxRejected,
    InboxStarted,
    InputApplied,
    InputDiscarded,
    InputReceived,
    InteractionKind,
    InteractionRequested,
    InteractionResolved,
    Message,
    MessageEvent,
    MigrationBaseline,
    ModelChunk,
    ModelDispatch,
    ModelEnd,
    ModelRetry,
    Payload,
    PermissionChanged,
    PermissionRuleData,
    PlanChanged,
    PlanItem,
    PlanStatus,
    PresentationHint,
    ReasoningFragment,
    ReasoningPart,
    RecoveryApplied,
    RequestPrepared,
    RunEnd,
    RunReason,
    RunStart,
    RunStopRequested,
    ScheduleAdded,
    ScheduleFired,
    ScheduleRemoved,
    SessionRef,
    StateCheckpoint,
    StateRestored,
    Status,
    StepEnd,
    StepStart,
    SubagentCompleted,
    SubagentLinked,
    SubagentSpawned,
    TaskChanged,
    ToolCallData,
    ToolCallFragment,
    ToolChunk,
    ToolDecision,
    ToolDispatch,
    ToolRequested,
    ToolResult,
    ToolResultStatus,
    TurnOutput,
    TurnResumed,
    TurnStart,
    TurnStatus,
    VerificationResult,
    WorkspaceBound,
    WorkspaceCheckpoint,
    made_once,
    message_of,
)
from agentnb.events.registry import (
    Reducer,
    app_type,
    check_readable,
    check_writable,
    payload_model,
    reducers,
    register_event_type,
    unregister_event_type,
)

__all__ = [
    "BLOB_THRESHOLD",
    "BUILTIN_TYPES",
    "CHECK_BUILT",
    "INBOX_TYPES",
    "PAYLOADS",
    "REASONING",
    "SCHEDULE_TYPES",
    "SCHEMA_VERSION",
    "ActionEnd",
    "ActionStart",
    "AgentBinding",
    "AgentRebound",
    "CommandKind",
    "CompactionEnd",
    "CompactionStart",
    "ContextBuild",
    "ContextReplaced",
    "Event",
    "FeedbackAdded",
    "FeedbackRemoved",
    "FrozenDict",
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
    "Reducer",
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
    "app_type",
    "builtins_type_name",
    "canonical_json",
    "check_readable",
    "check_writable",
    "clean_text",
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

CHECK_BUILT: bool
"""When True, every payload ``Event.built`` makes is also checked by its model and must come
out the same (the test suite turns it on: the trusted path is proven by every test). The
switch lives in ``envelope``, which reads it; setting it here sets it there."""


class _Events(types.ModuleType):
    """This package as a module whose ``CHECK_BUILT`` is ``envelope.CHECK_BUILT``."""

    @property
    def CHECK_BUILT(self) -> bool:
        return _envelope.CHECK_BUILT

    @CHECK_BUILT.setter
    def CHECK_BUILT(self, value: bool) -> None:
        _envelope.CHECK_BUILT = value


sys.modules[__name__].__class__ = _Events
