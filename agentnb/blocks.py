"""Rich results: the blocks an answer or a tool result may carry (``nb.blocks``).

``nb.Answer.output(text=None, *, blocks=[...])`` answers an external call or a question with
blocks, and a tool may return a block or a list of blocks (``str`` items among them are
``Text``)::

    nb.blocks.Text("The quote is attached.")
    nb.blocks.Json({"vendor": "Acme", "usd": 12000})
    nb.blocks.Image(png_bytes)                     # or a path; the type is read from the bytes
    nb.blocks.Image("chart.jpg", "image/jpeg")     # a claimed type must match the bytes
    nb.blocks.File("quote.pdf")                    # any bytes; the type guessed from the name

A block is checked when it is made, so a bad one fails where it is written
(``InvalidBlock``, ``BlockTooLarge``), before anything is committed.

**In the log** a block is a JSON part (``BlockPart``): ``{"type": "text", "text"}``,
``{"type": "json", "data"}``, ``{"type": "image" | "file", "mime", "size", "sha256", "name",
"data" | "blob"}``. Bytes up to ``INLINE_BYTES`` stay inline (base64 ``data``); past it they go
to the store's content-addressed blobs (``SessionStore.put_blob``) and the part keeps only the
digest (``blob``), so the log, the folds and the live frames stay small. The ``tool/result``
(and the tool ``Message``) keeps a text stand-in in ``output`` / ``text`` (``stand_in``): what a
model without image input (``ScriptedModel``, a text-only endpoint) is told. Adapters of vision
APIs send the blocks themselves (images as image parts), with the bytes the runtime reads from
the blobs just before the call.

**Bounds** (``BlockTooLarge``): ``MAX_BLOCK_BYTES`` (5 MiB, the largest image Anthropic's API
takes) per image or file, ``MAX_BLOCKS`` per answer or result, ``MAX_TOTAL_BYTES`` for all of
them; a ``Json`` block's text is held to ``limits.MAX_INPUT_CHARS``. Images are PNG, JPEG, GIF or
WebP (what every vision API takes, and what a browser shows safely; SVG is a ``File``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import mimetypes
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentnb.errors import BlockTooLarge, InvalidBlock
from agentnb.limits import MAX_INPUT_CHARS, check_chars, check_json_chars, check_text

__all__ = [
    "IMAGE_TYPES",
    "INLINE_BYTES",
    "MAX_BLOCKS",
    "MAX_BLOCK_BYTES",
    "MAX_TOTAL_BYTES",
    "Block",
    "BlockPart",
    "File",
    "FilePart",
    "Image",
    "ImagePart",
    "Json",
    "JsonPart",
    "Text",
    "TextPart",
    "block_of",
    "blocks_of",
    "checked",
    "data_url",
    "describe_part",
    "part_bytes",
    "stand_in",
    "stored",
    "with_bytes",
]

MAX_BLOCK_BYTES = 5 * 1024 * 1024
"""Bytes one ``Image`` or ``File`` may hold (Anthropic's per-image limit; OpenAI's is larger)."""
MAX_BLOCKS = 32
"""Blocks one answer or one tool result may carry."""
MAX_TOTAL_BYTES = 20 * 1024 * 1024
"""Bytes all the images and files of one answer or tool result may hold together."""
INLINE_BYTES = 16 * 1024
"""Bytes an image or file keeps inline in the log (base64); larger ones go to the blobs."""

IMAGE_TYPES: dict[str, Callable[[bytes], bool]] = {
    "image/png": lambda b: b.startswith(b"\x89PNG\r\n\x1a\n"),
    "image/jpeg": lambda b: b.startswith(b"\xff\xd8\xff"),
    "image/gif": lambda b: b[:6] in (b"GIF87a", b"GIF89a"),
    "image/webp": lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP",
}
"""The image types a block may be, each with the check its bytes must pass."""


# -- the parts (the JSON form in the log and on the wire) -------------------------------------


def _none(value: object) -> bool:
    return value is None


class _Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextPart(_Part):
    """A text block."""

    type: Literal["text"] = "text"
    text: str


class JsonPart(_Part):
    """A structured value (any JSON)."""

    type: Literal["json"] = "json"
    data: Any = None


class _BytesPart(_Part):
    mime: str
    """The media type (for an image, checked against its bytes when the block was made)."""
    size: int
    """Bytes."""
    sha256: str
    """Hex SHA-256 of the bytes (the blob's key when they are in the blobs)."""
    name: str | None = Field(default=None, exclude_if=_none)
    """A file name, for showing and saving (the path's name when made from a path)."""
    data: str | None = Field(default=None, exclude_if=_none)
    """The bytes, base64, when they are at most ``INLINE_BYTES`` (or read for a model call)."""
    blob: str | None = Field(default=None, exclude_if=_none)
    """The digest of the store blob holding the bytes, when they are not inline."""


class ImagePart(_BytesPart):
    """An image: PNG, JPEG, GIF or WebP."""

    type: Literal["image"] = "image"


class FilePart(_BytesPart):
    """A file of any type."""

    type: Literal["file"] = "file"


BlockPart = Annotated[TextPart | JsonPart | ImagePart | FilePart, Field(discriminator="type")]
"""One block as it is stored: the ``blocks`` of ``tool/result`` and of a tool ``Message``."""

_KINDS = ("text", "json", "image", "file")
_OPTIONAL = ("name", "data", "blob")  # of an image or file part: left out when None


# -- the blocks (what users make) --------------------------------------------------------------


class Block:
    """A block of a rich answer or tool result; made checked, immutable, compared by value."""

    __slots__ = ()

    def part(self) -> dict[str, Any]:
        """The JSON form, bytes inline (base64): how the block travels over HTTP."""
        raise NotImplementedError  # pragma: no cover - every block below defines it

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.part() == self.part()

    def __hash__(self) -> int:
        return hash(json.dumps(self.part(), sort_keys=True))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} blocks are immutable")


