"""What a person gives back: ``Answer`` (to pending requests) and ``ToolOutcome`` (reconcile)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agentnb.errors import InvalidAnswer, InvalidInput
from agentnb.limits import check_json_size, check_text

__all__ = ["Answer", "ToolOutcome", "answer_payload"]


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

    @classmethod
    def approve(cls, edited_args: Mapping[str, Any] | None = None) -> Answer:
        """Approve the call, optionally with corrected arguments."""
        if edited_args is not None and not isinstance(edited_args, Mapping):
            raise InvalidInput("edited_args must be a mapping of argument names to values")
        if edited_args:
            check_json_size(dict(edited_args), "edited_args")
        return cls("approve", edited_args=dict(edited_args) if edited_args else None)

    @classmethod
    def reject(cls, reason: str = "rejected by the user") -> Answer:
        """Refuse the call; the model is told ``reason``."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("a rejection needs a non-empty reason the model can read")
        return cls("reject", reason=check_text(reason, "the rejection's reason"))

    @classmethod
    def output(cls, text: str) -> Answer:
        """The result of an external call, or the answer to a question."""
        return cls("output", text=check_text(text, "output", allow_empty=True))


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


def _text(text: object) -> str:
    return check_text(text, "outcome text", allow_empty=True)
