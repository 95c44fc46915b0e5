"""Feedback on turns: the checks ``session.feedback`` makes and the fold its readers share.

A rating is a fact in the session's log (``feedback/added``, taken back by
``feedback/removed``), written by the runtime when it carries out the ``feedback`` command
the facade accepted. These pure functions check what a caller passes (so a bad rating is
refused before anything is written) and fold a session's events into the ratings that still
count, for the dataset builder, the exports and the views.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.events import Event
from agentnb.limits import check_text

__all__ = [
    "MAX_LABEL_CHARS",
    "Feedback",
    "check_feedback",
    "is_negative",
    "live_feedback",
]

MAX_LABEL_CHARS = 64
"""Longest label (``positive``, ``wrong-tool``...); comments take the input limit."""


@dataclass(frozen=True, slots=True)
class Feedback:
    """One rating that counts (not retracted): what ``feedback/added`` recorded."""

    feedback_id: str
    turn_id: str
    score: float | None
    label: str | None
    comment: str | None
    by: str | None
    seq: int
    at: datetime


def check_feedback(
    *, score: object = None, label: object = None, comment: object = None, by: object = None
) -> dict[str, Any]:
    """The rating's fields as they will be recorded; ``InvalidInput`` saying why not.

    ``score`` is a finite number (thumbs: 1 up, 0 down), ``label`` a short tag, ``comment``
    free text within the input limit, ``by`` who gave it; at least one of the first three.
    """
    if score is not None:
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise InvalidInput(f"score must be a number (1 up, 0 down), got {score!r}")
        if not math.isfinite(score):
            raise InvalidInput(f"score must be a finite number, got {score!r}")
        score = float(score)
    if label is not None:
        label = check_text(label, "the feedback label")
        if len(label) > MAX_LABEL_CHARS or "\n" in label:
            raise InvalidInput(
                f"the feedback label is a short tag of one line (at most {MAX_LABEL_CHARS} "
                "characters); put longer text in comment="
            )
    if comment is not None:
        comment = check_text(comment, "the feedback comment")
    if by is not None:
        by = check_text(by, "feedback's by=")
        if len(by) > 256:
            raise InvalidInput("feedback's by= names who gave it, in at most 256 characters")
    if score is None and label is None and comment is None:
        raise InvalidInput("feedback needs a score=, a label= or a comment= (or several)")
    return {"score": score, "label": label, "comment": comment, "by": by}


def is_negative(feedback: Feedback) -> bool:
    """A thumbs down: a score of 0 or below, or the label ``negative``."""
    return (feedback.score is not None and feedback.score <= 0) or feedback.label == "negative"


def live_feedback(events: Iterable[Event]) -> dict[str, Feedback]:
    """feedback_id -> the ratings of these events that were not retracted, in log order."""
    found: dict[str, Feedback] = {}
    for event in events:
        if event.type == "feedback/added":
            p: Mapping[str, Any] = event.payload
            found[p["feedback_id"]] = Feedback(
                p["feedback_id"],
                event.turn_id or "",
                p.get("score"),
                p.get("label"),
                p.get("comment"),
                p.get("by"),
                event.seq,
                event.occurred_at,
            )
        elif event.type == "feedback/removed":
            found.pop(event.payload["feedback_id"], None)
    return found
