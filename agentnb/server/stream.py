"""``GET /v1/sessions/{id}/stream``: a session's committed events as Server-Sent Events.

One *feed* per followed session, shared by every stream of it: one thread waits for the
store's commit notifications (``SessionStore.wait_for_head``: the in-process wake-up, or
LISTEN/NOTIFY on PostgreSQL; what ``session.log.follow`` waits on) and takes each new batch
once, through a ``Tail``: the events this process committed come by the commit bus as they
were committed (never read back), others' from the store. A second waits for the inbox (the
page's queue). Page streams read the session's one chat fold (``Session.shared_chat``), the
one its view and its snapshots read. The feed makes each frame once, splicing the payload's
canonical text (the text of its store row) into the envelope, and keeps the newest ``RING``
frames; a stream sends the frames after its cursor
from there, or reads older ones from the store by cursor (never a replay). Nothing polls: a
stream sleeps until its feed wakes it, sending ``: keepalive`` every ``KEEPALIVE`` seconds
(a stream whose token is revoked ends within a second: ``agentnb.server.revocations``).

The wire (``text/event-stream``; ``retry:`` first)::

    id: <session_id>:<seq>
    event: committed
    data: {"seq", "event_id", "type", "turn_id", "run_id", "occurred_at", "required", "data"}

``mode=frames`` (the default) filters ``data`` for browsers: the raw model requests,
checkpoints, baselines and agent fingerprints carry ``"data": null, "omitted": true``.
``mode=raw`` sends every payload as committed (the remote client folds them). ``mode=page``
(the chat page) adds, on the last frame of each batch the feed read, ``items``: the chat
items that batch added or changed (``ChatItem`` fields, ``html`` for assistant Markdown
rendered server-side, ``after``: the id of the item before it) and ``removed`` (ids); after
a catch-up read from the store, that frame carries every item instead, with ``"reset":
true``. Events without ``id:`` are not committed and never move the cursor: ``event:
chunk`` (text and tool-call pieces as the model streams them, each with its ``piece``
number: the ``model/chunk`` frame that commits it covers ``[index, index + pieces)``),
``event: state`` (page: the session panel, see ``render.panel``, with the sub-agents' open
requests and their children's live status), ``event: status``
(raw: ``seq``, ``inbox_seq``, ``executing``), and ``event: end`` when the session is
deleted or the token revoked. A server that shuts down just ends the stream: the browser
reconnects with ``Last-Event-ID`` and goes on from there.

A page stream's feed also watches the children of the sub-agent calls its session has open
(one thread each, asleep on the child's commits while its call is open): each commit of a
child sends the panel again, so a card shows the child's progress live and a child's
approval or question shows in its parent's page at once. A grandchild's request shows when
its parent (the child) settles. Each child's own chat is a stream of its own
(``/v1/sessions/{id}/children/{call_id}/stream``).

The start is ``max(after, Last-Event-ID)``; a cursor that is malformed, of another session,
or ahead of the head is refused with a 400 problem ("reload the snapshot") before any header
of the stream is sent.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import anyio.to_thread
import orjson
from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import StreamingResponse

from agentnb.children import children_of, descendant_requests
from agentnb.errors import AgentnbError, InvalidCursor, InvalidInput, SessionNotFound, StorageError
from agentnb.events import Event
from agentnb.folds import ChatFolds
from agentnb.ids import SessionKey
from agentnb.live import LiveEvent
from agentnb.log import Tail
from agentnb.projections.chat import ChatItem, ChatState
from agentnb.projections.state import InboxState
from agentnb.projections.subagents import key_of
from agentnb.records import Child, Interaction
from agentnb.runtime.runtime import Runtime
from agentnb.server.auth import SESSION, Principal, SessionId, current_user, open_session
from agentnb.server.problems import PROBLEM_RESPONSES
from agentnb.server.render import item_json, panel
from agentnb.server.revocations import TokenWatch
from agentnb.session import Session

__all__ = [
    "KEEPALIVE",
    "PRIVATE_TYPES",
    "RETRY_MS",
    "Feed",
    "Feeds",
    "format_cursor",
    "parse_cursor",
    "router",
]

log = logging.getLogger("agentnb.server")

KEEPALIVE = 15.0
"""Seconds between keepalive comments on an idle stream (what proxies need)."""
RETRY_MS = 2000
"""The reconnection delay a browser is told (``retry:``)."""
RING = 1024
"""Frames a feed keeps for streams that join or come back close behind it."""
LINGER = 30.0
"""Seconds a feed with no stream stays (a reloading page finds it warm)."""
READ = 256
"""Events read per store read."""
IDLE_LOOK = 5.0
"""Seconds between a feed's looks at whether the session is executing, with no commit."""
POLL = 1.0
"""Seconds between a feed's reads of the database for other processes' commits (at least
the store's own ``poll_interval``): this process's commits wake it at once, and PostgreSQL's
notifications wake it for the others'. A server on SQLite shows a CLI's or a worker's commit
within this long, however many sessions it streams."""
PRIVATE_TYPES = frozenset(
    {
        "request/prepared",
        "state/checkpoint",
        "state/restored",
        "migration/baseline",
        "agent/bound",
        "agent/changed",
        "context/replaced",
    }
)
"""Types whose payload a browser frame leaves out (raw model requests, working state,
fingerprints): ``"data": null, "omitted": true``."""

