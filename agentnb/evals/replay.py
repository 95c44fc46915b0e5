"""Replaying recorded turns against an agent, without running their side effects again.

``replay(dataset, agent, ...)`` runs every case in a fresh session of a throwaway store (or of
the namespace ``evals/<name>`` of a store given): the material and steering the turn was
given go in first (as material, so the replay does not depend on when a person typed), then
its input; the agent's tool calls are served from the recording (``tools="recorded"``), the
requests it makes for a person are answered as people answered them (``answers=
"recorded"``), and each case's new turn is read back from its log the way the dataset read
the recorded one (``cases_of``). Evaluators score it; their scores are recorded in the
replay's log as feedback (``by="evaluator:<name>"``), so exports of an evaluation store hold
them too.

**Recorded tools.** Each tool becomes a stand-in with the same name, schema, description
and flags whose call looks the call up in the case's recording by tool name and canonical
arguments (the arguments the tool's own validation makes, as canonical JSON) and returns the
recorded result. A call with no recording (new arguments, a renamed tool) is a tool error the
model sees, ``"no recorded result for ..."``, and is counted (``unrecorded_calls``); the real
tool never runs. Calls of one tool with the same arguments get the recorded results in order,
then the last again. ``"live"`` runs the real tools; a mapping ``{name: "live" | "recorded"}``
chooses per tool (others are recorded). External tools are never run here: their results
arrive as answers, like the recording's.

**Recorded answers.** A request the replay makes (an approval, an external call's result, a
question) gets the answer the recording gave the same request: same kind and tool and canonical
arguments (questions: same prompt), in order. One with no recording is counted
(``unanswered_requests``) and refused: approvals are rejected, questions declined, external
calls answered with an error, each with the reason ``"no recorded answer for ..."``.

**Deterministic.** With a ``ScriptedModel`` whose script is a function of the messages (or a
fresh model per case: pass ``agent`` as a function of the case), the same dataset replays to
the same outputs, scores and counts whatever ``concurrency`` is.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from agentnb.agent import Agent
from agentnb.answers import Answer
from agentnb.errors import AgentnbError, InvalidInput, describe
from agentnb.evals.cases import Dataset, EvalCase, Row, cases_of
from agentnb.evals.evaluators import (
    EvaluatorContext,
    Score,
    check_evaluators,
    run_evaluators,
)
from agentnb.evals.experiment import CaseResult, Experiment
from agentnb.events import canonical_json
from agentnb.ids import check_id, new_id
from agentnb.tools import Tool, ToolContext

if TYPE_CHECKING:
    from agentnb.runtime.runtime import Runtime
    from agentnb.session import Session
    from agentnb.stores.base import SessionStore

__all__ = ["CaseResult", "UnrecordedCall", "replay"]

ToolMode = Literal["recorded", "live"]
MAX_ROUNDS = 50
"""Most answer rounds one replayed turn gets (a turn that keeps asking stops there)."""


class UnrecordedCall(Exception):
    """A replayed tool call the recording holds no result for (the model sees this error)."""


@dataclass
class _Tape:
    """What one case may be served, and what it asked for that was not recorded."""

    calls: dict[str, deque[tuple[str | None, str]]] = field(default_factory=dict)
    answers: dict[str, deque[Mapping[str, Any]]] = field(default_factory=dict)
    last_call: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    unrecorded: list[str] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def serve(self, key: str, what: str) -> str:
        with self.lock:
            queued = self.calls.get(key)
            if queued:
                self.last_call[key] = queued.popleft()
            recorded = self.last_call.get(key)
            if recorded is None:
                self.unrecorded.append(what)
        if recorded is None:
            raise UnrecordedCall(
                f"no recorded result for {what}; this replay serves only the calls the "
                "recorded turn made (the real tool was not run)"
            )
        return recorded[1]

    def answer(self, key: str) -> Mapping[str, Any] | None:
        with self.lock:
            queued = self.answers.get(key)
            return queued.popleft() if queued else None


def _arguments_key(name: str, arguments: Mapping[str, Any], tool: Tool | None) -> str:
    """The canonical form a call is matched by: name and the arguments as validated."""
    if tool is not None:
        try:
            import pydantic_core

            checked = pydantic_core.to_jsonable_python(tool.validate(arguments))
            return canonical_json([name, checked])
        except Exception:  # noqa: BLE001, S110 - arguments the tool refuses match as given
            pass
    return canonical_json([name, dict(arguments)])


def _answer_key(kind: str, tool_name: str | None, arguments: Any, prompt: str | None) -> str:
    if kind == "ask_user":
        return canonical_json([kind, prompt])
    return canonical_json([kind, tool_name, arguments or {}])


def _tape_of(case: EvalCase, tools: Mapping[str, Tool]) -> _Tape:
    tape = _Tape()
    for call in case.tool_calls:
        if call.get("status") is None:
            continue  # no result was recorded (the turn stopped under it)
        key = _arguments_key(call["name"], call["arguments"], tools.get(call["name"]))
        tape.calls.setdefault(key, deque()).append((call["status"], call["output"] or ""))
    for asked in case.answers:
        key = _answer_key(asked["kind"], asked["tool_name"], asked["arguments"], asked["prompt"])
        tape.answers.setdefault(key, deque()).append(asked["answer"])
    return tape


def _answer_of(payload: Mapping[str, Any]) -> Any:
    """The ``respond`` answer an ``interaction/resolved`` payload recorded."""
    if "approved" in payload:
        if payload["approved"]:
            return Answer.approve(payload.get("edited_args"))
        return Answer.reject(payload.get("reason") or "rejected by the user")
    if payload.get("declined"):
        return Answer.reject(payload.get("reason") or "declined")
    return Answer.output(payload.get("output", ""))


def _refusal(kind: str, what: str) -> Any:
    reason = f"no recorded answer for {what}; this replay answers only what the recording did"
    if kind == "external_execution":
        return Answer.output(f"Error: {reason}")
    return Answer.reject(reason)


# --------------------------------------------------------------------------------------------


class _Tapes:
    """The tapes of the cases being replayed, by replay session id (what stand-ins read)."""

    def __init__(self) -> None:
        self.by_session: dict[str, _Tape] = {}

    def stand_in(self, tool: Tool, live: Mapping[str, Tool]) -> Tool:
        """A tool like ``tool`` whose calls are served from the case's recording."""
        name = tool.name

        async def call(arguments: dict[str, Any], ctx: ToolContext) -> str:
            tape = self.by_session.get(ctx.key.session_id)
            key = _arguments_key(name, arguments, live.get(name))
            what = f"{name}({canonical_json(arguments)})"
            if tape is None:
                raise UnrecordedCall(f"no recorded result for {what}: not a replayed session")
            return tape.serve(key, what)

        def check(arguments: dict[str, Any]) -> None:
            tool.validate(arguments)  # the model is told of bad arguments as by the real tool

        return Tool.from_schema(
            name,
            tool.description,
            tool.parameters,
            call,
            check=check,
            idempotent=True,  # it only reads the recording: safe to run again
            confirm=tool.confirm,
        )


