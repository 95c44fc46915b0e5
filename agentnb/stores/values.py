"""The values the store port speaks in: records, leases, queries and the bounds it keeps.

Plain frozen data, shared by every role of the port (``agentnb.stores.ports``) and every
backend; ``agentnb.stores.base`` hands every name on.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from agentnb.ids import SessionKey

__all__ = [
    "MAX_BATCH",
    "MAX_LABELS",
    "MAX_LABEL_KEY",
    "MAX_LABEL_VALUE",
    "MAX_LIST_LIMIT",
    "MAX_READ_LIMIT",
    "MAX_TITLE",
    "MAX_TOKEN_LABEL",
    "SCAN_PAGE",
    "UNSET",
    "WORK_KINDS",
    "CatalogueDelta",
    "Lease",
    "LeaseRow",
    "SessionQuery",
    "SessionRecord",
    "TokenRecord",
    "Tombstone",
    "Unset",
    "fold_case",
    "fold_pairs",
]

MAX_READ_LIMIT = 10_000
"""Largest ``limit`` one read accepts; page with ``after`` for more."""
MAX_BATCH = 10_000
"""Largest number of events one ``append`` accepts."""
SCAN_PAGE = 1_000


MAX_LABELS = 32
"""Most labels one session holds."""
MAX_LABEL_KEY = 64
"""Longest label key, in characters."""
MAX_LABEL_VALUE = 256
"""Longest label value, in characters."""
MAX_TITLE = 256
"""Longest title, in characters (a default title is the first task's first line, cut)."""
MAX_LIST_LIMIT = 1_000
"""Largest page ``find_sessions`` returns."""
WORK_KINDS = frozenset({"submit", "steer", "inject", "respond", "resume", "reconcile", "compact"})
"""Inbox commands that start a run or feed one: what an archived session refuses.
(``interrupt`` and ``cancel`` only stop work, and are still accepted.)"""

MAX_TOKEN_LABEL = 256
"""Longest token label, in characters."""


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """A session in the catalogue, with the metadata the store keeps current.

    ``updated_at`` is the time of the last commit to the execution log or metadata change;
    ``last_activity`` also moves with inbox commands. ``turn_status`` is the raw status of
    the latest turn as its log says (``running`` even if its runtime crashed: the caller
    decides the effective status with the lease). ``submits`` counts accepted tasks and
    ``turns`` started ones, so ``submits > turns`` means tasks wait in the queue.
    """

    key: SessionKey
    created_at: float
    updated_at: float = 0.0
    last_activity: float = 0.0
    title: str | None = None
    """Set by the user; None until then (``first_task`` is the default)."""
    labels: dict[str, str] = field(default_factory=dict)
    first_task: str | None = None
    events: int = 0
    turns: int = 0
    bytes: int = 0
    submits: int = 0
    turn_status: str | None = None
    lease_owner: str | None = None
    lease_expires: float = 0.0
    cursor: str = ""
    """Where a page that ends with this record continues (``find_sessions(before=...)``)."""
    archived_at: float | None = None
    """When the session was archived (``set_archived``); None while it is not."""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What stays in the catalogue of a deleted session: who deleted it, when and why."""

    key: SessionKey
    deleted_at: float
    deleted_by: str
    reason: str
    events: int
    """How many events the session held when it was deleted."""
    seq: int = 0
    """Its place in the order of this store's deletions (1, 2, ...): the cursor of
    ``tombstones(after=)``."""


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A bearer token of the service as the store keeps it (never the token itself)."""

    token_id: str
    user_id: str
    """The user every request made with the token acts for."""
    label: str
    created_at: float
    last_used_at: float | None = None
    """When a request last used it (recorded at most once a minute), None before."""
    revoked_at: float | None = None
    expires_at: float | None = None
    """For a browser sign-in: when it stops working; None for a token that does not expire."""
    parent: str | None = None
    """For a browser sign-in: the token it was made with (revoking that one revokes it)."""
    digest: str = field(default="", repr=False)
    """SHA-256 of the token's secret part, hex; compared in constant time."""

    def usable(self, now: float) -> bool:
        """Neither revoked nor expired at ``now``."""
        return self.revoked_at is None and (self.expires_at is None or now < self.expires_at)


@dataclass(frozen=True, slots=True)
class CatalogueDelta:
    """What one committed batch changes in its catalogue record (``decide_catalogue``)."""

    events: int
    turns: int
    bytes: int
    turn_status: str | None
    """The raw status of the latest turn after the batch, None if the batch says nothing."""


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to execute one session; pass it as ``fence`` to fence commits.

    ``epoch`` grows by one each time a new holder takes the lease; a commit carrying an older
    epoch is refused.
    """

    key: SessionKey
    owner: str
    epoch: int
    expires_at: float


class Unset:
    """The default of an argument that was not given (None means something else)."""


UNSET = Unset()


@functools.cache
def _fold_table() -> dict[int, str]:
    # Every character whose lower case is one character (every cased letter but U+0130),
    # mapped alone: no context rules (final sigma), so SQL can do exactly the same.
    table = {}
    for point in range(0x1F000):  # past the last cased letter
        if 0xD800 <= point <= 0xDFFF:
            continue
        char = chr(point)
        lower = char.lower()
        if lower != char:
            table[point] = lower if len(lower) == 1 else lower[0]
    return table


def fold_case(text: str) -> str:
    """``text`` in lower case, one character at a time (``"ÉTÉ"`` → ``"été"``), as session
    search compares texts on every backend (``find_sessions``)."""
    return text.translate(_fold_table())


def fold_pairs() -> tuple[str, str]:
    """The folding of ``fold_case`` as SQL ``translate(text, from, to)`` arguments."""
    table = _fold_table()
    return "".join(map(chr, table)), "".join(table.values())


@dataclass(frozen=True, slots=True)
class SessionQuery:
    """A checked ``find_sessions`` query (what a backend's ``_find_sessions`` gets)."""

    namespace: str | None
    user_id: str | None
    agent_id: str | None
    turn_status: frozenset[str] | None
    labels: dict[str, str] | None
    since: float | None
    until: float | None
    search: str | None
    """Case-folded (``fold_case``)."""
    limit: int
    after: tuple[float, int] | None
    """(listing key, row) of the last record of the previous page, decoded from its
    cursor. The key is ``last_activity``, or a backend's own key that orders the same way
    (SQLite's ``list_key``)."""
    archived: bool | None = False
    """False: live sessions only; True: archived ones only; None: both."""

    def matches(self, record: SessionRecord, row: int) -> bool:
        """The filters as a Python predicate (backends that filter in memory use it)."""
        k = record.key
        return (
            (self.namespace is None or k.namespace == self.namespace)
            and (self.user_id is None or k.user_id == self.user_id)
            and (self.agent_id is None or k.agent_id == self.agent_id)
            and (self.turn_status is None or (record.turn_status or "none") in self.turn_status)
            and (
                self.labels is None
                or all(record.labels.get(n) == v for n, v in self.labels.items())
            )
            and (self.since is None or record.last_activity >= self.since)
            and (self.until is None or record.last_activity < self.until)
            and (
                self.search is None
                or self.search in fold_case(record.title or "")
                or self.search in fold_case(record.first_task or "")
            )
            and (self.after is None or (record.last_activity, row) < self.after)
            and (self.archived is None or (record.archived_at is not None) == self.archived)
        )


@dataclass(frozen=True, slots=True)
class LeaseRow:
    """A session's lease as a backend read it (what ``check_fence`` and friends decide on)."""

    owner: str | None
    epoch: int
    expires_at: float
