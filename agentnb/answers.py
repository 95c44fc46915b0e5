"""What a person gives back: ``Answer`` (to pending requests) and ``ToolOutcome`` (reconcile)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentnb.blocks import Block, checked, stand_in, stored
from agentnb.errors import InvalidAnswer, InvalidBlock, InvalidInput
from agentnb.limits import check_json_size, check_text

__all__ = ["Answer", "ToolOutcome", "answer_payload", "stored_answers"]


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer to a pending request.

    ``Answer.approve(edited_args=...)`` / ``Answer.reject(reason)`` answer a ``confirmation``
    (``True`` and ``False`` are shorthands); ``Answer.output(text)`` answers an
    ``external_execution`` or ``ask_user`` request (a plain ``str`` is a shorthand), and
    ``Answer.reject(reason)`` declines an ``ask_user`` question.
    """

    kind: str
    reason: str | None = None
    edited_args: Mapping[str, Any] | None = None
    text: str | None = None
    remember: str | None = None
    """For an approval: ``session`` or ``agent``, to record a permission rule."""
    match: Mapping[str, Any] | None = None
    """The rule's argument constraints (each named argument must equal its value)."""
    blocks: tuple[Block, ...] | None = None
    """For an output: its blocks (``nb.blocks``), ``text`` first as a ``Text`` block."""

    @classmethod
    def approve(
        cls,
        edited_args: Mapping[str, Any] | None = None,
        *,
        remember: str | None = None,
        match: Mapping[str, Any] | None = None,
    ) -> Answer:
        """Approve the call, optionally with corrected arguments.

        ``remember="session"`` also records a permission rule (``permission/changed``):
        later calls of the same tool in this session run without asking, and their
        ``action/end`` cites the rule. ``remember="agent"`` makes the rule hold in every
        session of this agent for this user. ``match`` narrows the rule to calls whose named
        arguments equal the given values (default: any arguments). A rule holds only while
        the agent is the one it was granted under, and goes with its session when that is
        deleted; ``session.permissions()`` lists them, ``session.revoke(rule_id)`` removes one.
        """
        if edited_args is not None and not isinstance(edited_args, Mapping):
            raise InvalidInput("edited_args must be a mapping of argument names to values")
        if edited_args:
            check_json_size(dict(edited_args), "edited_args")
        if remember not in (None, "session", "agent"):
            raise InvalidInput(f"remember must be None, 'session' or 'agent', got {remember!r}")
        if match is not None:
            if remember is None:
                raise InvalidInput("match narrows a remembered rule: pass remember= as well")
            if not isinstance(match, Mapping) or not all(isinstance(k, str) for k in match):
                raise InvalidInput("match must be a mapping of argument names to values")
            check_json_size(dict(match), "match")
        return cls(
            "approve",
            edited_args=dict(edited_args) if edited_args else None,
            remember=remember,
            match=dict(match) if match else None,
        )

    @classmethod
    def reject(cls, reason: str = "rejected by the user") -> Answer:
        """Refuse the call; the model is told ``reason``."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("a rejection needs a non-empty reason the model can read")
        return cls("reject", reason=check_text(reason, "the rejection's reason"))

    @classmethod
    def output(cls, text: str | None = None, *, blocks: Sequence[object] | None = None) -> Answer:
        """The result of an external call, or the answer to a question.

        ``blocks`` makes it a rich result (``nb.blocks.Text``, ``Json``, ``Image``, ``File``;
        a ``str`` is ``Text``): the model sees the images when its API takes them, and a
        text stand-in otherwise. Bad blocks raise ``InvalidBlock`` / ``BlockTooLarge`` here.
        """
        if blocks is None:
            return cls("output", text=check_text(text, "output", allow_empty=True))
        if text is not None:
            check_text(text, "output", allow_empty=True)
        made = checked([*([text] if text else []), *_listed(blocks)], "an Answer.output")
        if not made:
            raise InvalidInput("Answer.output(blocks=[]) has nothing to give: pass text or blocks")
        return cls("output", text=text, blocks=made)


def answer_payload(request_id: str, kind: str, answer: object) -> dict[str, Any]:
    """The JSON form of ``answer`` to a request of ``kind``; ``InvalidAnswer`` if unfit.

    Every text in it is held to the one input limit (``agentnb.limits``), however the
    ``Answer`` was built.
    """
    if kind == "confirmation":
        if answer is True:
            return {"approved": True}
        if answer is False:
            return {"approved": False, "reason": "rejected by the user"}
        if isinstance(answer, Answer) and answer.kind == "approve":
            out: dict[str, Any] = {"approved": True}
            if answer.edited_args is not None:
                what = f"the edited arguments for {request_id}"
                check_json_size(dict(answer.edited_args), what, error=InvalidAnswer)
                out["edited_args"] = dict(answer.edited_args)
            if answer.remember is not None:
                out["remember"] = {"scope": answer.remember, "match": dict(answer.match or {})}
            return out
        if isinstance(answer, Answer) and answer.kind == "reject":
            what = f"the rejection's reason for {request_id}"
            return {
                "approved": False,
                "reason": check_text(answer.reason, what, error=InvalidAnswer),
            }
        raise InvalidAnswer(
            f"request {request_id} asks for approval: answer True, False, "
            "nb.Answer.approve(edited_args=...) or nb.Answer.reject(reason)"
        )
    if kind == "ask_user" and isinstance(answer, Answer) and answer.kind == "reject":
        what = f"the reason for declining {request_id}"
        return {"declined": True, "reason": check_text(answer.reason, what, error=InvalidAnswer)}
    if isinstance(answer, Answer) and answer.kind == "output" and answer.blocks:
        parts = [b.part() for b in answer.blocks]
        return {"output": stand_in(parts), "blocks": parts}
    text = answer.text if isinstance(answer, Answer) and answer.kind == "output" else answer
    if isinstance(text, str):
        what = f"the answer to {request_id}"
        return {"output": check_text(text, what, allow_empty=True, error=InvalidAnswer)}
    raise InvalidAnswer(
        f"request {request_id} ({kind}) needs text: answer a str or nb.Answer.output(text)"
    )


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The verified outcome of an uncertain tool call, recorded by ``reconcile``."""

    status: str
    text: str = ""
    _: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def success(cls, text: str) -> ToolOutcome:
        """The call did happen; ``text`` is what the model sees as its result."""
        return cls("success", _text(text))

    @classmethod
    def error(cls, text: str) -> ToolOutcome:
        """The call failed; ``text`` says how."""
        return cls("error", _text(text))

    @classmethod
    def unknown(cls) -> ToolOutcome:
        """Nobody knows; the model is told so, and that the call was not run again."""
        return cls(
            "unknown",
            "The outcome of this call is unknown: the run stopped while it "
            "was running, and it was not run again.",
        )


def stored_answers(
    answers: Mapping[str, dict[str, Any]], put_blob: Callable[[bytes], str]
) -> dict[str, dict[str, Any]]:
    """JSON answers (``answer_payload``) with their blocks' large bytes put in the blobs
    (``put_blob``, the store's), as the inbox keeps them."""
    return {
        rid: payload | {"blocks": stored(payload["blocks"], put_blob)}
        if payload.get("blocks")
        else payload
        for rid, payload in answers.items()
    }


def _listed(blocks: object) -> list[object]:
    if isinstance(blocks, Block):
        return [blocks]
    if isinstance(blocks, str | bytes | Mapping) or not isinstance(blocks, Sequence):
        raise InvalidBlock(
            f"blocks= takes a list of nb.blocks (Text, Json, Image, File), got "
            f"{type(blocks).__name__}"
        )
    return list(blocks)


def _text(text: object) -> str:
    return check_text(text, "outcome text", allow_empty=True)
