"""Export watermarks: how far each sink holds a session's log, only ever forward.

``advance_watermark``
    Monotonic: moving backwards is a no-op that returns the current value.
"""

from __future__ import annotations

from abc import abstractmethod

from agentnb.errors import InvalidInput
from agentnb.ids import SessionKey, check_id
from agentnb.stores.core import guarded
from agentnb.stores.decisions import (
    check_key,
    check_seq,
)
from agentnb.stores.ports.log import EventLog

__all__ = ["Watermarks"]


class Watermarks(EventLog):
    """Per session and sink, the highest seq the sink holds durably."""

    @guarded
    def watermark(self, key: SessionKey, sink: str) -> int:
        """Highest seq the sink named ``sink`` holds durably (0 if none)."""
        key = check_key(key)
        check_id(sink, "sink")
        return self._watermark(key, sink)

    @guarded
    def advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int:
        """Move the watermark up to ``seq``; never backwards. Returns the value now stored."""
        key = check_key(key)
        check_id(sink, "sink")
        check_seq(seq, "seq")
        head = self._head(key)
        if seq > head:
            raise InvalidInput(f"session {key}: watermark {seq} is past the head {head}")
        return self._advance_watermark(key, sink, seq)

    @guarded
    def watermarks(self, key: SessionKey) -> dict[str, int]:
        """Every export sink's watermark of the session, by sink name (what a backup or a
        migration carries over, ``agentnb.ops``)."""
        return self._watermarks(check_key(key))

    # -- what a backend implements -----------------------------------------------------------

    @abstractmethod
    def _watermark(self, key: SessionKey, sink: str) -> int: ...

    @abstractmethod
    def _advance_watermark(self, key: SessionKey, sink: str, seq: int) -> int: ...

    @abstractmethod
    def _watermarks(self, key: SessionKey) -> dict[str, int]: ...