def _tool_modes(tools: object, agent: Agent) -> dict[str, ToolMode]:
    names = [t.name for t in agent.tools]
    if tools in ("recorded", "live"):
        return dict.fromkeys(names, tools)
    if not isinstance(tools, Mapping):
        raise InvalidInput(
            f"tools must be 'recorded', 'live' or a mapping of tool name to one, got {tools!r}"
        )
    unknown = set(tools) - set(names)
    if unknown:
        raise InvalidInput(f"tools= names tools the agent does not have: {sorted(unknown)}")
    modes: dict[str, ToolMode] = {}
    for name in names:
        mode = tools.get(name, "recorded")
        if mode not in ("recorded", "live"):
            raise InvalidInput(f"tools[{name!r}] must be 'recorded' or 'live', got {mode!r}")
        modes[name] = mode
    return modes


def _replay_agent(agent: Agent, modes: Mapping[str, ToolMode], tapes: _Tapes) -> Agent:
    live = {t.name: t for t in agent.tools}
    tools = [
        tapes.stand_in(t, live)
        if modes.get(t.name) == "recorded" and not t.external and t.interaction is None
        else t
        for t in agent.tools
    ]
    return Agent(
        name=agent.name,
        agent_id=agent.agent_id,
        model=agent.model,
        tools=[*tools, *agent.toolsets],
        instructions=agent.instructions,
        max_steps=agent.max_steps,
        max_turn_seconds=agent.max_turn_seconds,
        context_window=agent.context_window,
        max_turn_tokens=agent.max_turn_tokens,
        max_session_tokens=agent.max_session_tokens,
        compaction=agent.compaction,
        middleware=agent.middleware,
    )


