"""Tools: Python functions the model may call, described to it by a JSON schema.

``@tool`` turns a function into a ``Tool``. The schema comes from the signature (through
pydantic, so defaults, ``Optional``, ``Literal``, lists and nested pydantic models all work) and
the docstring: its first paragraph describes the tool, and its parameter section (Google
``Args:``, NumPy ``Parameters`` or Sphinx ``:param x:``) describes each parameter. The flags
say how the runtime treats a call:

- ``idempotent``: safe to run again after a crash left the call's outcome unknown; the runtime
  re-runs it on resume instead of asking a person to reconcile it.
- ``confirm``: a person must approve each call (``respond`` with True/False/``Answer``) first.
- ``wait_inline``: seconds the run waits, alive, for the answer to this tool's request (an
  approval, a question, an external result) before it suspends; None: the agent's
  ``Agent(wait_inline=)``, 0: suspend at once.
- ``external``: the call is not run here; its result arrives through ``respond``.

A tool may take a ``ToolContext`` (a parameter annotated ``ToolContext`` or named ``ctx``); it
is not part of the schema and the runtime passes it in. ``ctx.ask(question)`` asks the person
in the middle of a call (an ``ask_user`` request): the call stops, the turn waits like any
other request, and the person's answer runs the call again, where the same question is
answered at once from the log (so put side effects after the question). A tool that cannot
tell whether its effect happened raises ``ToolOutcomeUnknown``: the call is left uncertain,
as if the process had died under it.

Tools described by a JSON schema rather than a signature (another protocol's tools) are built
with ``Tool.from_schema``. A ``Toolset`` is a source of tools that must be started first (an
MCP server): ``Agent(tools=[...])`` takes it beside tools, and each runtime opens it once and
closes it at ``Runtime.close()`` without knowing what is behind it.

``Tool.invoke`` validates the model's arguments, runs the function (sync functions in a worker
thread, so the runtime's event loop is never blocked) and turns the return value into the
text the model sees.

Why it is long: the tool port: schema from signatures, argument validation, sync and async
invocation and the context a tool receives form one contract.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import inspect
import queue
import re
import threading
import typing
import warnings
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, overload

import docstring_parser
import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError
from pydantic.fields import FieldInfo
from pydantic.json_schema import PydanticJsonSchemaWarning

from agentnb import _portable
from agentnb.answers import Answer
from agentnb.blocks import Block, blocks_of, checked, stand_in
from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey, check_wait

__all__ = [
    "InvalidToolArguments",
    "NeedsAnswer",
    "OpenToolset",
    "PlanStep",
    "Tool",
    "ToolContext",
    "ToolOutcomeUnknown",
    "Toolset",
    "ask_request_id",
    "ask_user",
    "todo",
    "tool",
]

_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INTERACTIONS = frozenset({"ask_user", "todo"})


@dataclass(frozen=True)
class ToolContext:
    """What a running tool knows about the call it serves, and how it reports back.

    ``key``, ``turn_id``, ``run_id`` and ``call_id`` identify the call; ``workspace`` is the
    session's working directory (a ``pathlib.Path``) when it has one. ``record`` adds an
    application event (a registered ``vendor/name`` type such as ``acme/review_note``) to the
    session's log and ``flush`` (``aflush`` in async tools) commits it before the tool goes
    on; ``progress`` reports progress that becomes a ``tool/chunk`` event. All may be called
    from the worker thread a sync tool runs in: the engine's callbacks hand the data over to
    its loop safely.
    """

    key: SessionKey
    turn_id: str
    run_id: str
    call_id: str
    _record: Callable[[str, Any, bool], None] = field(repr=False, compare=False)
    _progress: Callable[[Any], None] = field(repr=False, compare=False)
    _flush: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    _aflush: Callable[[], Awaitable[None]] | None = field(default=None, repr=False, compare=False)
    _ask: Callable[[str], Answer] | None = field(default=None, repr=False, compare=False)
    workspace: Path | None = field(default=None, compare=False)
    """The session's working directory (``nb.Workspace``), or None without one."""

    def record(self, type: str, data: Any, required: bool = False) -> None:
        """Add an application event of ``type`` (``vendor/name``) with payload ``data`` to the
        session's log. It commits with the call's next commit (at the latest with its
        result); ``flush``/``aflush`` make it durable now."""
        self._record(type, data, required)

    def flush(self) -> None:
        """Commit what this call recorded so far; return once it is durable (the seed: wait
        for the recorder's flush before the side effect the events describe).

        For sync tools (they run in a worker thread). An async tool awaits ``aflush()``
        instead: called on the runtime's loop this would block it, so it raises
        ``InvalidInput`` saying so. Storage errors propagate. After the call ended, nothing.
        """
        if self._flush is not None:
            self._flush()

    async def aflush(self) -> None:
        """``flush`` for async tools: ``await ctx.aflush()``."""
        if self._aflush is not None:
            await self._aflush()

    def progress(self, data: Any) -> None:
        """Report progress of this call (JSON-able ``data``); it becomes a ``tool/chunk``."""
        self._progress(data)

    def ask(self, question: str) -> Answer:
        """The person's answer to ``question``, asked in the middle of this call.

        Answered already (this is the call run again after the answer): returns it at once,
        an ``Answer`` whose ``kind`` is ``"output"`` (``text``) or ``"reject"`` (``reason``:
        the person declined). Not answered yet: raises ``NeedsAnswer``; let it propagate. The
        runtime then stops the call, records an ``ask_user`` request (in ``pending()``, the
        widget, the browser page) and suspends the turn; ``respond`` answers it and runs the
        call again, from the start. The request id is derived from the call id and the
        question, so the question asked again is the same request, also after a restart.
        """
        if not isinstance(question, str) or not question.strip():
            raise InvalidInput("ctx.ask needs a non-empty question")
        if self._ask is None:
            raise InvalidInput("this ToolContext cannot ask the person (no runtime behind it)")
        return self._ask(question)


