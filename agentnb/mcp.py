"""MCP toolsets: the tools of a Model Context Protocol server as agentnb tools.

``pip install -e ".[mcp]"`` (the official ``mcp`` SDK, 2.x). ``stdio(command, args)``
runs a server as a subprocess; ``http(url)`` connects to one over streamable HTTP. Both are
``Toolset``s for ``Agent(tools=[...])``: each ``Runtime`` starts the server once (when it is
created), lists its tools, and stops it at ``Runtime.close()``. This module translates between
the protocol and agentnb's tools; the runtime never knows MCP is behind them. How each part
of the protocol maps:

- **Tools**: name (with ``prefix``; characters a model cannot take become ``_``),
  description and input schema as listed; they enter the agent's fingerprint, so a server
  whose tools change is an agent change. ``include`` / ``exclude`` filter by the server's
  names. Arguments are checked against the input schema
  before the call (a violation goes back to the model, which can correct it).
- **Safety**: ``readOnlyHint`` or ``idempotentHint`` make a tool ``idempotent`` (re-run after
  a crash instead of asking a person to reconcile it); ``destructiveHint`` makes it
  ``confirm`` (a person approves each call). ``idempotent={name: bool}`` and
  ``confirm={name: bool}`` override per tool.
- **Calls**: the runtime commits ``tool/dispatch`` before ``tools/call`` is sent. Progress
  notifications become ``tool/chunk`` progress; an interrupt cancels the call and the SDK
  sends MCP cancellation. The result becomes the tool's text: structured content as JSON,
  else the text blocks; images, audio and embedded binary resources are recorded as
  ``mcp/content`` events (the store keeps large ones as blobs) and named in the text. A
  result with ``isError`` is the tool's error.
- **Elicitation** (the server asks the person): the question becomes an ``ask_user`` request
  through ``ToolContext.ask``; the call stops and the turn waits. ``respond`` answers it and
  the call is sent again; when the server asks the same question it gets the recorded answer
  at once (same request id, also after a kernel restart). A one-field form takes the answer's
  text (``yes``/``no`` for a boolean); a larger one a JSON object; ``nb.Answer.reject(reason)``
  declines.
- **Server life**: a stdio server's stderr goes to the ``agentnb.mcp`` logger, never into the
  log. A server that dies is started again at the next call; a call it died under is re-run
  once if the tool is idempotent, else its outcome is unknown (``ToolOutcomeUnknown``: the
  call is uncertain, the run ends interrupted). A server that will not start raises
  ``ToolsetUnavailable`` from ``Runtime(...)``; a tool that no longer exists is an error for
  the model.

Why it is long: one adapter, the whole protocol surface (connection life, listing, calls,
content, progress, elicitation) and its error mapping.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import contextvars
import json
import logging
import os
import re
import shlex
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agentnb.errors import DISTRIBUTION, InvalidInput, ToolsetUnavailable, describe, install_hint
from agentnb.tools import (
    InvalidToolArguments,
    NeedsAnswer,
    OpenToolset,
    Tool,
    ToolContext,
    ToolOutcomeUnknown,
    Toolset,
)

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["MCPToolError", "MCPToolset", "http", "stdio"]

log = logging.getLogger("agentnb.mcp")

_STDERR_TAIL = 20
"""Lines of a server's stderr kept to explain why it would not start."""
_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "agentnb_mcp_call", default=None
)


def _sdk() -> Any:
    try:
        import mcp
    except ImportError:
        raise ImportError("MCP toolsets need the mcp extra: " + install_hint("mcp")) from None
    return mcp