def _rows_of(session: Session) -> list[Row]:
    return [
        (e.type, e.seq, _us(e), e.turn_id, e.payload)
        for e in session.log.scan()
        if not e.type.startswith(("model/chunk", "tool/chunk"))
    ]


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(event: Any) -> int:
    """``occurred_at`` in microseconds since the epoch (what the exports' ``epoch_us`` gives)."""
    return int((event.occurred_at - _EPOCH) // timedelta(microseconds=1))


# --------------------------------------------------------------------------------------------


def replay(
    dataset: Dataset | Sequence[EvalCase],
    agent: Agent | Callable[[EvalCase], Agent],
    *,
    tools: ToolMode | Mapping[str, ToolMode] = "recorded",
    answers: Literal["recorded"] = "recorded",
    store: str | SessionStore = "memory://",
    concurrency: int = 4,
    evaluators: Sequence[Any] = (),
    name: str | None = None,
    timeout: float = 120.0,
    progress: bool = True,
) -> Experiment:
    """Run every case of ``dataset`` with ``agent`` and score it; returns an ``Experiment``.

    ``agent``: an ``Agent`` for every case, or a function of the case that makes one (a
    fresh list-scripted ``ScriptedModel`` per case, say); each runs in its own runtime's
    session ``evals/<name>/<case>`` then. ``store``: where the replays are recorded (a
    throwaway ``memory://`` by default); ``name``: the experiment's (a fresh one by default;
    a name already replayed in ``store`` raises ``InvalidInput``). ``timeout``: seconds one
    case's runs may take. ``progress``: a tqdm bar (a widget in a notebook).
    """
    from agentnb.stores import open_store

    cases = tuple(dataset)
    if not cases:
        raise InvalidInput("the dataset has no cases to replay")
    if not all(isinstance(c, EvalCase) for c in cases):
        raise InvalidInput("replay takes a Dataset (nb.evals.dataset(...)) or a list of EvalCase")
    if answers != "recorded":
        raise InvalidInput(f"answers must be 'recorded', got {answers!r}")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidInput(f"concurrency must be a positive int, got {concurrency!r}")
    checked = check_evaluators(evaluators)
    name = check_id(name, "name") if name is not None else new_id("exp")
    namespace = f"evals/{name}"
    per_case = not isinstance(agent, Agent)
    if per_case and not callable(agent):
        raise InvalidInput(f"agent must be an nb.Agent or a function of the case, got {agent!r}")
    first = agent(cases[0]) if per_case else agent  # type: ignore[operator]
    if not isinstance(first, Agent):
        raise InvalidInput(f"agent(case) must return an nb.Agent, got {type(first).__name__}")
    modes = _tool_modes(tools, first)
    opened = open_store(store)
    taken = opened.find_sessions(namespace=namespace, limit=1, archived=None)
    if taken:
        raise InvalidInput(
            f"experiment {name!r} was replayed in this store already (namespace "
            f"{namespace!r}); give another name="
        )
    runner = _Runner(agent, first, tools, modes, opened, namespace, checked, name, timeout)
    started = time.time()
    try:
        results = _map(runner.one, cases, concurrency, progress, name)
    finally:
        runner.close()
    return Experiment(
        name=name,
        results=tuple(results),
        evaluators=tuple(e.get_default_evaluation_name() for e in checked),
        agent_name=first.name,
        store=opened,
        namespace=namespace,
        tools=dict(modes),
        started_at=started,
        ended_at=time.time(),
    )


class _Runner:
    """The runtimes of one replay (one shared, or one per case) and the tapes they read."""

    def __init__(
        self,
        agent: Agent | Callable[[EvalCase], Agent],
        first: Agent,
        tools: ToolMode | Mapping[str, ToolMode],
        modes: Mapping[str, ToolMode],
        store: SessionStore,
        namespace: str,
        evaluators: Sequence[Any],
        name: str,
        timeout: float,
    ) -> None:
        self.agent, self.first, self.tools = agent, first, tools
        self.store, self.namespace = store, namespace
        self.evaluators, self.name, self.timeout = evaluators, name, timeout
        self.tapes = _Tapes()
        self.shared: Runtime | None = None
        if isinstance(agent, Agent):
            self.shared = self._runtime(first, modes)

    def _runtime(self, agent: Agent, modes: Mapping[str, ToolMode]) -> Runtime:
        from agentnb.runtime.runtime import Runtime

        return Runtime(
            _replay_agent(agent, modes, self.tapes), store=self.store, namespace=self.namespace
        )

    def one(self, case: EvalCase) -> CaseResult:
        if self.shared is not None:
            runtime, made = self.shared, self.first
        else:
            made = self.agent(case)  # type: ignore[operator]
            if not isinstance(made, Agent):
                raise InvalidInput(
                    f"agent(case) must return an nb.Agent, got {type(made).__name__}"
                )
            runtime = self._runtime(made, _tool_modes(self.tools, made))
        tape = _tape_of(case, {t.name: t for t in made.tools})
        self.tapes.by_session[case.name] = tape
        try:
            return _replay_case(runtime, case, tape, self.evaluators, self.name, self.timeout)
        finally:
            if runtime is not self.shared:
                runtime.close()

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()


def _map(
    one: Callable[[EvalCase], CaseResult],
    cases: Sequence[EvalCase],
    concurrency: int,
    progress: bool,
    name: str,
) -> list[CaseResult]:
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(cases), desc=f"replay {name}", unit="case")
    try:
        with ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="agentnb-replay"
        ) as pool:
            futures = [pool.submit(one, c) for c in cases]
            if bar is not None:
                for f in futures:
                    f.add_done_callback(lambda _f: bar.update(1))
            return [f.result() for f in futures]
    finally:
        if bar is not None:
            bar.close()


