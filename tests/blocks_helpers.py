"""Images and an agent for the rich-answer tests (``agentnb.blocks``).

``png(width, height, noise=)`` makes a real PNG (a colour gradient; with ``noise`` random
pixels, so it does not compress below ``INLINE_BYTES``). The agent, importable as
``tests.blocks_helpers:agent`` for ``agentnb serve``, follows the task's first word:

- ``chart``: calls ``chart``, which returns a caption, a large PNG (kept in the blobs) and a
  small one (inline);
- ``chart-then-sleep <s>``: ``chart``, then ``pause`` for ``s`` seconds (killed meanwhile);
- ``quote``: calls the external ``annual_quote`` (answered with ``Answer.output(blocks=)``);
- ``bad-image``: calls ``bad_image``, which claims PNG for bytes that are not;
- anything else: ``You said: <task>``.

After a tool result the final answer is ``done: <the result's text stand-in>``.
"""

from __future__ import annotations

import random
import struct
import time
import zlib

import agentnb as nb


def png(width: int = 160, height: int = 96, *, noise: bool = False, seed: int = 1) -> bytes:
    """A valid RGB PNG: a gradient, or with ``noise`` random pixels (incompressible)."""
    rng = random.Random(seed)
    rows = []
    for y in range(height):
        row = bytearray(b"\x00")
        for x in range(width):
            if noise:
                row += bytes((rng.randrange(256), rng.randrange(256), rng.randrange(256)))
            else:
                row += bytes((x * 255 // width, y * 255 // height, 160))
        rows.append(bytes(row))

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"".join(rows)))
        + chunk(b"IEND", b"")
    )


BIG = png(120, 80, noise=True)
"""More than ``INLINE_BYTES``: kept in the store's blobs."""
SMALL = png(48, 32)
"""Less than ``INLINE_BYTES``: kept inline in the log."""


@nb.tool
def chart() -> list[object]:
    """Draw the cost chart."""
    return [
        "The cost chart:",
        nb.blocks.Image(BIG, name="costs.png"),
        nb.blocks.Image(SMALL, "image/png", name="legend.png"),
        nb.blocks.Json({"plan_a": 12000, "plan_b": 9000}),
    ]


@nb.tool
def pause(seconds: float) -> str:
    """Sleep (not safe to run twice)."""
    time.sleep(seconds)
    return f"paused {seconds}"


@nb.tool(external=True)
def annual_quote(vendor: str) -> str:
    """The vendor's annual quote (an outside system gives it)."""
    raise AssertionError("an external tool is not run here")


@nb.tool
def bad_image() -> nb.blocks.Block:
    """Return an image that is not one."""
    return nb.blocks.Image(b"GIF89a-but-claimed-png", "image/png")


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall:
    users = [m for m in messages if m.role == "user"]
    words = users[-1].text.split()
    verb = words[0] if words else ""
    last = messages[-1]
    if last.role == "tool":
        if verb == "chart-then-sleep" and last.name == "chart":
            return nb.ToolCall("pause", {"seconds": float(words[1])})
        return f"done: {last.text}"
    if verb in ("chart", "chart-then-sleep"):
        return nb.ToolCall("chart", {})
    if verb == "quote":
        return nb.ToolCall("annual_quote", {"vendor": "acme"})
    if verb == "bad-image":
        return nb.ToolCall("bad_image", {})
    return f"You said: {users[-1].text}"


def make_agent() -> nb.Agent:
    """A fresh agent (its own ``ScriptedModel``, so ``model.requests`` is this test's)."""
    return nb.Agent(
        name="Charts",
        agent_id="charts",
        model=nb.ScriptedModel(_reply),
        tools=[chart, pause, annual_quote, bad_image],
        instructions="Answer with charts.",
    )


agent = make_agent()