def stdio(
    command: str,
    args: Iterable[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    prefix: str | None = None,
    idempotent: Mapping[str, bool] | None = None,
    confirm: Mapping[str, bool] | None = None,
    timeout: float | None = None,
    start_timeout: float = 30.0,
) -> MCPToolset:
    """The tools of an MCP server run as a subprocess (``command`` with ``args``).

    ``env`` adds to a minimal inherited environment (``PATH``, ``HOME``, ...), ``cwd`` is its
    working directory. ``include``/``exclude`` pick tools by the server's names, ``prefix``
    is put before each name the model sees (``prefix="fs_"``). ``idempotent`` and ``confirm``
    override the server's annotations per tool (server names). ``timeout`` bounds one call
    in seconds (None: no bound); ``start_timeout`` bounds starting and listing.
    """
    if not isinstance(command, str) or not command.strip():
        raise InvalidInput(
            "mcp.stdio needs the server's command, e.g. stdio('uvx', ['mcp-server-time'])"
        )
    if isinstance(args, str):
        raise InvalidInput("args must be a list of strings, e.g. args=['server.py']")
    arguments = [str(a) for a in args]
    return MCPToolset(
        label=shlex.join([command, *arguments]),
        target={
            "kind": "stdio",
            "command": command,
            "args": arguments,
            "env": _str_map(env, "env"),
            "cwd": os.fspath(cwd) if cwd is not None else None,
        },
        include=include,
        exclude=exclude,
        prefix=prefix,
        idempotent=idempotent,
        confirm=confirm,
        timeout=timeout,
        start_timeout=start_timeout,
    )


def http(
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    prefix: str | None = None,
    idempotent: Mapping[str, bool] | None = None,
    confirm: Mapping[str, bool] | None = None,
    timeout: float | None = None,
    start_timeout: float = 30.0,
) -> MCPToolset:
    """The tools of an MCP server reached over streamable HTTP at ``url``.

    ``headers`` go with every request (``{"Authorization": "Bearer ..."}``); they are never
    recorded. The other options are those of ``stdio``.
    """
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise InvalidInput(f"mcp.http needs an http(s) URL, got {url!r}")
    return MCPToolset(
        label=url,
        target={"kind": "http", "url": url, "headers": _str_map(headers, "headers")},
        include=include,
        exclude=exclude,
        prefix=prefix,
        idempotent=idempotent,
        confirm=confirm,
        timeout=timeout,
        start_timeout=start_timeout,
    )


def _str_map(value: Mapping[str, str] | None, what: str) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidInput(f"{what} must be a mapping of strings to strings")
    return dict(value)


def _flags(value: Mapping[str, bool] | None, what: str) -> dict[str, bool]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, bool) for k, v in value.items()
    ):
        raise InvalidInput(f"{what} must map server tool names to True/False")
    return dict(value)


def _names(value: Iterable[str] | None, what: str) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise InvalidInput(f"{what} must be a list of tool names, e.g. {what}=['{value}']")
    names = frozenset(value)
    if not all(isinstance(n, str) for n in names):
        raise InvalidInput(f"{what} must be a list of tool names")
    return names


