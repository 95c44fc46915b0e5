"""Webhooks: ``nb.Webhook(url, *, events=..., secret=...)``, ``Runtime(webhooks=[...])`` and
``agentnb serve --webhook URL``.

A webhook is an export sink (``agentnb.export.ExportSink``): the runtime's live exporter
drains the log into it on its own thread, so a slow or failing receiver never blocks a
turn, and the store keeps its watermark (per session and webhook name), so what is
delivered survives restarts. From that come the guarantees:

* **from the log**: only committed events are sent, each one whose type is in ``events``;
* **at least once, in order per session**: each event is POSTed on its own, in seq order;
  ``accept`` returns (and the watermark moves) only after every one was answered 2xx. A
  failure (a status other than 2xx, a timeout, a refused connection) raises, and the
  exporter retries with exponential backoff from the watermark; deliveries this process
  already made are not repeated, but after a crash the batch in flight is sent again;
* **a delivery id that dedupes**: ``X-Agentnb-Delivery`` is derived from the webhook's name
  and the event id, the same on every attempt and after every restart: a receiver that
  keeps the ids it processed sees each event once;
* **signed**: with a ``secret``, ``X-Agentnb-Signature: sha256=<hex>`` is the HMAC-SHA256 of
  ``"<X-Agentnb-Timestamp>.<body>"`` under the secret (``verify_signature`` checks one).

The body is JSON: ``{"delivery_id", "webhook", "session": {namespace, user_id, agent_id,
session_id}, "seq", "event_id", "type", "turn_id", "run_id", "occurred_at", "data"}``,
``data`` being the event's committed payload. Needs httpx (``pip install -e ".[webhooks]"``).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit

import orjson

from agentnb.errors import InvalidInput, StorageError, install_hint
from agentnb.events import Event
from agentnb.ids import SessionKey
from agentnb.stores.base import RawEvent, Tombstone

__all__ = ["DEFAULT_EVENTS", "Webhook", "delivery_id", "sign", "verify_signature"]

DEFAULT_EVENTS = ("turn/completed", "turn/failed", "interaction/requested")
"""The events a webhook delivers unless told otherwise: a turn ended, a person is needed."""
SIGNATURE_HEADER = "X-Agentnb-Signature"
TIMESTAMP_HEADER = "X-Agentnb-Timestamp"
DELIVERY_HEADER = "X-Agentnb-Delivery"
EVENT_HEADER = "X-Agentnb-Event"


def sign(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """The signature header's value for ``body`` sent at ``timestamp``."""
    key = secret.encode() if isinstance(secret, str) else secret
    mac = hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={mac}"


