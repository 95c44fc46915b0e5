"""``Agent``: the immutable description of what runs a session (model, tools, instructions).

A session is bound to its agent: the first turn records the agent's fingerprint
(``agent/bound``: agent id, a hash of the instructions, each tool's name with its parameters'
JSON schema, the model's name). ``check_agent`` is the one rule for new work: the same
fingerprint goes on; none recorded yet binds this one; another one is refused
(``AgentChanged``, naming what changed) unless the runtime accepts agent changes, which
records ``agent/changed`` with both fingerprints. The session facade applies the rule before
it accepts a command, and the driver again when it starts a run.

Tools may come from ``Toolset``s (an MCP server's tools): their tools are known only once
the toolset is open, so an agent with toolsets is a template. Each ``Runtime`` opens them
and works with ``agent.with_opened(tools)``, an agent that holds every tool; its
fingerprint then covers the toolsets' tools like any other.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from agentnb.compaction import Compactor
from agentnb.errors import AgentChanged, InvalidInput
from agentnb.events import (
    AgentBinding,
    AgentRebound,
    Message,
    Payload,
    canonical_json,
    freeze_json,
)
from agentnb.ids import check_id, check_seconds, check_wait, new_id
from agentnb.middleware import Hooks
from agentnb.models.base import Model, check_context_window
from agentnb.models.strings import from_string
from agentnb.tools import Tool, Toolset, tool
from agentnb.workspace import Workspace

__all__ = [
    "Agent",
    "SubagentTool",
    "agent_changes",
    "agents_of",
    "check_agent",
    "subagent",
]


@dataclass(frozen=True)
class Agent:
    """A reusable agent: sessions are keyed by its ``agent_id``.

    ``tools`` may hold ``Tool`` objects (from ``@nb.tool``), plain functions, which are
    wrapped with ``nb.tool``, and toolsets (``nb.mcp.stdio(...)``, ``nb.mcp.http(...)``),
    whose tools each runtime lists when it opens them (``toolsets``). ``max_steps`` bounds
    the reasoning iterations of one run.
    ``max_turn_seconds`` bounds how long a task executes (over all its runs; time waiting for
    a person does not count): past it the run is interrupted with the reason recorded, and
    ``resume`` can continue it. ``submit(..., timeout=)`` sets it for one task.
    ``max_turn_tokens`` and ``max_session_tokens`` stop a task (failed, with the reason and
    ``stop_reason`` recorded) once its turn or its session used that many tokens, as
    providers report them. ``context_window`` is the model's window in tokens (default: the
    model's own ``context_window``). ``compaction`` (a ``Compactor``) keeps the context the
    next model call sees inside that window; without one, a context that outgrows the window
    fails its turn with ``stop_reason`` ``context_overflow``. ``middleware`` (objects with
    some of the hooks ``before_model``, ``after_model``, ``before_tool``, ``after_tool``)
    runs around each model and tool call and may record application events or refuse a
    call (``agentnb.middleware``).
    ``verify`` (a function of the final answer's text, sync or async) checks a turn's output
    before the turn completes: ``True`` (or None) passes it; ``False``, or a string saying
    why, fails it. A failed check sends the turn back to the model once, with the reason; a
    second failure fails the turn (``stop_reason`` ``verification_failed``), and a hook that
    raises fails it with the error (``verification_error``). Each check is recorded as
    ``verification/result``.
    ``wait_inline`` (seconds, 0 by default) lets a run that needs a person (an approval, a
    question, an external result) wait that long in place, alive and holding its lease, and
    go on in the same run when the answer arrives; past it (or on interrupt, close, crash)
    the turn suspends as with 0 (``@nb.tool(wait_inline=)`` sets it per tool). The wait does
    not count toward the run's time limit (a later run of the turn counts the whole of
    earlier runs, waits included).
    """

    name: str
    agent_id: str
    model: Model
    tools: tuple[Tool, ...] = ()
    instructions: str = ""
    max_steps: int = 25
    max_turn_seconds: float | None = None
    context_window: int | None = None
    max_turn_tokens: int | None = None
    max_session_tokens: int | None = None
    compaction: Compactor | None = None
    workspace: Workspace | None = None
    """The working files of its sessions (``nb.Workspace``), or None."""
    middleware: Hooks = field(default_factory=Hooks, compare=False, repr=False)
    """The hooks of ``middleware=[...]`` (``agentnb.middleware``), found once."""
    verify: Callable[[str], Any] | None = None
    wait_inline: float = 0.0
    """Seconds a run waits in place for a person's answer before it suspends (0: at once)."""
    toolsets: tuple[Toolset, ...] = ()
    """The toolsets among ``tools``, opened by each runtime (their tools are not in ``tools``
    until then: see ``with_opened``)."""
    _by_name: dict[str, Tool] = field(init=False, repr=False, compare=False)
    _fingerprint: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __init__(
        self,
        name: str,
        agent_id: str,
        model: Model | str,
        tools: Iterable[Tool | Toolset | Callable[..., Any]] = (),
        instructions: str = "",
        max_steps: int = 25,
        max_turn_seconds: float | None = None,
        context_window: int | None = None,
        max_turn_tokens: int | None = None,
        max_session_tokens: int | None = None,
        compaction: Compactor | None = None,
        workspace: Workspace | None = None,
        middleware: Iterable[object] | Hooks = (),
        verify: Callable[[str], Any] | None = None,
        wait_inline: float = 0.0,
    ) -> None:
        check_id(name, "name")
        check_id(agent_id, "agent_id")
        if isinstance(model, str):
            model = from_string(model)  # its name is the string: the fingerprint holds it
        if not isinstance(model, Model):
            raise InvalidInput(
                f"model must be an agentnb Model (e.g. nb.ScriptedModel) or a model string "
                f'such as "anthropic:claude-sonnet-4-5", got {type(model).__name__}'
            )
        if not isinstance(instructions, str):
            raise InvalidInput("instructions must be a string")
        if not isinstance(max_steps, int) or isinstance(max_steps, bool) or max_steps < 1:
            raise InvalidInput(f"max_steps must be a positive int, got {max_steps!r}")
        if max_turn_seconds is not None:
            max_turn_seconds = check_seconds(max_turn_seconds, "max_turn_seconds")
        if isinstance(tools, Tool | Toolset) or not isinstance(tools, Iterable):
            raise InvalidInput("tools must be a list of tools, functions and toolsets")
        tools = list(tools)
        toolsets = tuple(t for t in tools if isinstance(t, Toolset))
        wrapped = tuple(
            t if isinstance(t, Tool) else tool(t) for t in tools if not isinstance(t, Toolset)
        )
        by_name: dict[str, Tool] = {}
        for t in wrapped:
            if t.name in by_name:
                raise InvalidInput(f"two tools are named {t.name!r}; tool names must be unique")
            by_name[t.name] = t
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "agent_id", agent_id)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "tools", wrapped)
        object.__setattr__(self, "toolsets", toolsets)
        object.__setattr__(self, "instructions", instructions)
        object.__setattr__(self, "max_steps", max_steps)
        object.__setattr__(self, "max_turn_seconds", max_turn_seconds)
        object.__setattr__(self, "context_window", check_context_window(context_window))
        if compaction is not None and not isinstance(compaction, Compactor):
            raise InvalidInput(
                "compaction must be an agentnb Compactor (nb.SummaryCompactor(...) or "
                f"nb.TrimCompactor(...)), got {type(compaction).__name__}"
            )
        object.__setattr__(self, "compaction", compaction)
        if workspace is not None and not isinstance(workspace, Workspace):
            raise InvalidInput(
                f"workspace must be an nb.Workspace(root), got {type(workspace).__name__}"
            )
        object.__setattr__(self, "workspace", workspace)
        object.__setattr__(
            self, "middleware", middleware if isinstance(middleware, Hooks) else Hooks(middleware)
        )
        if verify is not None and not callable(verify):
            raise InvalidInput(
                "verify must be a function of the final answer's text returning True, False "
                f"or the reason it fails, got {type(verify).__name__}"
            )
        object.__setattr__(self, "verify", verify)
        object.__setattr__(self, "wait_inline", check_wait(wait_inline, "wait_inline"))
        for budget, value in (
            ("max_turn_tokens", max_turn_tokens),
            ("max_session_tokens", max_session_tokens),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InvalidInput(f"{budget} must be a positive number of tokens or None")
            object.__setattr__(self, budget, value)
        object.__setattr__(self, "_by_name", by_name)
        binding = AgentBinding(
            agent_id=agent_id,
            instructions_sha256=hashlib.sha256(
                instructions.encode("utf-8", "surrogatepass")
            ).hexdigest(),
            tools={t.name: t.parameters for t in wrapped},
            model=str(getattr(model, "name", type(model).__name__)),
        )
        object.__setattr__(self, "_fingerprint", freeze_json(binding))

    def tool_named(self, name: str) -> Tool | None:
        return self._by_name.get(name)

    def with_opened(self, tools: Iterable[Tool]) -> Agent:
        """This agent with the tools its opened toolsets listed added, and no toolsets left.

        Raises ``InvalidInput`` when a listed tool's name is taken (give the toolset a
        ``prefix=``, or ``include=``/``exclude=`` its tools).
        """
        extra = tuple(tools)
        taken = {t.name for t in self.tools}
        for t in extra:
            if t.name in taken:
                raise InvalidInput(
                    f"two tools are named {t.name!r} (a toolset lists one that is already "
                    "taken); give the toolset a prefix= or exclude= that tool"
                )
            taken.add(t.name)
        return Agent(
            name=self.name,
            agent_id=self.agent_id,
            model=self.model,
            tools=self.tools + extra,
            instructions=self.instructions,
            max_steps=self.max_steps,
            max_turn_seconds=self.max_turn_seconds,
            context_window=self.context_window,
            max_turn_tokens=self.max_turn_tokens,
            max_session_tokens=self.max_session_tokens,
            compaction=self.compaction,
            workspace=self.workspace,
            middleware=self.middleware,
            verify=self.verify,
            wait_inline=self.wait_inline,
        )

    def with_workspace(self, workspace: Workspace) -> Agent:
        """This agent with ``workspace`` as its sessions' working files
        (``Runtime(workspace=...)``)."""
        copy = self.with_opened(())
        object.__setattr__(copy, "toolsets", self.toolsets)
        if not isinstance(workspace, Workspace):
            raise InvalidInput(
                f"workspace must be an nb.Workspace(root), got {type(workspace).__name__}"
            )
        object.__setattr__(copy, "workspace", workspace)
        return copy

    def as_tool(
        self,
        *,
        name: str | None = None,
        description: str | None = None,
        share_context: ShareContext = "none",
        last_n: int = 10,
        on_parent_stop: ParentStop = "interrupt",
        confirm: bool = False,
    ) -> SubagentTool:
        """This agent as a sub-agent another agent's model can call: ``nb.subagent(self,
        ...)``."""
        return subagent(
            self,
            name=name,
            description=description,
            share_context=share_context,
            last_n=last_n,
            on_parent_stop=on_parent_stop,
            confirm=confirm,
        )

    @property
    def fingerprint(self) -> Mapping[str, Any]:
        """What binds a session to this agent (the ``agent/bound`` payload), frozen JSON.

        An agent with toolsets not opened yet has no complete fingerprint: ``InvalidInput``
        (a ``Runtime`` opens them; use ``runtime.agent``).
        """
        if self.toolsets:
            raise InvalidInput(
                f"agent {self.agent_id!r} has toolsets that are not open, so its tools are not "
                "known yet; a Runtime opens them (runtime.agent has every tool)"
            )
        return self._fingerprint


def agent_changes(bound: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """What differs between two agent fingerprints, one phrase each; empty if nothing."""
    changes = []
    if bound.get("agent_id") != current.get("agent_id"):
        changes.append(f"agent_id: {bound.get('agent_id')} → {current.get('agent_id')}")
    if bound.get("instructions_sha256") != current.get("instructions_sha256"):
        changes.append("instructions changed")
    old, new = dict(bound.get("tools") or {}), dict(current.get("tools") or {})
    added = sorted(new.keys() - old.keys())
    removed = sorted(old.keys() - new.keys())
    altered = sorted(
        n for n in old.keys() & new.keys() if canonical_json(old[n]) != canonical_json(new[n])
    )
    for what, names in (("added", added), ("removed", removed), ("with a new schema", altered)):
        if names:
            changes.append(f"tools {what}: {', '.join(names)}")
    if bound.get("model") != current.get("model"):
        changes.append(f"model: {bound.get('model')} → {current.get('model')}")
    return changes


def check_agent(
    bound: Mapping[str, Any] | None, agent: Agent, *, accept: bool, session: object
) -> tuple[str, Payload] | None:
    """Whether ``agent`` may do new work in a session bound to ``bound`` (None: not yet).

    Returns the event to record with the run that starts (``agent/bound`` for a session not
    bound yet, ``agent/changed`` for an accepted change), or None when ``agent`` is the bound
    one. Raises ``AgentChanged`` naming what changed when it differs and ``accept`` is False.
    """
    current = agent.fingerprint
    if bound is None:
        return "agent/bound", AgentBinding.model_validate(current)
    if canonical_json(bound) == canonical_json(current):
        return None
    changes = agent_changes(bound, current) or ["the fingerprint changed"]
    summary = "; ".join(changes)
    if not accept:
        raise AgentChanged(
            f"session {session} is bound to another version of agent "
            f"{bound.get('agent_id')!r} ({summary}). Reading it works; new work needs the "
            "agent it is bound to, or a runtime made with accept_agent_change=True (which "
            "records the change and binds the session to this agent)",
            changes=changes,
            bound=bound,
            current=current,
        )
    return "agent/changed", AgentRebound(
        previous=AgentBinding.model_validate(bound),
        current=AgentBinding.model_validate(current),
        changes=tuple(changes),
        reason=summary,
    )


def instructions_message(binding: tuple[str, Payload], agent: Agent) -> Message | None:
    """The ``message/system`` to record beside ``binding`` (what ``check_agent`` returned):
    the agent's instructions, when a session is bound (and they are not empty) or an
    accepted agent change changed them; None otherwise.

    A session's instructions can change only there: any other run uses the bound agent's.
    """
    kind, payload = binding
    if not agent.instructions:
        return None
    if isinstance(payload, AgentRebound) and (
        payload.previous.instructions_sha256 == payload.current.instructions_sha256
    ):
        return None
    if kind not in ("agent/bound", "agent/changed"):
        return None
    return Message(id=new_id("msg"), role="system", text=agent.instructions)


# --------------------------------------------------------------------------------------------
# Sub-agents: an agent offered to another agent's model as a tool

ShareContext = Literal["none", "last_n", "all"]
ParentStop = Literal["interrupt", "cancel", "abandon"]
_SHARE = ("none", "last_n", "all")
_PARENT_STOP = ("interrupt", "cancel", "abandon")
_NOT_A_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _delegate(
    task: Annotated[
        str,
        Field(
            description=(
                "The task for the sub-agent, complete in itself: what to do, with every fact "
                "it needs, and what to give back"
            )
        ),
    ],
) -> str:
    raise RuntimeError(
        "a sub-agent call is carried out by the runtime, in a child session of its own; "
        "call the agent through a Runtime instead"
    )


@dataclass(frozen=True)
class SubagentTool(Tool):
    """An agent the model may call with a task (``nb.subagent`` / ``Agent.as_tool``).

    The runtime carries a call out in a **child session**: its own log, lease, inbox and
    exports, keyed from the calling session and the call id, bound to ``agent`` like any
    session (see ``agentnb/runtime/subagents.py`` for how the call waits for it, durably and
    exactly once). ``share_context`` says what of the caller's conversation the child sees
    (``none``; ``last_n``: its last ``last_n`` messages; ``all``), handed to it as material.
    ``on_parent_stop`` says what happens to a running child when the caller's task is
    interrupted (``interrupt``: it is interrupted too, and resumed with the caller;
    ``cancel``: it is cancelled; ``abandon``: it runs on); cancelling the caller's task
    cancels the child unless ``abandon``.
    """

    agent: Agent | None = field(default=None, compare=False)
    share_context: ShareContext = "none"
    last_n: int = 10
    on_parent_stop: ParentStop = "interrupt"

    def __hash__(self) -> int:
        return hash((self.name, self.fn))

    @property
    def child(self) -> Agent:
        """The agent a call runs (never None once built)."""
        assert self.agent is not None
        return self.agent


def subagent(
    agent: Agent,
    *,
    name: str | None = None,
    description: str | None = None,
    share_context: ShareContext = "none",
    last_n: int = 10,
    on_parent_stop: ParentStop = "interrupt",
    confirm: bool = False,
) -> SubagentTool:
    """``agent`` as a tool: the calling model passes a ``task``; the child agent does it in a
    session of its own and its final answer is the call's result (see ``SubagentTool``).

    ``name`` defaults to the agent's id (characters a tool name cannot hold become ``_``),
    ``description`` to one naming the agent and the first line of its instructions; with
    ``confirm=True`` a person approves each call first. ``InvalidInput`` for anything else
    than an ``nb.Agent``, an unknown ``share_context`` or ``on_parent_stop``, or a
    ``last_n`` that is not a positive int.
    """
    if not isinstance(agent, Agent):
        raise InvalidInput(
            f"nb.subagent() takes an nb.Agent (the child agent), got {type(agent).__name__}"
        )
    if share_context not in _SHARE:
        raise InvalidInput(f"share_context must be one of {_SHARE}, got {share_context!r}")
    if on_parent_stop not in _PARENT_STOP:
        raise InvalidInput(f"on_parent_stop must be one of {_PARENT_STOP}, got {on_parent_stop!r}")
    if isinstance(last_n, bool) or not isinstance(last_n, int) or last_n < 1:
        raise InvalidInput(f"last_n must be a positive int, got {last_n!r}")
    if not isinstance(confirm, bool):
        raise InvalidInput(f"confirm must be True or False, got {confirm!r}")
    tool_name = name if name is not None else _NOT_A_TOOL_NAME.sub("_", agent.agent_id)[:64]
    if description is None:
        line = next((x.strip() for x in agent.instructions.splitlines() if x.strip()), "")
        description = f"Delegate a task to the sub-agent {agent.name!r}" + (
            f", whose instructions begin: {line[:200]}" if line else ""
        )
    base = tool(_delegate, name=tool_name, description=description, idempotent=True)
    return SubagentTool(
        name=base.name,
        description=base.description,
        parameters=base.parameters,
        fn=_delegate,
        # A call is exactly-once by construction (its child session and task derive from the
        # call id): running it again after a crash attaches to the same child turn.
        idempotent=True,
        confirm=confirm,
        agent=agent,
        share_context=share_context,
        last_n=last_n,
        on_parent_stop=on_parent_stop,
    )


def agents_of(root: Agent) -> dict[str, Agent]:
    """``root`` and every agent its sub-agent tools reach (their tools too), by agent id.

    What a runtime executes: sessions of any of them. ``InvalidInput`` when two agents of
    the tree share an id but differ (a session is bound to one fingerprint per agent id).
    """
    found: dict[str, Agent] = {}
    todo = [root]
    while todo:
        agent = todo.pop()
        seen = found.get(agent.agent_id)
        if seen is not None:
            if seen is not agent and canonical_json(seen.fingerprint) != canonical_json(
                agent.fingerprint
            ):
                raise InvalidInput(
                    f"two agents of this runtime's tree have agent_id {agent.agent_id!r} but "
                    "differ (instructions, tools or model); give each its own agent_id"
                )
            continue
        found[agent.agent_id] = agent
        todo.extend(t.child for t in agent.tools if isinstance(t, SubagentTool))
    return found