class MCPToolset(Toolset):
    """An MCP server's tools; made by ``nb.mcp.stdio`` or ``nb.mcp.http``."""

    def __init__(
        self,
        *,
        label: str,
        target: dict[str, Any],
        include: Iterable[str] | None,
        exclude: Iterable[str] | None,
        prefix: str | None,
        idempotent: Mapping[str, bool] | None,
        confirm: Mapping[str, bool] | None,
        timeout: float | None,
        start_timeout: float,
    ) -> None:
        self.name = label
        """The command line or URL."""
        self.target = target
        self.include = _names(include, "include")
        self.exclude = _names(exclude, "exclude") or frozenset()
        if prefix is not None and (not isinstance(prefix, str) or not prefix):
            raise InvalidInput("prefix must be a non-empty string, e.g. prefix='time_'")
        self.prefix = prefix or ""
        self.idempotent = _flags(idempotent, "idempotent")
        self.confirm = _flags(confirm, "confirm")
        for what, value in (("timeout", timeout), ("start_timeout", start_timeout)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float) or value <= 0
            ):
                raise InvalidInput(f"{what} must be a positive number of seconds")
        self.timeout = None if timeout is None else float(timeout)
        self.start_timeout = float(start_timeout)

    @property
    def label(self) -> str:
        return f"MCP server {self.name}"

    def __repr__(self) -> str:
        return f"<MCPToolset {self.name}>"

    async def open(self) -> OpenToolset:
        _sdk()
        server = _Server(self)
        await server.start()
        try:
            listed = await server.list_tools()
            tools = tuple(self._tool(server, t) for t in listed if self._wanted(t.name))
            unknown = sorted((self.include or frozenset()) - {t.name for t in listed})
            if unknown:
                raise ToolsetUnavailable(
                    f"{self.label} has no tools named {', '.join(unknown)} (include=); it "
                    f"lists {', '.join(sorted(t.name for t in listed)) or 'none'}",
                    toolset=self.name,
                )
        except BaseException:
            await server.close()
            raise
        return OpenToolset(tools=tools, close=server.close)

    def _wanted(self, name: str) -> bool:
        return (self.include is None or name in self.include) and name not in self.exclude

    def _tool(self, server: _Server, listed: Any) -> Tool:
        hints = listed.annotations
        read_only = bool(hints is not None and hints.read_only_hint)
        safe = read_only or bool(hints is not None and hints.idempotent_hint)
        # destructiveHint defaults to true in the spec, but only an explicit one asks: a
        # server that says nothing would otherwise make every tool need approval.
        destructive = bool(hints is not None and hints.destructive_hint is True and not read_only)
        name = listed.name
        schema = dict(listed.input_schema or {"type": "object"})
        # Models take tool names of letters, digits, '_' and '-' only; MCP allows more.
        shown = re.sub(r"[^A-Za-z0-9_-]", "_", f"{self.prefix}{name}")[:64]
        try:
            validator = _validator(schema)
        except InvalidInput as exc:
            raise ToolsetUnavailable(
                f"{self.label}: its tool {name!r} cannot be offered ({exc}); exclude= it",
                toolset=self.name,
            ) from None

        def check(arguments: dict[str, Any]) -> None:
            problems = [
                f"{'.'.join(str(p) for p in e.absolute_path) or 'arguments'}: {e.message}"
                for e in validator.iter_errors(arguments)
            ]
            if problems:
                raise InvalidToolArguments(
                    f"invalid arguments for tool '{shown}': {'; '.join(problems)}",
                    tool_name=shown,
                    problems=problems,
                )

        safe = self.idempotent.get(name, safe)

        async def call(arguments: dict[str, Any], ctx: ToolContext) -> str:
            return await server.call(name, arguments, ctx, idempotent=safe)

        try:
            return Tool.from_schema(
                shown,
                listed.description or "",
                schema,
                call,
                check=check,
                idempotent=safe,
                confirm=self.confirm.get(name, destructive),
            )
        except InvalidInput as exc:
            raise ToolsetUnavailable(
                f"{self.label}: its tool {name!r} cannot be offered ({exc}); exclude= it or "
                "use prefix=",
                toolset=self.name,
            ) from None


def _validator(schema: dict[str, Any]) -> Any:
    import jsonschema  # a dependency of the mcp SDK

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise InvalidInput(
            f"the server's input schema is not valid JSON Schema: {exc.message}"
        ) from None
    return cls(schema)


class _Call:
    """One tool call in flight: what its elicitations need."""

    def __init__(self, ctx: ToolContext, task: asyncio.Task[Any]) -> None:
        self.ctx = ctx
        self.task = task
        self.stopped: BaseException | None = None
        """Why the call was stopped from the side (a question, an answer that does not fit)."""


class MCPToolError(Exception):
    """An MCP tool call that failed: the server's own error text (what the model is told)."""


class _ConnectionLost(Exception):
    """The server went away during a request."""


