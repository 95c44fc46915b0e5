"""Result blocks (``agentnb.blocks``) as each vendor API's content parts.

One function per API, each taking a tool message's ``blocks`` (bytes inline: the runtime reads
them from the blobs before the call) and giving what that API accepts; a block the API cannot
take, or one whose bytes are not at hand, goes as its text stand-in:

* ``anthropic_content``: ``tool_result`` content, images as ``image`` blocks and PDFs as
  ``document`` blocks (base64 sources);
* ``openai_chat_images`` / ``with_tool_images``: Chat Completions takes text only in a ``tool``
  message, so the images of a run of tool messages follow them in one ``user`` message of
  ``image_url`` parts (data URLs);
* ``responses_output``: a ``function_call_output`` whose ``output`` is a list of
  ``input_text``, ``input_image`` and ``input_file`` parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentnb.blocks import FilePart, ImagePart, JsonPart, TextPart, data_url, describe_part
from agentnb.events import Message

__all__ = ["anthropic_content", "openai_chat_images", "responses_output", "with_tool_images"]

_PDF = "application/pdf"
Parts = Sequence[TextPart | JsonPart | ImagePart | FilePart]


def _texts(out: list[dict[str, Any]], text: str, kind: str) -> None:
    if text:
        out.append({"type": kind, "text": text})


def anthropic_content(blocks: Parts) -> list[dict[str, Any]]:
    """The ``content`` of an Anthropic ``tool_result`` for these blocks."""
    out: list[dict[str, Any]] = []
    for part in blocks:
        if isinstance(part, ImagePart) and part.data is not None:
            source = {"type": "base64", "media_type": part.mime, "data": part.data}
            out.append({"type": "image", "source": source})
        elif (
            isinstance(part, FilePart) and part.data is not None and part.mime == "application/pdf"
        ):
            source = {"type": "base64", "media_type": part.mime, "data": part.data}
            out.append({"type": "document", "source": source})
        else:
            _texts(out, describe_part(part), "text")
    return out or [{"type": "text", "text": "(no output)"}]


def openai_chat_images(blocks: Parts) -> list[dict[str, Any]]:
    """The ``image_url`` parts (data URLs) of the images among these blocks."""
    out: list[dict[str, Any]] = []
    for part in blocks:
        url = data_url(part) if isinstance(part, ImagePart) else None
        if url is not None:
            out.append({"type": "image_url", "image_url": {"url": url}})
    return out


def with_tool_images(
    messages: Sequence[Message], converted: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``converted`` (one Chat Completions message per message of ``messages``) with a
    ``user`` message of the images after each run of tool messages that returned some."""
    out: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    for message, body in zip(messages, converted, strict=True):
        if images and message.role != "tool":
            out.append(_images_message(images))
            images = []
        out.append(body)
        if message.role == "tool" and message.blocks:
            images.extend(openai_chat_images(message.blocks))
    if images:
        out.append(_images_message(images))
    return out


def _images_message(images: list[dict[str, Any]]) -> dict[str, Any]:
    intro = {"type": "text", "text": "The images the tool results above returned:"}
    return {"role": "user", "content": [intro, *images]}


def responses_output(blocks: Parts) -> list[dict[str, Any]]:
    """The ``output`` parts of a Responses ``function_call_output`` for these blocks."""
    out: list[dict[str, Any]] = []
    for part in blocks:
        url = data_url(part) if isinstance(part, ImagePart | FilePart) else None
        if isinstance(part, ImagePart) and url is not None:
            out.append({"type": "input_image", "image_url": url})
        elif isinstance(part, FilePart) and url is not None:
            out.append({"type": "input_file", "filename": part.name or "file", "file_data": url})
        else:
            _texts(out, describe_part(part), "input_text")
    return out
