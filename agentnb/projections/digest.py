"""The digest of a working context: what a ``state/checkpoint`` says it covers.

A chain over the context's messages, oldest first: ``d0 = ""``, ``d(n+1) = sha256(d(n) +
canonical JSON of message n)``, hex. A chain, so a writer that appends messages extends the
digest it had (each step costs the new messages only); recovery folds the log to the
checkpoint's seq, digests the context it finds there, and compares.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from agentnb.events import Message, canonical_json

__all__ = ["ContextDigest", "extend_digest"]


def extend_digest(digest: str, messages: Iterable[Message]) -> str:
    """``digest`` extended by ``messages`` (from ``""``: the digest of ``messages``)."""
    for message in messages:
        text = digest + canonical_json(message.model_dump(mode="json"))
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return digest


@dataclass(slots=True)
class ContextDigest:
    """A context's digest kept current as messages are appended (a writer's cache).

    It extends what it had when the context only grew since (same compaction count, same
    message at its last position), and starts again otherwise.
    """

    compactions: int = -1
    count: int = 0
    last_id: str | None = None
    digest: str = ""

    def of(self, context: list[Message], compactions: int) -> str:
        grown = (
            compactions == self.compactions
            and len(context) >= self.count
            and (self.count == 0 or context[self.count - 1].id == self.last_id)
        )
        if not grown:
            self.digest, self.count = "", 0
        self.digest = extend_digest(self.digest, context[self.count :])
        self.compactions, self.count = compactions, len(context)
        self.last_id = context[-1].id if context else None
        return self.digest