Mode = Literal["frames", "page", "raw"]


def format_cursor(session_id: str, seq: int) -> str:
    """``<session_id>:<seq>``: a stream's ``id:`` and a snapshot's ``cursor``."""
    return f"{session_id}:{seq}"


def parse_cursor(text: str | None, session_id: str, head: int) -> int:
    """The seq of a cursor of ``session_id`` at or below ``head``; 0 for None/empty.

    ``InvalidCursor`` for a malformed one, one of another session or one ahead of the head,
    each saying to reload the snapshot.
    """
    if text is None or text == "":
        return 0
    sid, sep, seq_text = text.rpartition(":")
    # ASCII digits only: str.isdigit() takes '²' (which int() refuses) and '٣' (read as 3).
    if not sep or not seq_text.isascii() or not seq_text.isdigit() or len(seq_text) > 18:
        raise InvalidCursor(
            f"cursor {text[:80]!r} is not '<session_id>:<seq>'; reload the snapshot of "
            f"{session_id} and stream after its cursor"
        )
    if sid != session_id:
        raise InvalidCursor(
            f"cursor {text[:80]!r} belongs to another session; reload the snapshot of "
            f"{session_id} and stream after its cursor"
        )
    seq = int(seq_text)
    if seq > head:
        raise InvalidCursor(
            f"cursor {text[:80]!r} is ahead of the session's head ({head}); reload the "
            "snapshot and stream after its cursor"
        )
    return seq


def _json(data: Any) -> str:
    # orjson (the log's codec) writes what the compact standard encoder writes, several
    # times faster. An integer past 64 bits, which it does not take, goes through the
    # standard library.
    try:
        return orjson.dumps(data).decode()
    except TypeError:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _sse(event: str, data: Any, id_: str | None = None) -> str:
    head = f"id: {id_}\n" if id_ is not None else ""
    return f"{head}event: {event}\ndata: {_json(data)}\n\n"


def _committed(session_id: str, event: Event, *, raw: bool, more: dict[str, Any] | None) -> str:
    """The ``committed`` SSE event of ``event``: its envelope encoded here, its payload the
    canonical text the event carries (``Event.payload_json``: the text its store row has),
    spliced in, never encoded again."""
    envelope = {
        "seq": event.seq,
        "event_id": event.event_id,
        "type": event.type,
        "turn_id": event.turn_id,
        "run_id": event.run_id,
        "occurred_at": event.occurred_at.isoformat(),
        "required": event.required,
    }
    head = orjson.dumps(envelope).decode()[:-1]
    if not raw and event.type in PRIVATE_TYPES:
        body = ',"data":null,"omitted":true'
    else:
        body = ',"data":' + event.payload_json
    tail = "}"
    if more:
        tail = "," + _json(more)[1:]
    return (
        f"id: {format_cursor(session_id, event.seq)}\nevent: committed\n"
        f"data: {head}{body}{tail}\n\n"
    )