def verify_signature(
    secret: str | bytes, headers: Mapping[str, str], body: bytes, *, tolerance: float = 300.0
) -> bool:
    """Whether a delivery's headers sign ``body`` under ``secret``, sent within
    ``tolerance`` seconds of now (a receiver's check; constant-time)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    timestamp = lowered.get(TIMESTAMP_HEADER.lower(), "")
    given = lowered.get(SIGNATURE_HEADER.lower(), "")
    try:
        fresh = abs(time.time() - float(timestamp)) <= tolerance
    except ValueError:
        return False
    return fresh and hmac.compare_digest(given, sign(secret, timestamp, body))


def delivery_id(webhook: str, event_id: str) -> str:
    """The id of the delivery of ``event_id`` by the webhook named ``webhook``."""
    return "dlv_" + hashlib.sha256(f"{webhook}\x1f{event_id}".encode()).hexdigest()[:32]


class Webhook:
    """POSTs committed events of the runtime's sessions to ``url`` (module docstring).

    ``events``: the types to deliver (None: every event); ``secret``: signs each delivery;
    ``name``: the key of the store's watermark (default ``webhook:<url>``; give a new name
    to start over from the first event); ``timeout``: seconds one delivery may take;
    ``headers``: sent with every delivery (an ``Authorization``, say).
    """

    def __init__(
        self,
        url: str,
        *,
        events: Iterable[str] | None = DEFAULT_EVENTS,
        secret: str | bytes | None = None,
        name: str | None = None,
        timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(url, str):
            raise InvalidInput(f"Webhook url must be an http(s) URL, got {url!r}")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"Webhook url must be an http:// or https:// URL, got {url!r}")
        if events is not None:
            if isinstance(events, str):
                raise InvalidInput("Webhook events must be a list of event types, not one string")
            events = tuple(events)
            if not events or not all(isinstance(e, str) and "/" in e for e in events):
                raise InvalidInput(
                    f"Webhook events must be event types such as 'turn/completed', got {events!r}"
                )
        if secret is not None and (not isinstance(secret, str | bytes) or not secret):
            raise InvalidInput("Webhook secret must be non-empty text or bytes")
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
            raise InvalidInput(f"Webhook timeout must be positive seconds, got {timeout!r}")
        try:
            import httpx
        except ImportError:
            raise ImportError("webhooks need httpx: " + install_hint("webhooks")) from None
        from agentnb.export.base import sink_name

        self.url = url
        self.events: frozenset[str] | None = None if events is None else frozenset(events)
        self.secret = secret
        self.name = name if name is not None else sink_name("webhook", _shown(url))
        self.headers = dict(headers or {})
        self._client = httpx.Client(timeout=timeout, follow_redirects=False)
        self._delivered: dict[SessionKey, int] = {}
        """The last seq of each session this process delivered (so a retried batch does
        not repeat them)."""
        self.deliveries = 0
        """Deliveries answered 2xx by this object."""

    def accept(self, events: Mapping[SessionKey, Sequence[Event | RawEvent]]) -> None:
        """Deliver the selected events of ``events`` in seq order per session; raises
        ``StorageError`` at the first one the receiver did not take (nothing acknowledged
        from there on)."""
        for key, group in events.items():
            done = self._delivered.get(key, 0)
            for row in group:
                if row.seq <= done:
                    continue
                if self.events is None or row.type in self.events:
                    self._deliver(key, row)
                done = row.seq
                self._delivered[key] = done

    def forget(self, tombstones: Sequence[Tombstone]) -> None:
        """A webhook keeps nothing: deletions need no delivery."""

    def _deliver(self, key: SessionKey, row: Event | RawEvent) -> None:
        import httpx

        delivery = delivery_id(self.name, row.event_id)
        payload = row.payload_json  # the committed text, an Event's or a row's: spliced in
        body = orjson.dumps(
            {
                "delivery_id": delivery,
                "webhook": self.name,
                "session": {
                    "namespace": key.namespace,
                    "user_id": key.user_id,
                    "agent_id": key.agent_id,
                    "session_id": key.session_id,
                },
                "seq": row.seq,
                "event_id": row.event_id,
                "type": row.type,
                "turn_id": row.turn_id,
                "run_id": row.run_id,
                "occurred_at": _iso(row),
                "data": orjson.Fragment(payload.encode()),
            }
        )
        timestamp = f"{time.time():.3f}"
        headers = {
            **self.headers,
            "Content-Type": "application/json",
            "User-Agent": "agentnb-webhook/1",
            DELIVERY_HEADER: delivery,
            EVENT_HEADER: row.type,
            TIMESTAMP_HEADER: timestamp,
        }
        if self.secret is not None:
            headers[SIGNATURE_HEADER] = sign(self.secret, timestamp, body)
        try:
            response = self._client.post(self.url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            raise StorageError(
                f"webhook {self.name}: delivery {delivery} ({row.type}, seq {row.seq} of "
                f"{key}) failed: {type(exc).__name__}; it is retried with backoff"
            ) from None
        if not 200 <= response.status_code < 300:
            raise StorageError(
                f"webhook {self.name}: delivery {delivery} ({row.type}, seq {row.seq} of {key}) "
                f"was answered {response.status_code}; it is retried with backoff"
            )
        self.deliveries += 1

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return f"Webhook({_shown(self.url)!r}, name={self.name!r})"


def _iso(row: Event | RawEvent) -> str:
    when: datetime = row.occurred_at
    return when.astimezone(UTC).isoformat()


def _shown(url: str) -> str:
    """The URL without credentials or query (a token there must not reach logs or names)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def parse_events(text: str | None) -> tuple[str, ...] | None:
    """``--webhook-events a,b`` as a tuple (``*``: every event)."""
    if text is None:
        return DEFAULT_EVENTS
    if text.strip() == "*":
        return None
    return tuple(t.strip() for t in text.split(",") if t.strip())
