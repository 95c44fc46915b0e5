"""Identifiers, session keys and the two small seams tests replace: clock and id factory."""

from __future__ import annotations

import itertools
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from agentnb import _portable
from agentnb.errors import InvalidInput

__all__ = [
    "MAX_ID_LENGTH",
    "Clock",
    "FakeClock",
    "IdFactory",
    "SequentialIds",
    "SessionKey",
    "SystemClock",
    "UUID7Ids",
    "check_id",
    "check_seconds",
    "check_wait",
    "new_id",
]

MAX_ID_LENGTH = 256
_CONTROL = re.compile("[\x00-\x1f\ud800-\udfff]")
"""Control characters, and lone surrogates (no store could encode them)."""


def check_id(value: object, what: str) -> str:
    """Return ``value`` if it is a usable identifier, else raise ``InvalidInput``."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, got {type(value).__name__}")
    if not value or len(value) > MAX_ID_LENGTH:
        raise InvalidInput(f"{what} must be 1..{MAX_ID_LENGTH} characters, got {len(value)}")
    if _CONTROL.search(value):
        raise InvalidInput(
            f"{what} must not contain control characters or lone surrogates: {value!r}"
        )
    return value


def check_seconds(value: object, what: str) -> float:
    """Return ``value`` as positive, finite seconds, else raise ``InvalidInput``."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 < value < float("inf")
    ):
        raise InvalidInput(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def check_wait(value: object, what: str) -> float:
    """Return ``value`` as seconds to wait, 0 or more and finite (0: do not wait), else raise
    ``InvalidInput`` naming ``what``."""
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not 0 <= value < float("inf")
    ):
        raise InvalidInput(
            f"{what} must be 0 or a positive, finite number of seconds (0: do not wait), "
            f"got {value!r}"
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class SessionKey:
    """Identity of one conversation: who owns it, which agent runs it, and its id."""

    namespace: str
    user_id: str
    agent_id: str
    session_id: str

    def __post_init__(self) -> None:
        for name in ("namespace", "user_id", "agent_id", "session_id"):
            check_id(getattr(self, name), name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.user_id}/{self.agent_id}/{self.session_id}"


class Clock(Protocol):
    """Wall-clock seconds since the epoch (leases compare these across processes)."""

    def now(self) -> float: ...


class SystemClock:
    """The real wall clock."""

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to; for deterministic tests and notebooks."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


class IdFactory(Protocol):
    """Makes unique string ids with a readable prefix (``evt``, ``turn``, ``run``...)."""

    def new(self, prefix: str) -> str: ...


_uuid7_lock = threading.Lock()
_uuid7_last = (0, 0)


def _forked() -> None:
    # A forked child draws fresh random bits (its parent goes on counting from the same
    # ones), and the lock another thread held at the fork is nobody's.
    global _uuid7_lock, _uuid7_last
    _uuid7_lock = threading.Lock()
    _uuid7_last = (0, 0)


_portable.at_fork(_forked)


def _uuid7_hex() -> str:
    """A UUIDv7 as 32 hex digits: 48-bit ms timestamp, then a counter-backed random tail.

    Ids made in one process sort in creation order, even within one millisecond.
    """
    global _uuid7_last
    with _uuid7_lock:
        ms = time.time_ns() // 1_000_000
        last_ms, last_rand = _uuid7_last
        if ms <= last_ms:
            ms = last_ms
            rand = last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 6  # 74 random bits
        _uuid7_last = (ms, rand)
    rand_a = (rand >> 62) & 0xFFF
    rand_b = rand & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    return f"{value:032x}"


class UUID7Ids:
    """Time-ordered ids: ``<prefix>_<uuid7 hex>``."""

    def new(self, prefix: str) -> str:
        return f"{prefix}_{_uuid7_hex()}"


class SequentialIds:
    """Deterministic ids ``<prefix>_000001`` ...; one counter per prefix."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()

    def new(self, prefix: str) -> str:
        with self._lock:
            counter = self._counters.setdefault(prefix, itertools.count(1))
            return f"{prefix}_{next(counter):06d}"


_default_ids = UUID7Ids()


def new_id(prefix: str) -> str:
    """A fresh time-ordered id with ``prefix``."""
    return _default_ids.new(prefix)
