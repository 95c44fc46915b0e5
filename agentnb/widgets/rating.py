"""Thumbs up / down and a comment box under each answer of ``SessionView``.

Kept apart from the view: ``rating_bar`` makes (once per answer) the bar the view puts under
an assistant reply; its buttons call the view's ``rate``, which calls ``session.feedback``
like every other button calls its verb (errors show in the view).
"""

from __future__ import annotations

import html
from typing import Any, Protocol

from agentnb.errors import install_hint
from agentnb.projections.chat import ChatItem

try:
    import ipywidgets as w
except ImportError as exc:  # pragma: no cover - the view imports ipywidgets first
    raise ImportError("SessionView needs ipywidgets: " + install_hint("widgets")) from exc

__all__ = ["rated_html", "rating_bar"]


class _Rates(Protocol):
    def rate(self, turn_id: str, score: float, comment: str = "") -> str | None: ...


def rated_html(score: float, comment: str) -> str:
    """What the bar says once a rating is recorded (the comment escaped)."""
    said = f": {html.escape(comment)}" if comment.strip() else ""
    return f'<span class="agentnb-rated">recorded as {"good" if score > 0 else "bad"}{said}</span>'


def rating_bar(view: _Rates, item: ChatItem, bars: dict[str, Any]) -> Any | None:
    """The rating bar of a completed assistant answer (made once, kept in ``bars``), or None
    for any other item (a reply that also calls tools is a step, not the answer)."""
    if not (
        item.kind == "message"
        and item.role == "assistant"
        and item.status == "completed"
        and item.turn_id
        and item.text.strip()
        and not item.tool_call_ids  # a step on the way: the turn's answer comes after it
    ):
        return None
    bar = bars.get(item.id)
    if bar is None:
        bar = bars[item.id] = _bar(view, item.turn_id)
    return bar


def _bar(view: _Rates, turn_id: str) -> Any:
    # Font Awesome icons (JupyterLab and Notebook ship them): emoji need a font a machine may lack
    small = w.Layout(width="40px")
    up = w.Button(icon="thumbs-up", tooltip="thumbs up: a good answer", layout=small)
    down = w.Button(icon="thumbs-down", tooltip="thumbs down: a bad answer", layout=small)
    comment = w.Text(placeholder="why? (optional)", layout=w.Layout(width="260px"))
    said = w.HTML("")

    def send(score: float) -> None:
        text = comment.value
        if view.rate(turn_id, score, text) is not None:
            said.value = rated_html(score, text)
            comment.value = ""

    up.on_click(lambda _: send(1))
    down.on_click(lambda _: send(0))
    up.add_class("agentnb-thumb-up")
    down.add_class("agentnb-thumb-down")
    bar = w.HBox([up, down, comment, said])
    bar.add_class("agentnb-rating")
    return bar
