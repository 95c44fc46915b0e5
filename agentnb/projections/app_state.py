"""The application states of a session: each registered reducer's fold of its event type.

``register_event_type(name, reducer=fn)`` makes ``fn(state, event) -> dict`` fold every
event of ``name`` into ``session.app_state(name)``. ``AppStates`` is that piece of the
session's fold: it rides in ``SessionState`` (so the shared folds and their snapshots carry
it) and is rebuilt from the log like the rest. A fold remembers which reducers it folds
with (those registered when it started, or those of the dump it was loaded from): a stored
snapshot folded by another set than the one registered now is set aside by its reader
(``check_current``), so the log is folded anew with the reducers in force. No I/O here.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from typing import Any

from agentnb.errors import ReducerFailed, describe
from agentnb.events import Event, freeze_json, reducers

__all__ = ["AppStates", "reduce"]

log = logging.getLogger("agentnb.events")


def reduce(name: str, state: Mapping[str, Any], event: Event) -> dict[str, Any]:
    """The reducer of ``name`` applied to (a copy of) ``state``; ``ReducerFailed`` when it
    raises or returns something that is not a JSON object."""
    reducer = reducers().get(name)
    if reducer is None:
        return dict(state)
    try:
        new = reducer(copy.deepcopy(dict(state)), event)
        if not isinstance(new, Mapping):
            raise TypeError(f"it returned {type(new).__name__}, not a dict")
        return dict(freeze_json(_plain(new)))
    except Exception as exc:
        raise ReducerFailed(
            f"the reducer of {name!r} raised on seq {event.seq}: {describe(exc)}"
        ) from exc


def _plain(value: Any) -> Any:
    """Frozen JSON back to plain dicts and lists (what the next reducer call is given)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class AppStates:
    """name -> the state its reducer folded so far; ``failed`` holds why a fold stopped."""

    def __init__(self) -> None:
        self.states: dict[str, dict[str, Any]] = {}
        self.failed: dict[str, str] = {}
        """name -> why its reducer raised on a ``required`` event (the state stays as it was
        before it; ``session.app_state`` then refuses to answer)."""
        self.reducers = frozenset(reducers())
        """The reducers in force when this fold started (a snapshot is only good for them)."""

    def apply(self, event: Event) -> None:
        name = event.type
        if name not in self.reducers:
            return
        try:
            self.states[name] = reduce(name, self.states.get(name, {}), event)
        except ReducerFailed as exc:
            if event.required:
                self.failed.setdefault(name, str(exc))
            log.warning("%s; app state %r left as it was", exc, name)

    def get(self, name: str) -> dict[str, Any]:
        """A copy of the state of ``name`` (``{}`` before its first event)."""
        if name in self.failed:
            raise ReducerFailed(
                f"app state {name!r} could not be rebuilt: {self.failed[name]}; fix the "
                "reducer (it must accept every event the log holds) and open the session again"
            )
        return _plain(self.states.get(name, {}))  # type: ignore[no-any-return]

    def dump(self) -> dict[str, Any]:
        return {
            "reducers": sorted(self.reducers),
            "states": {n: _plain(s) for n, s in self.states.items()},
            "failed": dict(self.failed),
        }

    def check_current(self) -> None:
        """``ValueError`` unless this fold's reducers are the ones registered now."""
        if self.reducers != frozenset(reducers()):
            raise ValueError("the app states were folded by other reducers than those registered")

    @classmethod
    def load(cls, data: Mapping[str, Any] | None) -> AppStates:
        """The states ``dump`` described, folding on with the reducers that folded them."""
        app = cls()
        data = data or {}
        app.reducers = frozenset(data.get("reducers") or ())
        app.states = {n: dict(s) for n, s in (data.get("states") or {}).items()}
        app.failed = dict(data.get("failed") or {})
        return app