class _Server:
    """One running server (or HTTP session) and its client, restarted when it dies.

    The SDK's client is entered and left in one task (``_serve``, on the runtime's loop),
    as anyio requires; calls are made from the tools' tasks.
    """

    def __init__(self, toolset: MCPToolset) -> None:
        self.toolset = toolset
        self.client: Client | None = None
        self.dead = True
        self.stop: asyncio.Event | None = None
        self.task: asyncio.Task[None] | None = None
        self.calls: set[_Call] = set()
        self.lock = asyncio.Lock()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_TAIL)
        self.generation = 0

    # -- life --------------------------------------------------------------------------------

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Client] = loop.create_future()
        self.stop = asyncio.Event()
        self.generation += 1
        self.task = loop.create_task(self._serve(ready, self.stop, self.generation))
        try:
            self.client = await asyncio.wait_for(asyncio.shield(ready), self.toolset.start_timeout)
        except BaseException as exc:
            await self._end_task()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ToolsetUnavailable(self._why(exc), toolset=self.toolset.name) from None
        self.dead = False

    def _why(self, exc: BaseException) -> str:
        if isinstance(exc, TimeoutError):
            reason = f"it did not answer within {self.toolset.start_timeout:g} s"
        else:
            reason = describe(_unwrap(exc))
        text = f"{self.toolset.label} would not start: {reason}"
        if self.stderr_tail:
            text += "; its stderr ended with:\n" + "\n".join(self.stderr_tail)
        return text + ". Check the command (run it in a terminal) and create the runtime again"

    async def _serve(self, ready: asyncio.Future[Client], stop: asyncio.Event, gen: int) -> None:
        mcp = _sdk()
        target = self.toolset.target
        errlog = None
        try:
            if target["kind"] == "stdio":
                errlog = self._stderr_pipe(gen)
                server: Any = mcp.StdioServerParameters(
                    command=target["command"],
                    args=target["args"],
                    env=target["env"],
                    cwd=target["cwd"],
                )
                transport = mcp.client.stdio.stdio_client(server, errlog=errlog)
            else:
                transport = _http_transport(target["url"], target["headers"])
            async with mcp.Client(
                transport,
                elicitation_callback=self._elicit,
                logging_callback=self._server_log,
                client_info=mcp.Implementation(name="agentnb", version=_version()),
                cache=None,
            ) as client:
                if errlog is not None:
                    errlog.close()  # the child has its copy: EOF on the pipe is its exit
                    errlog = None
                if not ready.done():
                    ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            elif not stop.is_set():
                log.warning("%s: connection ended: %s", self.toolset.label, describe(_unwrap(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if errlog is not None:
                errlog.close()
            if gen == self.generation:
                self.dead = True

    def _stderr_pipe(self, gen: int) -> Any:
        """A pipe for the server's stderr, read into the logger; EOF marks the server dead."""
        read_fd, write_fd = os.pipe()
        loop = asyncio.get_running_loop()
        label = self.toolset.label

        def pump() -> None:
            with open(read_fd, encoding="utf-8", errors="replace") as lines:
                for line in lines:
                    text = line.rstrip("\n")
                    self.stderr_tail.append(text)
                    log.info("%s: %s", label, text)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to mark
                loop.call_soon_threadsafe(self._exited, gen)

        threading.Thread(target=pump, daemon=True, name="agentnb-mcp-stderr").start()
        return open(write_fd, "w")

    def _exited(self, gen: int) -> None:
        if gen == self.generation and not self.dead:
            self.dead = True
            log.info("%s: the server exited; the next call starts it again", self.toolset.label)

    async def _server_log(self, params: Any) -> None:
        log.info("%s: [%s] %s", self.toolset.label, params.level, params.data)

    async def _end_task(self) -> None:
        if self.stop is not None:
            self.stop.set()
        task, self.task = self.task, None
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), 10.0)
            except (TimeoutError, Exception):  # noqa: BLE001 - stopping must go on
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self.client = None

    async def close(self) -> None:
        """Stop the server; calls still in flight are cancelled."""
        for call in list(self.calls):
            call.task.cancel()
        self.dead = True
        with contextlib.suppress(Exception):
            await self._end_task()

    async def restart(self) -> None:
        async with self.lock:
            if not self.dead and self.client is not None:
                return
            log.warning("%s: the server is gone; starting it again", self.toolset.label)
            await self._end_task()
            await self.start()
            await self.list_tools()  # the client learns the output schemas again

    # -- requests ----------------------------------------------------------------------------

    async def list_tools(self) -> list[Any]:
        client = self.client
        assert client is not None
        tools: list[Any] = []
        cursor = None
        try:
            while True:
                page = await asyncio.wait_for(
                    client.list_tools(cursor=cursor), self.toolset.start_timeout
                )
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return tools
        except Exception as exc:  # noqa: BLE001 - any failure to list: the toolset is unusable
            raise ToolsetUnavailable(
                f"{self.toolset.label} did not list its tools: {describe(_unwrap(exc))}",
                toolset=self.toolset.name,
            ) from None

    async def call(
        self, name: str, arguments: dict[str, Any], ctx: ToolContext, *, idempotent: bool
    ) -> str:
        if self.dead or self.client is None:
            await self.restart()  # it died between calls: this call was never sent
        try:
            result = await self._call_once(name, arguments, ctx)
        except _ConnectionLost as lost:
            if not idempotent:
                raise ToolOutcomeUnknown(
                    f"the MCP server stopped during the call ({lost}); whether {name} took "
                    "effect is unknown"
                ) from None
            log.warning("%s: %s lost its server; running it again once", self.toolset.label, name)
            await self.restart()
            try:
                result = await self._call_once(name, arguments, ctx)
            except _ConnectionLost as again:
                raise MCPToolError(
                    f"the server stopped twice during {name} ({again}); it was not run again"
                ) from None
        return self._text(result, ctx)

    async def _call_once(self, name: str, arguments: dict[str, Any], ctx: ToolContext) -> Any:
        client = self.client
        assert client is not None
        mcp = _sdk()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            data: dict[str, Any] = {"progress": progress}
            if total is not None:
                data["total"] = total
            if message:
                data["message"] = message
            ctx.progress(data)

        async def send() -> Any:
            _CALL.set(state)
            return await client.call_tool(
                name,
                arguments,
                read_timeout_seconds=self.toolset.timeout,
                progress_callback=on_progress,
            )

        task = asyncio.ensure_future(send())
        state = _Call(ctx, task)
        self.calls.add(state)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if state.stopped is not None:
                raise state.stopped from None
            if not task.done():  # interrupted: cancel the request (the SDK tells the server)
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            raise
        except mcp.MCPError as exc:
            if state.stopped is not None:
                raise state.stopped from None
            if exc.error.code == mcp.types.CONNECTION_CLOSED:
                self.dead = True
                raise _ConnectionLost(exc.error.message) from None
            raise MCPToolError(f"the server refused the call: {exc.error.message}") from None
        except Exception as exc:
            if state.stopped is not None:
                raise state.stopped from None
            if _is_disconnect(exc):
                self.dead = True
                raise _ConnectionLost(describe(_unwrap(exc))) from None
            raise
        finally:
            self.calls.discard(state)

    def _text(self, result: Any, ctx: ToolContext) -> str:
        parts: list[str] = []
        texts = any(block.type == "text" for block in result.content)
        if result.structured_content is not None and not texts:
            parts.append(json.dumps(result.structured_content, separators=(",", ":")))
        for index, block in enumerate(result.content):
            kind = block.type
            if kind == "text":
                parts.append(block.text)
            elif kind in ("image", "audio"):
                parts.append(self._blob(ctx, index, kind, block.mime_type, block.data, None))
            elif kind == "resource":
                res = block.resource
                text = getattr(res, "text", None)
                if text is not None:
                    parts.append(text)
                else:
                    mime = res.mime_type or "application/octet-stream"
                    parts.append(self._blob(ctx, index, "resource", mime, res.blob, str(res.uri)))
            elif kind == "resource_link":
                parts.append(f"[resource {block.uri}" + (f": {block.name}]" if block.name else "]"))
        text = "\n".join(parts)
        if result.is_error:
            raise MCPToolError(text or "the tool reported an error")
        return text

    def _blob(
        self, ctx: ToolContext, index: int, kind: str, mime: str, data: str, uri: str | None
    ) -> str:
        try:
            size = len(base64.b64decode(data, validate=True))
        except ValueError:
            size = len(data)
        payload = {"call_id": ctx.call_id, "index": index, "kind": kind, "mime_type": mime}
        payload |= {"bytes": size, "data": data} | ({"uri": uri} if uri else {})
        ctx.record("mcp/content", payload)
        return f"[{kind} {mime}, {size} bytes, kept in the log as mcp/content #{index}]"

    # -- elicitation -------------------------------------------------------------------------

    async def _elicit(self, context: Any, params: Any) -> Any:
        mcp = _sdk()
        call = _CALL.get()
        if call is None and len(self.calls) == 1:
            call = next(iter(self.calls))  # a server-to-client request of the one call
        if call is None:
            log.warning(
                "%s: an elicitation no call can be matched to (calls in flight: %d); declined",
                self.toolset.label,
                len(self.calls),
            )
            return mcp.types.ElicitResult(action="decline")
        question, schema = _question(params)
        try:
            answer = call.ctx.ask(question)
        except NeedsAnswer as exc:
            return self._stop(call, exc, mcp)
        if answer.kind == "reject":
            return mcp.types.ElicitResult(action="decline")
        try:
            content = _content(answer.text or "", schema)
        except InvalidInput as exc:
            why = MCPToolError(f"the person's answer does not fit the server's form: {exc}")
            return self._stop(call, why, mcp)
        return mcp.types.ElicitResult(action="accept", content=content)

    def _stop(self, call: _Call, why: BaseException, mcp: Any) -> Any:
        """Stop the call from the side: its tool raises ``why``; the server is cancelled."""
        call.stopped = why
        call.task.cancel()
        return mcp.types.ElicitResult(action="cancel")


def _question(params: Any) -> tuple[str, dict[str, Any] | None]:
    """The question a person sees, and the form schema (None for a URL elicitation)."""
    if getattr(params, "mode", "form") == "url":
        return f"{params.message}\nOpen {params.url} and answer when done.", None
    schema = dict(params.requested_schema or {})
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    if not props:
        return params.message, schema
    fields = []
    for name, spec in props.items():
        kind = spec.get("type", "string") if isinstance(spec, dict) else "string"
        if isinstance(spec, dict) and spec.get("enum"):
            kind = " | ".join(str(v) for v in spec["enum"])
        fields.append(f"{name} ({kind}{', required' if name in required else ''})")
    if len(props) == 1:
        hint = f"Answer with: {fields[0]}"
    else:
        hint = "Answer with a JSON object: " + ", ".join(fields)
    return f"{params.message}\n{hint}", schema


def _content(text: str, schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The form's content from the person's text; ``InvalidInput`` saying what fits."""
    if schema is None:
        return None
    props: dict[str, Any] = schema.get("properties") or {}
    if not props:
        return {}
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError as exc:
            raise InvalidInput(f"it looks like JSON but does not parse ({exc})") from None
        if not isinstance(value, dict):
            raise InvalidInput("a JSON answer must be an object")
        return value
    if len(props) != 1:
        raise InvalidInput(f"answer with a JSON object with {', '.join(props)}")
    ((name, spec),) = props.items()
    return {name: _coerce(stripped, spec if isinstance(spec, dict) else {}, name)}


def _coerce(text: str, spec: Mapping[str, Any], name: str) -> Any:
    kind = spec.get("type", "string")
    if kind == "boolean":
        word = text.lower()
        if word in ("yes", "y", "true", "1", "ok", "confirm"):
            return True
        if word in ("no", "n", "false", "0"):
            return False
        raise InvalidInput(f"{name} takes yes or no, got {text!r}")
    if kind in ("integer", "number"):
        try:
            return int(text) if kind == "integer" else float(text)
        except ValueError:
            raise InvalidInput(f"{name} takes a {kind}, got {text!r}") from None
    if kind == "array":
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def _unwrap(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _is_disconnect(exc: BaseException) -> bool:
    import anyio

    exc = _unwrap(exc)
    return isinstance(
        exc,
        anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | ConnectionError,
    )


@contextlib.asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str] | None) -> Any:
    """Streamable HTTP with ``headers`` on every request, over a client this owns."""
    import httpx2  # the mcp SDK's HTTP client
    from mcp.client.streamable_http import streamable_http_client

    # The SDK's own defaults: a server may hold a response stream open for long.
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0"
