"""An MCP server for the tests: one tool per annotation, progress, slow calls, elicitation.

Run as ``python tests/mcp/server.py`` (stdio) or ``python tests/mcp/server.py --http PORT``
(streamable HTTP on 127.0.0.1). Every tool that has an effect appends one line to
``$MCP_TEST_DIR/effects.log`` (``tool arguments``), so a test counts how often it ran; a
slow tool writes ``$MCP_TEST_DIR/started-<label>`` once it is under way and then waits.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.types import ToolAnnotations
from pydantic import BaseModel

server = MCPServer("agentnb-test-server")
DIR = Path(os.environ.get("MCP_TEST_DIR", "."))
# One red pixel (PNG).
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)


def effect(line: str) -> None:
    with (DIR / "effects.log").open("a") as f:
        f.write(line + "\n")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(city: str) -> str:
    """Look up the weather of a city."""
    return f"sunny in {city}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
def set_flag(name: str, value: bool) -> str:
    """Set a flag to a value (doing it twice changes nothing)."""
    effect(f"set_flag {name}={value}")
    return f"{name} is {value}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def delete_item(item: str) -> str:
    """Delete an item for good."""
    effect(f"delete_item {item}")
    return f"deleted {item}"


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def append_note(text: str) -> str:
    """Append a note."""
    effect(f"append_note {text}")
    return f"noted: {text}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def slow_read(label: str, seconds: float, ctx: Context) -> str:
    """Read slowly, reporting progress."""
    return await _slow(label, seconds, ctx)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def slow_write(label: str, seconds: float, ctx: Context) -> str:
    """Write slowly, reporting progress."""
    effect(f"slow_write {label}")
    return await _slow(label, seconds, ctx)


async def _slow(label: str, seconds: float, ctx: Context) -> str:
    await ctx.report_progress(0, 2, "started")
    (DIR / f"started-{label}").write_text(str(os.getpid()))
    try:
        for half in (1, 2):
            # A test that wants the call over (after a kill, say) creates fast-<label>.
            for _ in range(max(1, round(seconds / 0.02 / 2))):
                if (DIR / f"fast-{label}").exists():
                    break
                await asyncio.sleep(0.02)
            if half == 1:
                await ctx.report_progress(1, 2, "half way")
    except asyncio.CancelledError:
        (DIR / f"cancelled-{label}").write_text("cancelled")
        raise
    return f"done {label}"


class Booking(BaseModel):
    confirm: bool


def ask_booking(table: str) -> Elicit[Booking]:
    return Elicit(f"Book table {table}?", Booking)


@server.tool()
def book(table: str, answer: Annotated[Booking, Resolve(ask_booking)]) -> str:
    """Book a table, after asking the person."""
    if not answer.confirm:
        return f"table {table} not booked"
    effect(f"book {table}")
    return f"booked table {table}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def picture() -> Image:
    """A picture of one red pixel."""
    return Image(data=PIXEL, format="png")


class Forecast(BaseModel):
    city: str
    celsius: int


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def forecast(city: str) -> Forecast:
    """A structured forecast."""
    return Forecast(city=city, celsius=21)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def broken() -> str:
    """Always fails."""
    raise ToolError("the weather service is down")


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
def retire(name: str) -> str:
    """Remove a tool from this server (its clients' listings go stale)."""
    server.remove_tool(name)
    return f"retired {name}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def header(name: str, ctx: Context) -> str:
    """The value of an HTTP request header this call came with ("" over stdio)."""
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return (headers.get(name) if headers is not None else None) or ""


@server.tool(name="notes.count", annotations=ToolAnnotations(read_only_hint=True))
def notes_count() -> int:
    """How many notes there are (a name with a dot, which models do not take)."""
    path = DIR / "effects.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return sum(line.startswith("append_note") for line in lines)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def ephemeral() -> str:
    """A tool that a test retires."""
    return "still here"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> int:
    """The server's process id."""
    print(f"whoami called in {os.getpid()}", file=sys.stderr, flush=True)
    return os.getpid()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        print("test server starting", file=sys.stderr, flush=True)
        server.run()