@dataclass(slots=True)
class Frame:
    """One committed event, encoded once per mode (lazily)."""

    session_id: str
    event: Event
    items: dict[str, Any] | None = None
    """For the page: the item changes of the batch this frame ends."""
    _text: dict[str, str] = field(default_factory=dict)

    @property
    def seq(self) -> int:
        return self.event.seq

    def text(self, mode: Mode, reset: tuple[ChatItem, ...] | None = None) -> str:
        if reset is not None:  # the page's catch-up ends here: every item, once
            every: dict[str, Any] = {"items": _items_of(reset, None), "removed": [], "reset": True}
            return _committed(self.session_id, self.event, raw=False, more=every)
        key = "page" if mode == "page" and self.items else ("raw" if mode == "raw" else "frames")
        text = self._text.get(key)
        if text is None:
            more = self.items if key == "page" else None
            text = self._text[key] = _committed(
                self.session_id, self.event, raw=key == "raw", more=more
            )
        return text


def _items_of(items: tuple[ChatItem, ...], only: set[int] | None) -> list[dict[str, Any]]:
    out = []
    prev: str | None = None
    for item in items:
        if only is None or id(item) in only:
            out.append(item_json(item) | {"after": prev})
        prev = item.id
    return out


def _diff(before: tuple[ChatItem, ...], after: tuple[ChatItem, ...]) -> dict[str, Any] | None:
    """The items a batch added or changed (their new versions) and the ids it removed."""
    old = {id(item) for item in before}
    changed = {id(item) for item in after if id(item) not in old}
    now = {item.id for item in after}
    removed = [item.id for item in before if item.id not in now]
    if not changed and not removed:
        return None
    return {"items": _items_of(after, changed), "removed": removed}


class Subscriber:
    """One open stream of a feed: woken by the feed, reading the feed's state."""

    __slots__ = ("live", "mode", "state_due", "wake")

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self.wake = asyncio.Event()
        self.live: collections.deque[str] = collections.deque(maxlen=4096)
        self.state_due = True