class Text(Block):
    """Text."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        object.__setattr__(self, "text", check_text(text, "a Text block", allow_empty=True))

    def part(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}

    def __repr__(self) -> str:
        return f"Text({self.text!r})"


class Json(Block):
    """A structured value; it must encode as JSON (no NaN, no objects JSON does not know)."""

    __slots__ = ("data",)
    data: Any

    def __init__(self, data: Any) -> None:
        try:
            text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidBlock(
                f"a Json block must hold JSON (dicts, lists, str, numbers, bool, None): {exc}; "
                "convert it first (for a pydantic model, model.model_dump(mode='json'))"
            ) from None
        except RecursionError:
            raise InvalidBlock("a Json block is nested too deeply; pass a flatter value") from None
        if len(text) > MAX_INPUT_CHARS:
            raise BlockTooLarge(
                f"a Json block has {len(text):,} characters as JSON; the limit is "
                f"{MAX_INPUT_CHARS:,}: send a File, or less of it"
            )
        value = json.loads(text)  # a copy the caller cannot change afterwards
        check_json_chars(value, "a Json block", error=InvalidBlock)
        object.__setattr__(self, "data", value)

    def part(self) -> dict[str, Any]:
        return {"type": "json", "data": self.data}

    def __repr__(self) -> str:
        return f"Json({self.data!r})"


class _Bytes(Block):
    __slots__ = ("data", "mime", "name")
    data: bytes
    mime: str
    name: str | None
    _what = "a block"

    def _set(self, source: bytes | str | os.PathLike[str], name: str | None) -> str | None:
        if isinstance(source, bytes | bytearray | memoryview):
            data = bytes(source)
        elif isinstance(source, str | os.PathLike):
            path = Path(source)
            if not path.is_file():
                raise InvalidBlock(
                    f"{self._what} names {str(path)!r}, which is not a file: pass an existing "
                    "path, or the bytes themselves"
                )
            size = path.stat().st_size
            if size > MAX_BLOCK_BYTES:
                raise BlockTooLarge(self._too_big(size))
            data = path.read_bytes()
            name = name if name is not None else path.name
        else:
            raise InvalidBlock(f"{self._what} takes bytes or a path, got {type(source).__name__}")
        if len(data) > MAX_BLOCK_BYTES:
            raise BlockTooLarge(self._too_big(len(data)))
        if name is not None:
            check_text(name, f"the name of {self._what}", error=InvalidBlock)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "name", name)
        return name

    def _too_big(self, size: int) -> str:
        return (
            f"{self._what} has {size:,} bytes; one may hold at most {MAX_BLOCK_BYTES:,} "
            "(agentnb.blocks.MAX_BLOCK_BYTES): scale the image down, or send where it is saved"
        )

    def part(self) -> dict[str, Any]:
        return {
            "type": self._kind,  # type: ignore[attr-defined]
            "mime": self.mime,
            "size": len(self.data),
            "sha256": hashlib.sha256(self.data).hexdigest(),
            "name": self.name,
            "data": base64.b64encode(self.data).decode("ascii"),
        }

    def __repr__(self) -> str:
        named = f", name={self.name!r}" if self.name else ""
        return f"{type(self).__name__}(<{len(self.data):,} bytes>, {self.mime!r}{named})"


class Image(_Bytes):
    """An image, from bytes or a path; PNG, JPEG, GIF or WebP.

    ``mime`` is read from the bytes when not given; a given one must match them
    (``InvalidBlock`` otherwise, as for bytes that are no image of a known type).
    """

    __slots__ = ()
    _kind = "image"
    _what = "an Image block"

    def __init__(
        self,
        source: bytes | str | os.PathLike[str],
        mime: str | None = None,
        *,
        name: str | None = None,
    ) -> None:
        self._set(source, name)
        found = next((t for t, check in IMAGE_TYPES.items() if check(self.data)), None)
        if mime is not None:
            if mime not in IMAGE_TYPES:
                raise InvalidBlock(
                    f"an Image block is one of {', '.join(IMAGE_TYPES)}, not {mime!r}: convert "
                    "it, or send it as nb.blocks.File"
                )
            if found != mime:
                seen = f"they are {found}" if found else "they are no image of a known type"
                raise InvalidBlock(
                    f"an Image block claims {mime}, but its bytes do not match ({seen}): pass "
                    "the right mime, or leave it out to have it read from the bytes"
                )
        elif found is None:
            raise InvalidBlock(
                f"an Image block's bytes are not {', '.join(IMAGE_TYPES)}: convert the image, "
                "or send it as nb.blocks.File"
            )
        object.__setattr__(self, "mime", found)


class File(_Bytes):
    """A file, from bytes or a path; ``mime`` defaults to a guess from the name (else
    ``application/octet-stream``)."""

    __slots__ = ()
    _kind = "file"
    _what = "a File block"

    def __init__(
        self,
        source: bytes | str | os.PathLike[str],
        mime: str | None = None,
        *,
        name: str | None = None,
    ) -> None:
        name = self._set(source, name)
        if mime is None:
            mime = (mimetypes.guess_type(name)[0] if name else None) or "application/octet-stream"
        if not isinstance(mime, str) or "/" not in mime or len(mime) > 255:
            raise InvalidBlock(f"a File block's mime is a media type like 'text/csv', not {mime!r}")
        check_chars(mime, "a File block's mime", error=InvalidBlock)
        object.__setattr__(self, "mime", mime)


# -- reading blocks from values ------------------------------------------------------------------


def block_of(value: object) -> Block:
    """A ``Block`` from a block, a ``str`` (``Text``) or a part's JSON (``Block.part()``, as
    HTTP carries it, bytes in base64 ``data``); ``InvalidBlock`` naming what is wrong."""
    if isinstance(value, Block):
        return value
    if isinstance(value, str):
        return Text(value)
    if not isinstance(value, Mapping):
        raise InvalidBlock(
            f"a block is nb.blocks.Text, Json, Image or File, not {type(value).__name__}"
        )
    kind = value.get("type")
    if kind not in _KINDS:
        raise InvalidBlock(
            f"unknown block type {kind!r}: a block's type is one of {', '.join(_KINDS)}"
        )
    if kind == "text":
        return Text(value.get("text", ""))
    if kind == "json":
        return Json(value.get("data"))
    encoded = value.get("data")
    if not isinstance(encoded, str):
        raise InvalidBlock(f"an {kind} block needs its bytes as base64 in 'data'")
    if len(encoded) > (MAX_BLOCK_BYTES * 4) // 3 + 4:
        raise BlockTooLarge(f"an {kind} block's data is longer than {MAX_BLOCK_BYTES:,} bytes")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidBlock(f"an {kind} block's 'data' is not base64") from None
    mime, name = value.get("mime"), value.get("name")
    if kind == "image":
        return Image(data, mime, name=name)
    return File(data, mime, name=name)


def blocks_of(value: object) -> tuple[Block, ...] | None:
    """The blocks a tool returned (one block, or a list or tuple holding at least one block,
    its ``str`` items ``Text``); None when it returned something else (text as before)."""
    if isinstance(value, Block):
        return (value,)
    if (
        isinstance(value, list | tuple)
        and any(isinstance(v, Block) for v in value)
        and all(isinstance(v, Block | str) for v in value)
    ):
        return tuple(block_of(v) for v in value)
    return None


def checked(blocks: Iterable[object], what: str) -> tuple[Block, ...]:
    """``blocks`` as blocks, within ``MAX_BLOCKS`` and ``MAX_TOTAL_BYTES``."""
    if isinstance(blocks, str | bytes | Mapping) or not isinstance(blocks, Iterable):
        raise InvalidBlock(
            f"{what}: blocks= takes a list of nb.blocks, got {type(blocks).__name__}"
        )
    out = tuple(block_of(b) for b in blocks)
    if len(out) > MAX_BLOCKS:
        raise BlockTooLarge(
            f"{what} has {len(out)} blocks; at most {MAX_BLOCKS} fit (agentnb.blocks.MAX_BLOCKS)"
        )
    total = sum(len(b.data) for b in out if isinstance(b, _Bytes))
    if total > MAX_TOTAL_BYTES:
        raise BlockTooLarge(
            f"{what} holds {total:,} bytes of images and files; at most {MAX_TOTAL_BYTES:,} fit "
            "(agentnb.blocks.MAX_TOTAL_BYTES): send fewer, or where they are saved"
        )
    return out


# -- stored parts ------------------------------------------------------------------------------


def stored(
    parts: Sequence[Mapping[str, Any]], put_blob: Callable[[bytes], str]
) -> list[dict[str, Any]]:
    """``parts`` (JSON, bytes inline) as the log keeps them: bytes past ``INLINE_BYTES`` put
    in the blobs (``put_blob``, the store's) and replaced by the digest. Idempotent."""
    out = []
    for given in parts:
        part = dict(given)
        data = part.get("data")
        if part.get("type") in ("image", "file") and isinstance(data, str):
            raw = base64.b64decode(data)
            if len(raw) > INLINE_BYTES:
                part["data"], part["blob"] = None, put_blob(raw)
        if part.get("type") in ("image", "file"):
            part = {k: v for k, v in part.items() if v is not None or k not in _OPTIONAL}
        out.append(part)
    return out


def part_bytes(part: ImagePart | FilePart, get_blob: Callable[[str], bytes]) -> bytes:
    """The bytes of an image or file part, inline or from the blobs (``Corrupt`` if gone)."""
    if part.data is not None:
        return base64.b64decode(part.data)
    assert part.blob is not None
    return get_blob(part.blob)


def with_bytes(
    parts: Sequence[TextPart | JsonPart | ImagePart | FilePart], get_blob: Callable[[str], bytes]
) -> tuple[TextPart | JsonPart | ImagePart | FilePart, ...]:
    """``parts`` with every image and file's bytes inline (read from the blobs): what a model
    adapter sends. Not for the log."""
    out: list[TextPart | JsonPart | ImagePart | FilePart] = []
    for part in parts:
        if isinstance(part, ImagePart | FilePart) and part.data is None:
            data = base64.b64encode(part_bytes(part, get_blob)).decode("ascii")
            out.append(part.model_copy(update={"data": data}))
        else:
            out.append(part)
    return tuple(out)


def data_url(part: ImagePart | FilePart) -> str | None:
    """``data:<mime>;base64,...`` of a part whose bytes are inline; None otherwise."""
    if part.data is None:
        return None
    return f"data:{part.mime};base64,{part.data}"


def _kb(size: int) -> str:
    return f"{size / 1024:.1f} KB" if size >= 1024 else f"{size} bytes"


def describe_part(part: Mapping[str, Any] | _Part) -> str:
    """The text that stands in for one part where a block cannot go."""
    p = part.model_dump() if isinstance(part, _Part) else dict(part)
    kind = p.get("type")
    if kind == "text":
        return str(p.get("text") or "")
    if kind == "json":
        return json.dumps(p.get("data"), ensure_ascii=False, separators=(",", ":"))
    named = f"{p['name']}, " if p.get("name") else ""
    return f"[{kind}: {named}{p.get('mime')}, {_kb(int(p.get('size') or 0))}]"


def stand_in(parts: Iterable[Mapping[str, Any] | _Part]) -> str:
    """The text a model without block input is told, and ``output`` keeps: the texts, the
    JSON values, and a bracketed line for each image and file."""
    return "\n".join(describe_part(p) for p in parts)