def _replay_case(
    runtime: Runtime,
    case: EvalCase,
    tape: _Tape,
    evaluators: Sequence[Any],
    name: str,
    timeout: float,
) -> CaseResult:
    began = time.monotonic()
    session = runtime.session(case.name, user_id=case.user_id)
    replayed: EvalCase | None = None
    try:
        for given in case.inputs:
            session.inject(given["text"])
        outcome = session.submit(case.input).wait(timeout)
        rounds = 0
        while outcome.status == "suspended" and rounds < MAX_ROUNDS:
            rounds += 1
            pending = session.pending()
            if not pending:
                break
            chosen: dict[str, Any] = {}
            for request_id, asked in pending.items():
                key = _answer_key(asked.kind, asked.tool_name, asked.arguments, asked.prompt)
                recorded = tape.answer(key)
                what = _described(asked.kind, asked.tool_name, asked.arguments, asked.prompt)
                if recorded is None:
                    with tape.lock:
                        tape.unanswered.append(what)
                    chosen[request_id] = _refusal(asked.kind, what)
                else:
                    chosen[request_id] = _answer_of(recorded)
            outcome = session.respond(chosen).wait(timeout)
        k = session.key
        turns = cases_of((k.namespace, k.user_id, k.agent_id, k.session_id), _rows_of(session))
        replayed = turns[-1] if turns else None
        status, error = outcome.status, outcome.error
    except (AgentnbError, TimeoutError) as exc:
        status, error = "error", describe(exc)
    seconds = time.monotonic() - began
    result = CaseResult(
        case=case,
        replayed=replayed,
        status=status,
        error=error,
        unrecorded_calls=len(tape.unrecorded),
        unanswered_requests=len(tape.unanswered),
        session_id=case.name,
        seconds=seconds,
    )
    if not evaluators:
        return result
    scores = run_evaluators(evaluators, context_of(result, name))
    _record_scores(session, replayed, scores)
    return dataclasses.replace(result, scores=tuple(scores))


def _described(kind: str, tool: str | None, arguments: Any, prompt: str | None) -> str:
    if kind == "ask_user":
        return f"the question {prompt!r}"
    return f"{kind} of {tool}({canonical_json(arguments or {})})"


def context_of(result: CaseResult, experiment: str) -> EvaluatorContext[Any, Any, Any]:
    """The ``EvaluatorContext`` evaluators see for one replayed case."""
    from pydantic_evals.otel._errors import SpanTreeRecordingError

    from agentnb.evals.cases import case_metadata

    case, new = result.case, result.replayed
    metrics: dict[str, int | float] = {
        "unrecorded_calls": result.unrecorded_calls,
        "unanswered_requests": result.unanswered_requests,
        "input_tokens": 0 if new is None else new.input_tokens,
        "output_tokens": 0 if new is None else new.output_tokens,
        "model_calls": 0 if new is None else new.model_calls,
    }
    if new is not None and new.latency_ms is not None:
        metrics["latency_ms"] = new.latency_ms
    return EvaluatorContext(
        name=case.name,
        inputs=case.input,
        metadata=case_metadata(case),
        expected_output=case.expected_output,
        output=None if new is None else new.output,
        duration=result.seconds,
        _span_tree=SpanTreeRecordingError(
            "agentnb replays record no OpenTelemetry spans: the replay's tool calls are in "
            "ctx.attributes['tool_calls'] and its log"
        ),
        attributes={
            "tool_calls": [] if new is None else [dict(c) for c in new.tool_calls],
            "status": result.status,
            "experiment": experiment,
        },
        metrics=metrics,
    )


def _record_scores(session: Session, replayed: EvalCase | None, scores: Sequence[Score]) -> None:
    """Each score as feedback on the replayed turn (``by="evaluator:<name>"``)."""
    if replayed is None:
        return
    for s in scores:
        label = s.value if isinstance(s.value, str) and len(s.value) <= 64 else None
        comment = s.reason or (s.value if isinstance(s.value, str) and label is None else None)
        if s.number is None and label is None and not comment:
            continue
        session.feedback(
            replayed.turn_id,
            score=s.number,
            label=label,
            comment=comment or None,
            by=f"evaluator:{s.name}",
        )