class Feed:
    """The one reader of a followed session's commits in this process (see the module).

    One thread waits on the store's log (a second one on its inbox once a page or raw
    stream wants the panel or the status) and hands what it reads to the event loop, where
    the streams read it. The chat fold (items and the panel) is attached
    when the first page stream comes (``attach_fold``): a feed of raw or browser frames
    never folds. ``fold_from`` is where the fold started; a page stream starting before it
    is owed every item once it reaches the head.
    """

    def __init__(self, feeds: Feeds, session: Session, head: int, inbox_head: int) -> None:
        self.feeds = feeds
        self.session = session
        self.key: SessionKey = session.key
        self.loop = feeds.loop
        # Thread side (the feed's threads, under _lock).
        self._lock = threading.Lock()
        self._pos = head
        self._inbox_pos = inbox_head
        self._fold: ChatFolds | None = None
        """The session's one chat fold (shared with its view and snapshots; page streams)."""
        self._inbox: InboxState | None = None
        self._items: tuple[ChatItem, ...] = ()
        self._executing = session.executing()
        # Loop side (read by the streams).
        self.head = head
        self.ring: collections.deque[Frame] = collections.deque(maxlen=RING)
        self.items: tuple[ChatItem, ...] = ()
        self.fold_from: int | None = None
        """The seq the chat fold started at (None: no page stream yet)."""
        self.state_text = ""
        self.status_text = self._status()
        self.ended: str | None = None
        self.subscribers: set[Subscriber] = set()
        self._linger: asyncio.TimerHandle | None = None
        self._stop = threading.Event()
        self._poll = max(POLL, session.runtime.store.poll_interval)
        self._watched: set[SessionKey] = set()
        """Children a thread watches now (under ``_lock``)."""
        self._unwatch = feeds.runtime.hub.watch(self._on_live, session=self.key)
        store = session.runtime.store
        # Read by the feed's own threads only (each its own): this process's commits come
        # by the bus, not back from the store.
        self._log_tail = Tail(store, self.key, head)
        self._inbox_tail: Tail | None = None
        self._inbox_thread: threading.Thread | None = None
        threading.Thread(
            target=self._follow_log, daemon=True, name=f"agentnb-feed-{self.key.session_id}"
        ).start()

    # -- streams (loop thread) -----------------------------------------------------------

    def subscribe(self, mode: Mode) -> Subscriber:
        sub = Subscriber(mode)
        self.subscribers.add(sub)
        if mode != "frames" and self._inbox_thread is None:
            # The panel and the status follow the inbox too; browser frames do not need it.
            self._inbox_tail = Tail(
                self.session.runtime.store, self.key, self._inbox_pos, inbox=True
            )
            self._inbox_thread = threading.Thread(
                target=self._follow_inbox,
                daemon=True,
                name=f"agentnb-inbox-{self.key.session_id}",
            )
            self._inbox_thread.start()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        if not self.subscribers and self.ended is None and self._linger is None:
            self._linger = self.loop.call_later(LINGER, self._expire)

    def _expire(self) -> None:
        self._linger = None
        if not self.subscribers:
            self.feeds.drop(self)
            self.close()

    def close(self) -> None:
        """Stop the threads (they return within a store wake-up)."""
        self._unwatch()
        self._stop.set()
        self._log_tail.close()
        if self._inbox_tail is not None:
            self._inbox_tail.close()
        with self._lock:
            keys = [self.key, *self._watched]
        with contextlib.suppress(StorageError):  # a closed store woke its waiters itself
            for key in keys:
                self.session.runtime.store.wake_waiters(key)

    def end(self, reason: str) -> None:
        """End every stream of the feed (loop thread)."""
        self.ended = reason
        for sub in self.subscribers:
            sub.wake.set()

    def _wake(self, *, state: bool = False) -> None:
        for sub in self.subscribers:
            if state:
                sub.state_due = True
            sub.wake.set()

    def _publish(
        self, frames: list[Frame], items: tuple[ChatItem, ...], state_text: str, status_text: str
    ) -> None:
        """A batch's frames and the panel/status after it, handed over together: the
        streams wake once and send both in one write."""
        self.ring.extend(frames)
        self.head = frames[-1].seq
        self.items = items
        state = state_text != self.state_text or status_text != self.status_text
        self.state_text, self.status_text = state_text, status_text
        self._wake(state=state)

    def _publish_state(self, state_text: str, status_text: str) -> None:
        changed = state_text != self.state_text or status_text != self.status_text
        self.state_text, self.status_text = state_text, status_text
        if changed:
            self._wake(state=True)

    def _folded(self, fold_from: int, items: tuple[ChatItem, ...], state_text: str) -> None:
        self.fold_from = fold_from
        self.items = items
        self._publish_state(state_text, self.status_text)

    def _on_live(self, event: LiveEvent) -> None:
        # On the runtime's thread: hand it to the loop.
        if event.kind in ("model/chunk", "tool/chunk"):
            self.loop.call_soon_threadsafe(self._live, event)

    def _live(self, event: LiveEvent) -> None:
        data = {"kind": event.kind, "turn_id": event.turn_id, "run_id": event.run_id}
        data.update(event.data)
        try:
            text = _sse("chunk", data)
        except (TypeError, ValueError):
            return  # a tool's progress that is not JSON: committed as its frame anyway
        for sub in self.subscribers:
            sub.live.append(text)
            sub.wake.set()

    # -- reading (the feed's threads) ---------------------------------------------------

    def attach_fold(self) -> None:
        """Fold the chat and the inbox for page streams (a worker thread; once)."""
        with self._lock:
            if self._fold is not None:
                return
        fold, inbox = self.session.shared_chat()
        with self._lock:
            if self._fold is not None:
                return
            self._fold, self._inbox = fold, inbox
            with fold.lock:
                chat = fold.current(self._pos)  # at least the feed's position
                seq, self._items = chat.seq, chat.items
                state = self._page_state()
                self._watch_children()
        self._post(self._folded, seq, self._items, state)

    def _chat(self) -> ChatState:
        """The shared chat fold at the feed's position at least (under its lock)."""
        assert self._fold is not None
        chat: ChatState = self._fold.current(self._pos)
        return chat

    def _page_state(self) -> str:
        """The panel event, under ``_lock`` with a fold attached."""
        assert self._fold is not None
        assert self._inbox is not None
        with self._fold.lock:
            return self._panel(self._chat())

    def _panel(self, chat: ChatState) -> str:
        assert self._inbox is not None
        runtime = self.session.runtime
        calls = self._open_calls()
        asks: dict[str, Interaction] = {}
        children: list[Child] = []
        if calls:
            try:
                asks = descendant_requests(chat.session, self._open_child)
                children = children_of(runtime.store, calls)
            except AgentnbError as exc:  # a child's trouble never ends its parent's stream
                log.info("stream of %s: its children are not readable now: %s", self.key, exc)
        state = panel(
            chat,
            self._inbox,
            executing=self._executing,
            tool=runtime.agent.tool_named,
            descendants=asks,
            children=children,
        )
        return _sse("state", state)

    # -- the children of open sub-agent calls (page streams) ------------------------------

    def _open_calls(self) -> list[Any]:
        """The fold's sub-agent calls without a result yet, under ``_lock``."""
        assert self._fold is not None
        with self._fold.lock:
            children = self._chat().session.children
            return [c for c in children.values() if c.get("status") == "running"]

    def _open_child(self, key: SessionKey) -> Session | None:
        try:
            return self.session.runtime.session_of(key)
        except (SessionNotFound, InvalidInput):
            return None

    def _watch_children(self) -> None:
        """Start a watcher for each open call's child not watched yet; under ``_lock``."""
        if self._fold is None:
            return
        for call in self._open_calls():
            key = key_of(call["child"])
            if key not in self._watched and not self._stop.is_set():
                self._watched.add(key)
                threading.Thread(
                    target=self._follow_child,
                    args=(key,),
                    daemon=True,
                    name=f"agentnb-child-{key.session_id}",
                ).start()

    def _follow_child(self, key: SessionKey) -> None:
        """Send the panel again at each commit of the child ``key``, while its call is open."""
        store = self.session.runtime.store
        pos = -1
        try:
            while not self._stop.is_set():
                with self._lock:
                    if self._fold is None or all(
                        key_of(c["child"]) != key for c in self._open_calls()
                    ):
                        return  # the call has its result: the parent's item says the rest
                if pos >= 0:
                    head = store.wait_for_head(
                        key, pos, IDLE_LOOK, stop=self._stop, poll=self._poll
                    )
                    if self._stop.is_set() or head <= pos:
                        continue
                else:
                    head = store.heads(key)[0]
                pos = head
                with self._lock:
                    texts = self._states()
                self._post(self._publish_state, *texts)
        except AgentnbError as exc:  # gone, or the store is away: the parent's feed goes on
            log.info("stream of %s: stopped watching child %s: %s", self.key, key, exc)
        finally:
            with self._lock:
                self._watched.discard(key)

    def _status(self) -> str:
        """The raw streams' status event, under ``_lock`` (or before the threads)."""
        status = {"seq": self._pos, "inbox_seq": self._inbox_pos, "executing": self._executing}
        return _sse("status", status)

    def _states(self) -> tuple[str, str]:
        page = self._page_state() if self._fold is not None else ""
        return page, self._status()

    def _post(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the loop closed: the server is gone
            self._stop.set()

    def _guarded(self, step: Callable[[], None]) -> None:
        """Run ``step`` until the feed stops; a store that is away is retried after a pause;
        a session that is gone ends the feed."""
        runtime = self.session.runtime
        while not self._stop.is_set():
            try:
                step()
            except SessionNotFound as exc:
                self._post(self.end, f"the session is gone: {exc}")
                return
            except StorageError as exc:
                try:
                    runtime.check_open()
                except StorageError:
                    return  # the runtime (and its store) closed: the server is going
                log.warning("stream of %s: %s; retrying", self.key, exc)
                self._stop.wait(1.0)

    def _follow_log(self) -> None:
        self._guarded(self._log_step)

    def _log_step(self) -> None:
        session = self.session
        store = session.runtime.store
        # ``local``: the feed just read the log to its position; other writers' commits
        # are the poll's (or a notification's) to tell.
        head = store.wait_for_head(
            self.key, self._pos, IDLE_LOOK, stop=self._stop, poll=self._poll, local=True
        )
        if self._stop.is_set():
            return
        if head <= self._pos:
            executing = session.executing()
            if executing != self._executing:
                with self._lock:
                    self._executing = executing
                    texts = self._states()
                self._post(self._publish_state, *texts)
            return
        while not self._stop.is_set():
            events = self._log_tail.read(READ)
            if not events:
                return
            executing = session.executing()
            frames = [Frame(self.key.session_id, e) for e in events]
            with self._lock:
                self._pos = events[-1].seq
                self._executing = executing
                if self._fold is not None:
                    before = self._items
                    with self._fold.lock:
                        # This process's commits it has from the bus; others' come here.
                        self._fold.feed(events)
                        after = self._chat().items  # bounded: the shared fold retires
                    frames[-1].items = _diff(before, after)
                    self._items = after
                    self._watch_children()
                texts = self._states()
                items = self._items
            self._post(self._publish, frames, items, *texts)
            if len(events) < READ:
                return

    def _follow_inbox(self) -> None:
        self._guarded(self._inbox_step)

    def _inbox_step(self) -> None:
        session = self.session
        store = session.runtime.store
        seq = store.wait_for_inbox(
            self.key, self._inbox_pos, IDLE_LOOK, stop=self._stop, poll=self._poll, local=True
        )
        if self._stop.is_set() or seq <= self._inbox_pos:
            return
        with self._lock:
            folding = self._inbox is not None
        tail = self._inbox_tail
        assert tail is not None  # made before the thread
        if folding:
            records = tail.read(1000)
        else:
            tail.skip_to(seq)
            records = []
        executing = session.executing()
        with self._lock:
            if self._inbox is not None:
                for record in records:
                    if record.seq > self._inbox.seq:
                        self._inbox.apply(record)
                self._inbox_pos = max(seq, self._inbox.seq)
            else:
                self._inbox_pos = seq
            self._executing = executing
            texts = self._states()
        self._post(self._publish_state, *texts)


class Feeds:
    """The feeds of this app, by session (created on the first stream, dropped after the
    last one by ``LINGER`` seconds)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._feeds: dict[SessionKey, Feed] = {}
        self._making: dict[SessionKey, asyncio.Future[Feed]] = {}
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]

    async def get(self, session: Session, *, fold: bool = False) -> Feed:
        """The feed of ``session`` (made on first use); ``fold``: with its chat fold."""
        self.loop = asyncio.get_running_loop()
        feed = await self._get(session)
        if fold and feed.fold_from is None:
            await anyio.to_thread.run_sync(feed.attach_fold)
            while feed.fold_from is None:  # the loop takes the fold's state next
                await asyncio.sleep(0)
        return feed

    async def _get(self, session: Session) -> Feed:
        key = session.key
        feed = self._feeds.get(key)
        if feed is not None and feed.ended is None:
            return feed
        making = self._making.get(key)
        if making is not None:
            return await asyncio.shield(making)
        future: asyncio.Future[Feed] = self.loop.create_future()
        self._making[key] = future
        try:
            heads = await anyio.to_thread.run_sync(session.runtime.store.heads, key)
            feed = await anyio.to_thread.run_sync(Feed, self, session, *heads)
            self._feeds[key] = feed
            future.set_result(feed)
            return feed
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it
            raise
        finally:
            del self._making[key]

    def drop(self, feed: Feed) -> None:
        if self._feeds.get(feed.key) is feed:
            del self._feeds[feed.key]

    def close(self) -> None:
        """End every stream (the server is shutting down) and stop the feeds."""
        for feed in list(self._feeds.values()):
            feed.end("shutdown")
            feed.close()
        self._feeds.clear()

    def __len__(self) -> int:
        return len(self._feeds)


async def _catch_up(feed: Feed, pos: int, mode: Mode) -> tuple[list[str], int, bool]:
    """Frames after ``pos`` the ring no longer holds, read from the store by cursor: (their
    text, the new position, whether the page still owes the items reset). The page's last
    frame at the feed's head carries every item instead of a batch's changes."""
    ring = feed.ring
    target = ring[0].seq - 1 if ring else feed.head
    events = await anyio.to_thread.run_sync(
        feed.session.log.read_after, pos, min(READ, target - pos)
    )
    if not events:  # the log is shorter than the feed says: the session went away
        return [], pos, False
    sid = feed.key.session_id
    out = []
    owed = True
    for i, event in enumerate(events):
        last = mode == "page" and i == len(events) - 1 and event.seq == feed.head
        out.append(Frame(sid, event).text(mode, feed.items if last else None))
        owed = owed and not last
    return out, events[-1].seq, owed


def _from_ring(feed: Feed, pos: int, mode: Mode, owed: bool) -> tuple[list[str], int]:
    """The ring's frames after ``pos`` (a page owed the reset gets it on the last one).
    The ring holds contiguous seqs, so the first one wanted is found by its place."""
    ring = feed.ring
    frames = list(itertools.islice(ring, max(0, pos + 1 - ring[0].seq), None))
    out = []
    for i, frame in enumerate(frames):
        last = owed and mode == "page" and i == len(frames) - 1
        out.append(frame.text(mode, feed.items if last else None))
    return out, frames[-1].seq


async def _events(
    feed: Feed,
    sub: Subscriber,
    start: int,
    principal: Principal,
    watch: TokenWatch,
) -> AsyncIterator[str]:
    """The stream of one subscriber (see the module docstring)."""
    mode = sub.mode
    pos = start
    # A page that starts before the fold, or catches up from the store, is owed every item.
    owed = mode == "page" and feed.fold_from is not None and pos < feed.fold_from
    revoked: list[str] = []

    def end(reason: str) -> None:  # the token stopped working (the watch, on the loop)
        revoked.append(reason)
        sub.wake.set()

    release = watch.hold(principal, end)
    try:
        yield f"retry: {RETRY_MS}\n: connected\n\n"
        while True:
            if revoked:
                yield _sse("end", {"reason": revoked[0]})
                return
            out: list[str] = []
            # Live pieces first: one that came before a batch's frames was made before that
            # batch committed it (the loop runs the feed's hand-overs in order), and a client
            # shows pieces only until the frame that commits them arrives.
            while sub.live:
                out.append(sub.live.popleft())
            if sub.state_due:
                sub.state_due = False
                if mode != "frames":
                    out.append(feed.state_text if mode == "page" else feed.status_text)
            if pos < feed.head:
                if feed.ring and feed.ring[0].seq <= pos + 1:
                    texts, pos = _from_ring(feed, pos, mode, owed)
                    owed = False
                else:
                    texts, new, owed = await _catch_up(feed, pos, mode)
                    if new == pos:
                        return
                    pos = new
                out += texts
            if out:
                yield "".join(out)
                continue
            if feed.ended is not None and pos >= feed.head:
                if feed.ended != "shutdown":
                    yield _sse("end", {"reason": feed.ended})
                return
            sub.wake.clear()
            if pos < feed.head or sub.live or sub.state_due or feed.ended is not None:
                continue
            try:
                await asyncio.wait_for(sub.wake.wait(), KEEPALIVE)
            except TimeoutError:
                yield ": keepalive\n\n"
    finally:
        release()
        feed.unsubscribe(sub)


router = APIRouter(tags=["stream"], responses=PROBLEM_RESPONSES)


@router.get(
    f"{SESSION}/stream",
    summary="Follow the session's committed events (Server-Sent Events)",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The event stream (see the module docs of agentnb.server.stream).",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def stream(
    request: Request,
    session_id: SessionId,
    principal: Annotated[Principal, Depends(current_user)],
    after: Annotated[
        str | None, Query(description="a cursor '<session_id>:<seq>' (the snapshot's)")
    ] = None,
    mode: Annotated[Mode, Query(description="frames (browsers), page (the chat page), raw")] = (
        "frames"
    ),
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
) -> StreamingResponse:
    session = await anyio.to_thread.run_sync(open_session, request, session_id, principal)
    head = await anyio.to_thread.run_sync(session.log.head)
    start = max(
        parse_cursor(after, session.key.session_id, head),
        parse_cursor(last_event_id, session.key.session_id, head),
    )
    feeds: Feeds = request.app.state.feeds
    feed = await feeds.get(session, fold=mode == "page")
    sub = feed.subscribe(mode)
    return StreamingResponse(
        _events(feed, sub, start, principal, request.app.state.token_watch),
        media_type="text/event-stream",
        headers={
            "Cache-Control": "no-cache",
            "X-Accel-Buffering": "no",
            "Content-Encoding": "identity",
        },
    )