def ask_request_id(call_id: str, question: str, occurrence: int = 1) -> str:
    """The request id of the ``occurrence``-th asking of ``question`` within call ``call_id``."""
    digest = hashlib.sha256(question.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    suffix = "" if occurrence == 1 else f".{occurrence}"
    return f"{call_id}.ask-{digest}{suffix}"


class NeedsAnswer(Exception):
    """Raised by ``ToolContext.ask`` for a question the person has not answered yet.

    The runtime turns it into an ``ask_user`` request and suspends the turn; the tool should
    let it propagate. ``request_id`` and ``question`` say what is asked.
    """

    def __init__(self, request_id: str, question: str) -> None:
        super().__init__(f"waiting for the person to answer {request_id}: {question}")
        self.request_id = request_id
        self.question = question


class ToolOutcomeUnknown(Exception):
    """Raise from a tool that cannot tell whether its effect happened (its server died).

    The runtime records no result: the call is uncertain, exactly as if the process had died
    under it. The run ends interrupted with the message as its reason; ``resume`` runs the
    call again if its tool is ``idempotent``, else the person reconciles it first.
    """


class InvalidToolArguments(InvalidInput):
    """The model's arguments do not fit the tool's signature.

    The message is written for the model: it names each bad argument and what is wrong, so the
    model can correct the call. ``tool_name`` and ``problems`` carry the same facts as data.
    """

    def __init__(self, message: str, *, tool_name: str = "", problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.tool_name = tool_name
        self.problems = list(problems)


@dataclass(frozen=True)
class _Signature:
    """What ``tool`` learned from a function: its argument model and how to call it."""

    model: type[BaseModel]
    fields: tuple[tuple[str, str], ...]
    """(field name inside ``model``, parameter name) for each schema parameter."""
    ctx_param: str | None
    is_async: bool


@dataclass(frozen=True)
class _SchemaCall:
    """How a ``Tool.from_schema`` tool is checked and called."""

    call: Callable[[dict[str, Any], ToolContext], Awaitable[Any]]
    check: Callable[[dict[str, Any]], None] | None


@dataclass(frozen=True)
class Tool:
    """A function the model may call; build one with ``@tool``.

    Calling the tool (``my_tool(...)``) calls the function directly, so tools stay unit-testable.
    ``spec()`` is what the model is shown; ``validate`` and ``invoke`` are what the runtime uses.
    When a ``Tool`` is built directly rather than with ``@tool``, ``validate`` still follows
    ``fn``'s signature, whatever ``parameters`` says.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON schema (an object with ``properties`` and ``required``) without the ctx parameter."""
    fn: Callable[..., Any]
    idempotent: bool = False
    confirm: bool = False
    external: bool = False
    interaction: str | None = None
    """For the built-ins the runtime carries out itself: ``"ask_user"`` (a person answers)
    and ``"todo"`` (the plan it records); else None."""
    wait_inline: float | None = None
    """Seconds a run waits in place for the answer to this tool's request before it
    suspends (None: the agent's ``wait_inline``)."""
    _sig: _Signature | None = field(default=None, repr=False, compare=False)
    _schema_call: _SchemaCall | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not callable(self.fn):
            raise InvalidInput(f"tool {self.name!r}: fn must be callable, got {self.fn!r}")
        if self.confirm and self.external:
            raise InvalidInput(
                f"tool {self.name!r} cannot be both confirm=True and external=True: an external "
                "call is already handed to a person (its result arrives through respond)"
            )
        if self.wait_inline is not None:
            object.__setattr__(
                self,
                "wait_inline",
                check_wait(self.wait_inline, f"tool {self.name!r}: wait_inline"),
            )
        if self.interaction is not None and self.interaction not in _INTERACTIONS:
            raise InvalidInput(
                f"tool {self.name!r}: interaction must be one of {sorted(_INTERACTIONS)} or None"
            )
        if self._sig is None and self._schema_call is None:
            object.__setattr__(self, "_sig", _analyse(self.fn, self.name, {}))

    @classmethod
    def from_schema(
        cls,
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        call: Callable[[dict[str, Any], ToolContext], Awaitable[Any]],
        *,
        check: Callable[[dict[str, Any]], None] | None = None,
        idempotent: bool = False,
        confirm: bool = False,
    ) -> Tool:
        """A tool described by a JSON schema (``parameters``) instead of a signature.

        The runtime awaits ``call(arguments, ctx)`` with the model's arguments as a dict; its
        result becomes text as ``invoke`` says. ``check(arguments)`` validates them before the
        call (raise ``InvalidToolArguments`` with a message for the model); without it only
        "a JSON object" is checked. What another protocol's tools (MCP) become.
        """
        if not isinstance(parameters, Mapping):
            raise InvalidInput(f"tool {name!r}: parameters must be a JSON schema object")
        if not callable(call):
            raise InvalidInput(f"tool {name!r}: call must be an async function")

        async def fn(**arguments: Any) -> Any:
            raise InvalidInput(f"tool {name!r} is called by the runtime (Tool.invoke)")

        fn.__name__ = name
        schema = _deepcopy_json(dict(parameters))
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        return cls(
            name=name,
            description=description,
            parameters=schema,
            fn=fn,
            idempotent=idempotent,
            confirm=confirm,
            _schema_call=_SchemaCall(call, check),
        )

    def __hash__(self) -> int:
        return hash((self.name, self.fn))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly (no validation, no thread)."""
        return self.fn(*args, **kwargs)

    @property
    def is_async(self) -> bool:
        """True when the function is a coroutine function (it runs on the loop, cancellable)."""
        return self._schema_call is not None or self._signature.is_async

    @property
    def _signature(self) -> _Signature:
        assert self._sig is not None  # set in __post_init__
        return self._sig

    def spec(self) -> dict[str, Any]:
        """The tool as the model sees it: ``{"name", "description", "parameters"}``."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": _deepcopy_json(self.parameters),
        }

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check and coerce ``arguments`` against the signature; keyword arguments for ``fn``.

        Defaults are filled in. Unknown or missing arguments and values of the wrong type raise
        ``InvalidToolArguments``, whose message tells the model what to fix.
        """
        if not isinstance(arguments, Mapping):
            problem = f"arguments must be a JSON object, got {type(arguments).__name__}"
            raise InvalidToolArguments(
                f"invalid arguments for tool '{self.name}': {problem}",
                tool_name=self.name,
                problems=[problem],
            )
        if self._schema_call is not None:
            checked: dict[str, Any] = _deepcopy_json(dict(arguments))
            if self._schema_call.check is not None:
                self._schema_call.check(checked)
            return checked
        sig = self._signature
        try:
            parsed = sig.model.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = [_describe_error(err) for err in exc.errors(include_url=False)]
            raise InvalidToolArguments(
                f"invalid arguments for tool '{self.name}': {'; '.join(problems)}. "
                f"Expected {self._expected()}.",
                tool_name=self.name,
                problems=problems,
            ) from None
        return {param: getattr(parsed, fname) for fname, param in sig.fields}

    async def invoke(self, arguments: Mapping[str, Any], ctx: ToolContext) -> str:
        """Validate ``arguments``, run the function and return its result as text.

        Async functions are awaited on the running loop (cancelling the caller cancels them).
        Sync functions run in a worker thread; if the caller is cancelled meanwhile, this waits
        for the thread to finish before re-raising ``CancelledError``, so a cancelled call never
        leaves its body running behind the engine's back. ``ctx`` is passed to the function's
        ctx parameter if it has one. The result becomes text: a ``str`` as is, ``None`` as
        ``""``, pydantic models, dicts, lists and tuples as compact JSON, anything else via
        ``str``. Exceptions raised by the function propagate unchanged.
        """
        result = await self.invoke_result(arguments, ctx)
        if isinstance(result, str):
            return result
        return stand_in(b.part() for b in result)

    async def invoke_result(
        self, arguments: Mapping[str, Any], ctx: ToolContext
    ) -> str | tuple[Block, ...]:
        """``invoke``, keeping a rich result rich: a function that returns a block
        (``nb.blocks``) or a list holding blocks gives its blocks (checked against the
        bounds of ``agentnb.blocks``); any other result becomes text as in ``invoke``."""
        kwargs = self.validate(arguments)
        if self._schema_call is not None:
            return _to_result(await self._schema_call.call(kwargs, ctx))
        sig = self._signature
        if sig.ctx_param is not None:
            kwargs[sig.ctx_param] = ctx
        if sig.is_async:
            result = await self.fn(**kwargs)
        else:
            result = await _run_in_thread(functools.partial(self.fn, **kwargs))
            if inspect.isawaitable(result):
                result = await result
        return _to_result(result)

    def _expected(self) -> str:
        props = self.parameters.get("properties", {})
        required = set(self.parameters.get("required", ()))
        if not props:
            return "no arguments"
        parts = [f"{p} (required)" if p in required else p for p in props]
        return "arguments: " + ", ".join(parts)


@overload
def tool(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    confirm: bool = False,
    external: bool = False,
    wait_inline: float | None = None,
) -> Tool: ...
@overload
def tool(
    fn: None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    confirm: bool = False,
    external: bool = False,
    wait_inline: float | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    idempotent: bool = False,
    confirm: bool = False,
    external: bool = False,
    wait_inline: float | None = None,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a ``Tool`` from a function; use as ``@tool`` or ``@tool(idempotent=True)``.

    ``name`` defaults to the function's name, ``description`` to the docstring's first
    paragraph. ``wait_inline`` (seconds) overrides the agent's ``Agent(wait_inline=)`` for this
    tool's requests. Parameters described in the docstring (Google ``Args:``, NumPy ``Parameters``
    or Sphinx ``:param x:``) get those descriptions in the schema. Raises ``InvalidInput`` for
    ``confirm`` together with ``external``, for ``*args``/``**kwargs`` or positional-only
    parameters, and for parameter types that have no JSON schema.
    """

    def wrap(func: Callable[..., Any]) -> Tool:
        if isinstance(func, Tool):
            func = func.fn
        if not callable(func):
            raise InvalidInput(f"@tool needs a function, got {func!r}")
        tool_name = name if name is not None else getattr(func, "__name__", "")
        _check_name(tool_name)
        if confirm and external:
            raise InvalidInput(
                f"tool {tool_name!r} cannot be both confirm=True and external=True: an external "
                "call is already handed to a person (its result arrives through respond)"
            )
        doc_description, arg_docs = _parse_docstring(inspect.getdoc(func))
        sig = _analyse(func, tool_name, arg_docs)
        return Tool(
            name=tool_name,
            description=description if description is not None else doc_description,
            parameters=_parameters_schema(sig.model, tool_name),
            fn=func,
            idempotent=idempotent,
            confirm=confirm,
            external=external,
            wait_inline=wait_inline,
            _sig=sig,
        )

    if fn is not None:
        return wrap(fn)
    return wrap


# --------------------------------------------------------------------------------------------
# Signature analysis


def _is_context_annotation(annotation: Any) -> bool:
    if annotation is ToolContext:
        return True
    return isinstance(annotation, str) and annotation.rsplit(".", 1)[-1] == "ToolContext"


def _is_async_callable(fn: Callable[..., Any]) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 -- instances with an async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def _type_hints(fn: Callable[..., Any], where: str) -> dict[str, Any]:
    # Plain functions resolve directly; partials and callable objects through what they wrap.
    target: Any = fn
    if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
        target = getattr(fn, "func", None) or getattr(type(fn), "__call__", fn)  # noqa: B004
    try:
        return typing.get_type_hints(target, include_extras=True)
    except TypeError:
        return {}
    except Exception as exc:  # noqa: BLE001 -- any failure to resolve annotations is the user's to fix
        raise InvalidInput(
            f"{where}: cannot resolve its type annotations ({exc}); define the types it uses "
            "at module level"
        ) from None


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not _TOOL_NAME.match(name):
        raise InvalidInput(
            f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'; pass name=... to @tool"
        )


def _analyse(fn: Callable[..., Any], tool_name: str, arg_docs: Mapping[str, str]) -> _Signature:
    where = f"tool {tool_name!r}"
    if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
        raise InvalidInput(f"{where}: generator functions cannot be tools; return a value instead")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{where}: cannot read the function's signature ({exc})") from None
    hints = _type_hints(fn, where)

    definitions: dict[str, Any] = {}
    fields: list[tuple[str, str]] = []
    ctx_param: str | None = None
    for i, param in enumerate(signature.parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise InvalidInput(
                f"{where}: parameter '{param.name}' is *args/**kwargs; tools need named "
                "parameters so the model can be shown a schema"
            )
        if param.kind is param.POSITIONAL_ONLY:
            raise InvalidInput(
                f"{where}: parameter '{param.name}' is positional-only; the model passes "
                "arguments by name, so remove the '/' from the signature"
            )
        annotation = hints.get(param.name, param.annotation)
        if param.name == "ctx" or _is_context_annotation(annotation):
            if ctx_param is not None:
                raise InvalidInput(f"{where}: only one ToolContext parameter is allowed")
            ctx_param = param.name
            continue
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = param.default
        extra: dict[str, Any] = {"alias": param.name}
        doc = arg_docs.get(param.name)
        if isinstance(default, FieldInfo):
            # ``x: int = Field(3, ge=1)``: keep the user's field, add only what it lacks.
            annotation = Annotated[annotation, default]
            if doc and default.description is None:
                extra["description"] = doc
            spec = Field(**extra)
        else:
            if doc:
                extra["description"] = doc
            spec = Field(... if default is inspect.Parameter.empty else default, **extra)
        # Internal field names avoid clashes with BaseModel attributes (json, schema, model_*).
        fname = f"p{i}"
        definitions[fname] = (annotation, spec)
        fields.append((fname, param.name))

    try:
        model = create_model(
            f"{tool_name or 'tool'}_arguments",
            __config__=ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **definitions,
        )
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
        raise InvalidInput(
            f"{where}: its parameter types cannot be described to the model ({exc}); use JSON "
            "types (str, int, float, bool, list, dict), Literal, Optional or pydantic models"
        ) from None
    return _Signature(
        model=model,
        fields=tuple(fields),
        ctx_param=ctx_param,
        is_async=_is_async_callable(fn),
    )


def _parameters_schema(model: type[BaseModel], tool_name: str) -> dict[str, Any]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PydanticJsonSchemaWarning)
            schema = model.model_json_schema(by_alias=True)
    except (PydanticUserError, PydanticJsonSchemaWarning) as exc:
        raise InvalidInput(
            f"tool {tool_name!r}: its parameters have no JSON schema ({exc}); use JSON types, "
            "Literal, Optional or pydantic models"
        ) from None
    cleaned: dict[str, Any] = _strip_titles(schema)
    cleaned.setdefault("properties", {})
    cleaned.setdefault("required", [])
    return cleaned


def _strip_titles(schema: Any) -> Any:
    """Drop the ``title`` keywords pydantic generates (noise for the model); keep property names."""
    if isinstance(schema, list):
        return [_strip_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "patternProperties") and isinstance(value, dict):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        elif key in ("default", "enum", "const", "examples", "required"):
            out[key] = value
        else:
            out[key] = _strip_titles(value)
    return out


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph, and per-parameter text from the docstring's parameter section.

    Google (``Args:``), NumPy (``Parameters`` underlined) and Sphinx (``:param x:``) styles
    are read by ``docstring_parser``; whitespace inside each text is folded to single spaces.
    A docstring it cannot read still gives its first paragraph, without parameter texts.
    """
    if not doc:
        return "", {}
    try:
        parsed = docstring_parser.parse(doc)
    except Exception:  # noqa: BLE001 -- an unreadable docstring must not stop the tool being made
        return _first_paragraph(doc), {}
    summary = parsed.short_description or ""
    if parsed.long_description and not parsed.blank_after_short_description:
        summary += "\n" + parsed.long_description.split("\n\n", 1)[0]
    args = {}
    for param in parsed.params:
        text = " ".join((param.description or "").split())
        # NumPy style may describe several parameters at once: "x, y : int".
        for part in param.arg_name.split(","):
            name = part.strip().lstrip("*")
            if name and text:
                args[name] = text
    return " ".join(summary.split()), args


def _first_paragraph(doc: str) -> str:
    return " ".join(doc.strip().split("\n\n", 1)[0].split())


def _describe_error(err: Mapping[str, Any]) -> str:
    loc = ".".join(str(part) for part in err.get("loc", ()))
    kind = err.get("type")
    what = "argument" if len(err.get("loc", ())) <= 1 else "field"
    if kind == "missing":
        return f"missing required {what} '{loc}'"
    if kind == "extra_forbidden":
        return f"unknown {what} '{loc}'"
    got = repr(err.get("input"))
    if len(got) > 60:
        got = got[:57] + "..."
    return f"{what} '{loc}': {err.get('msg', 'invalid value')} (got {got})"


# --------------------------------------------------------------------------------------------
# Running


class _DaemonThreads:
    """Daemon threads for sync tools, reused while they idle (``IDLE`` seconds at most).

    Not the loop's executor: the interpreter joins executor threads at exit, so a tool that
    never returns would keep the process alive after its run was recorded stopped.
    """

    IDLE = 30.0

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        """Threads waiting for a job that no job queued so far is promised to."""

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # an idle thread takes this job
        self._jobs.put(job)
        if spawn:
            threading.Thread(target=self._work, name="agentnb-tool", daemon=True).start()

    def _work(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self.IDLE)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # not promised to a queued job: retire
                        self._idle -= 1
                        return
                continue
            job()
            with self._lock:
                self._idle += 1


_TOOL_THREADS = _DaemonThreads()


def _forked() -> None:
    # A forked child (a worker process of ``Runtime(processes=N)``) has none of its parent's
    # threads: counted idle ones would take its jobs, and nothing would ever run them.
    global _TOOL_THREADS
    _TOOL_THREADS = _DaemonThreads()


_portable.at_fork(_forked)


async def _run_in_thread(call: Callable[[], Any]) -> Any:
    """Run a sync tool's body in a daemon thread (``_DaemonThreads``) and await its result."""
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def body() -> None:
        try:
            result = context.run(call)
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task as is
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    _TOOL_THREADS.submit(body)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        # A thread cannot be stopped; wait for the body so nothing runs on after the cancel.
        while not future.done():
            try:
                await asyncio.wait({future})
            except asyncio.CancelledError:
                continue
        if not future.cancelled():
            future.exception()  # the cancel wins; mark the body's error as seen
        raise


def _to_result(result: Any) -> str | tuple[Block, ...]:
    blocks = blocks_of(result)
    if blocks is None:
        return _to_text(result)
    return checked(blocks, "the tool's result")


def _to_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    if isinstance(result, BaseModel | dict | list | tuple):
        return pydantic_core.to_json(result, fallback=str).decode()
    return str(result)


def _deepcopy_json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deepcopy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deepcopy_json(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Toolsets


@dataclass(frozen=True)
class OpenToolset:
    """An opened toolset: the tools it offers now, and how to close it."""

    tools: tuple[Tool, ...]
    close: Callable[[], Awaitable[None]]
    """Stops what ``open`` started (a server process, a connection); never raises."""


class Toolset(ABC):
    """A source of tools that must be started before its tools are known (an MCP server).

    ``Agent(tools=[...])`` takes toolsets beside tools. Each ``Runtime`` opens the toolsets
    of its agent once, when it is created, on its own event loop: ``open`` starts what is
    behind the toolset and lists its tools, whose names and schemas then enter the agent's
    fingerprint like any other tool's (so a server whose tools change is an agent change).
    The runtime calls ``OpenToolset.close`` at ``Runtime.close()``. Between the two, the
    toolset keeps its tools working (restarting a server that died, say); a tool call that
    cannot be served is the tool's error, or ``ToolOutcomeUnknown`` when its effect is
    unknown.

    ``open`` raises ``ToolsetUnavailable`` (from ``agentnb.errors``) when it cannot start or
    list, with the reason; ``label`` names the toolset in messages.
    """

    @property
    @abstractmethod
    def label(self) -> str:
        """What the toolset is, for messages (a command line, a URL)."""

    @abstractmethod
    async def open(self) -> OpenToolset:
        """Start the toolset and list its tools (on the runtime's loop)."""


# --------------------------------------------------------------------------------------------
# Built-in tools


def _ask_user(question: str) -> str:
    """Ask the person a question and wait for their answer; use it for information or a
    decision that only the person can give.

    Args:
        question: The question to ask, in plain words.
    """
    raise RuntimeError(
        "ask_user is answered by a person through session.respond(); the runtime never runs it"
    )


ask_user: Tool = dataclasses.replace(
    tool(_ask_user, name="ask_user", external=True), interaction="ask_user"
)


class PlanStep(BaseModel):
    """One step of the plan the model keeps with the built-in ``todo`` tool."""

    model_config = ConfigDict(extra="forbid")

    content: str = Field(description="What the step does, in a few words")
    status: typing.Literal["pending", "in_progress", "completed"] = Field(
        "pending", description="pending, in_progress (at most one at a time) or completed"
    )
    id: str | None = Field(
        None, description="The step's id from the previous plan, to keep it; omit for new steps"
    )


def _todo(steps: list[PlanStep]) -> str:
    """Keep your plan: the whole list of steps, each pending, in_progress or completed. Call it
    first with the steps you intend, then again with the whole list whenever a step starts,
    finishes or the plan changes.

    Args:
        steps: Every step of the plan, in order (not only the changed ones).
    """
    raise RuntimeError("the todo tool is carried out by the runtime, which records the plan")


todo: Tool = dataclasses.replace(tool(_todo, name="todo"), interaction="todo")
"""The built-in plan tool: the runtime records each plan as ``plan/changed`` and each step
that changed as ``task/changed`` (``session.plan()``, the view and the exports show them)."""
