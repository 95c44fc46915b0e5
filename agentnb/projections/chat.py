"""The chat projection: what a person sees of a session, as a pure fold of its committed log.

``ChatState`` folds execution-log events into chat *items*, one per visible thing, each with a
stable id:

- a user (or system) message: id = the message id (``msg_...``);
- an assistant reply: id = its ``model_call_id`` (``mc_...``). The item exists from the
  ``model/dispatch`` on; committed ``model/chunk`` text is its unfinished draft, and the final
  ``message/assistant`` (same ``model_call_id``) replaces that draft in place;
- a tool call: id = its ``call_id``. While the model still streams the call and the stream
  has not named the id yet, the card is ``<model_call_id>:<index>``; it takes the call id, in
  the same position, once the assistant message names it. Argument fragments of several calls
  interleave; each card gathers its own by fragment index. A sub-agent call's card becomes a
  ``subagent`` item once its child is spawned (``subagent``: the child's key, agent, task,
  and its status, output and usage once it ended); a ``todo`` call's card a ``plan`` item
  (``plan``: the steps it recorded).

The fold also keeps a ``SessionState`` over the same events, so ``snapshot()`` gives the
transcript messages, pending requests and tasks of exactly the same prefix (one watermark).
``Session.snapshot()`` does the one read; widgets then ``apply`` the events after its
``cursor``. Same events, same JSON (``to_json`` is canonical); applying an event twice, or one
at or below the cursor, changes nothing.

Why it is long: one fold, with one small ``apply`` case per event type a person sees, and
its snapshot dump and load, which must change together.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentnb import html
from agentnb.errors import InvalidInput
from agentnb.events import Event, Message, canonical_json, freeze_json
from agentnb.projections.decisions import effective_status
from agentnb.projections.outcomes import refused, turn_outcome
from agentnb.projections.state import (
    KEEP_TURNS,
    ContextLoader,
    InboxState,
    SessionState,
    TurnState,
    retire_turns,
)
from agentnb.records import Interaction, Task, UsageTotals

__all__ = [
    "IN_FLIGHT",
    "ChatItem",
    "ChatSnapshot",
    "ChatState",
    "interactions_of",
    "tasks_of",
]

IN_FLIGHT = frozenset(
    {"waiting", "streaming", "finishing", "generating", "requested", "allowed", "running"}
)
"""Item statuses that a run ending (interrupted, failed, cancelled) settles."""

_RUN_END = {"interrupted": "interrupted", "failed": "failed", "cancelled": "cancelled"}


@dataclass(frozen=True, slots=True)
class ChatItem:
    """One visible thing of the conversation: a message, an assistant reply or a tool card.

    ``kind`` is ``message``, ``tool``, ``subagent`` (a sub-agent call), ``plan`` (a ``todo``
    call), ``summary`` (where the working context was compacted) or ``agent_changed`` (where a
    runtime that accepts agent changes took the session over: ``text`` says what changed).
    ``status``: for messages ``completed``, or while an assistant reply is drafted
    ``waiting`` (dispatched, nothing streamed yet), ``streaming``, ``finishing``, and
    ``failed`` / ``interrupted`` / ``cancelled`` if it never completed. For tool cards
    ``generating`` (arguments streaming), ``requested``, ``allowed``, ``waiting`` (for a
    person, or a sub-agent's person), ``answered``, ``running``, then the result status
    (``success``, ``error``, ``denied``, ``cancelled``, ``unknown``) or ``interrupted`` /
    ``failed`` when the run stopped with the call open.
    """

    id: str
    kind: str
    role: str
    turn_id: str | None
    run_id: str | None
    seq: int
    """The seq of the first event of this item."""
    status: str
    text: str = ""
    """Message text; for a drafted reply, the committed prefix streamed so far."""
    source: str | None = None
    """For user messages: ``submit``, ``steer``, ``inject`` or ``answer``."""
    model_call_id: str | None = None
    tool_call_ids: tuple[str, ...] = ()
    """For assistant replies: the cards of the calls it makes."""
    tool_name: str | None = None
    arguments: Mapping[str, Any] | None = None
    """The call's arguments once complete (edited arguments once dispatched)."""
    arguments_text: str = ""
    """The raw argument text streamed so far (also while the call is still generated)."""
    progress: tuple[Any, ...] = ()
    """``tool/chunk`` data, in order."""
    result: Mapping[str, Any] | None = None
    """``status``, ``output`` and, when set, ``synthetic`` / ``reconciled`` / ``duration_ms`` /
    ``traceback`` (the tool raised)."""
    request: Mapping[str, Any] | None = None
    """The person-facing request of this call: ``request_id``, ``kind``, ``prompt``,
    ``arguments``, ``status`` (``pending``, ``answered``, ``cancelled``), ``answer``."""
    error: str | None = None
    subagent: Mapping[str, Any] | None = None
    """For a sub-agent call: ``child`` (its session key as data), ``agent_id``, ``name``,
    ``task``, ``status`` (``running`` until the call has its result, then ``completed``,
    ``failed`` or ``cancelled``), ``output``, ``error``, ``usage``."""
    plan: tuple[Mapping[str, Any], ...] = ()
    """For a ``todo`` call: the plan it recorded, step by step (``id``, ``content``,
    ``status``)."""
    hint: str | None = None
    """The newest ``presentation/hint`` about this item (``expand``, ``collapse``, ...)."""
    reasoning: str = ""
    """For assistant replies: the reasoning (thinking) text, streamed so far or final; shown
    as a closed "Thinking" fold."""

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON object (the shape ``to_json`` writes)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "role": self.role,
            "turn_id": self.turn_id,
            "run_id": self.run_id,
            "seq": self.seq,
            "status": self.status,
            "text": self.text,
            "source": self.source,
            "model_call_id": self.model_call_id,
            "tool_call_ids": list(self.tool_call_ids),
            "tool_name": self.tool_name,
            "arguments": self.arguments,
            "arguments_text": self.arguments_text,
            "progress": list(self.progress),
            "result": self.result,
            "request": self.request,
            "error": self.error,
            "subagent": self.subagent,
            "plan": list(self.plan),
            "hint": self.hint,
            "reasoning": self.reasoning,
        }


@dataclass(frozen=True, slots=True)
class ChatSnapshot:
    """What a chat view shows, from one read of the log at one watermark.

    ``items`` (``ChatItem``, oldest first), ``messages`` (the complete committed messages, as
    ``Session.transcript()``), ``pending`` (request_id -> ``Interaction``, as
    ``Session.pending()``), ``tasks`` (as ``Session.tasks()``), and ``cursor``: the seq of the
    last execution-log event covered. Follow the log after ``cursor`` to stay current.
    """

    items: tuple[ChatItem, ...]
    messages: Sequence[Message]
    """Read from the log the first time they are used (a ``LazyMessages``)."""
    pending: dict[str, Interaction]
    tasks: tuple[Task, ...]
    cursor: int

    def _repr_html_(self) -> str:
        return html.chat_snapshot_html(self)

    def to_json(self) -> str:
        """Canonical JSON: the same facts always give the same text."""
        return canonical_json(
            {
                "cursor": self.cursor,
                "items": [item.to_dict() for item in self.items],
                "messages": [m.model_dump(mode="json") for m in self.messages],
                "pending": {rid: _interaction_dict(i) for rid, i in self.pending.items()},
                "tasks": [_task_dict(t) for t in self.tasks],
            }
        )


PROGRESS_KEEP = 100
"""Progress reports a tool card keeps (the newest ones)."""

CHAT_VERSION = 5

ItemsLoader = Callable[[int, int], list["ChatItem"]]
"""(through_seq, count) -> the newest ``count`` chat items of the log at or below that seq."""
"""Bumped whenever the chat fold changes: older snapshots are then ignored and rebuilt."""


def reasoning_text(message: Mapping[str, Any]) -> str:
    """The reasoning text a message object carries, its parts one after another."""
    return "\n\n".join(p.get("text") or "" for p in message.get("reasoning") or () if p.get("text"))


def _plain(value: Any) -> Any:
    """JSON-ready copy of an item field: lists copied, the frozen JSON inside shared.

    Item mappings are frozen (``FrozenDict``, JSON as it is) and never change, so only the
    item's own lists are copied: a deep copy made every snapshot cost more the longer the
    session lived.
    """
    if isinstance(value, list | tuple):
        return list(value)
    return value


class _Item:
    """The mutable working copy of one item; ``frozen()`` caches its ``ChatItem``."""

    __slots__ = (
        "_frozen",
        "arguments",
        "arguments_text",
        "error",
        "hint",
        "id",
        "index",
        "kind",
        "model_call_id",
        "plan",
        "progress",
        "reasoning",
        "request",
        "result",
        "role",
        "run_id",
        "seq",
        "source",
        "status",
        "subagent",
        "text",
        "tool_call_ids",
        "tool_name",
        "turn_id",
    )

    def __init__(
        self, id: str, kind: str, role: str, event: Event, status: str, **fields: Any
    ) -> None:
        self.id = id
        self.kind = kind
        self.role = role
        self.turn_id = event.turn_id
        self.run_id = event.run_id
        self.seq = event.seq
        self.status = status
        self.text = ""
        self.source: str | None = None
        self.model_call_id: str | None = None
        self.tool_call_ids: tuple[str, ...] = ()
        self.tool_name: str | None = None
        self.arguments: Mapping[str, Any] | None = None
        self.arguments_text = ""
        self.progress: list[Any] = []
        self.result: Mapping[str, Any] | None = None
        self.request: Mapping[str, Any] | None = None
        self.error: str | None = None
        self.subagent: Mapping[str, Any] | None = None
        self.plan: list[Any] = []
        self.hint: str | None = None
        self.reasoning = ""
        self.index: int | None = None
        """For a card built from streamed fragments: the fragment index in its reply."""
        for name, value in fields.items():
            setattr(self, name, value)
        self._frozen: ChatItem | None = None

    def frozen(self) -> ChatItem:
        if self._frozen is None:
            self._frozen = ChatItem(
                id=self.id,
                kind=self.kind,
                role=self.role,
                turn_id=self.turn_id,
                run_id=self.run_id,
                seq=self.seq,
                status=self.status,
                text=self.text,
                source=self.source,
                model_call_id=self.model_call_id,
                tool_call_ids=self.tool_call_ids,
                tool_name=self.tool_name,
                arguments=self.arguments,
                arguments_text=self.arguments_text,
                progress=tuple(self.progress),
                result=self.result,
                request=self.request,
                error=self.error,
                subagent=self.subagent,
                plan=tuple(self.plan),
                hint=self.hint,
                reasoning=self.reasoning,
            )
        return self._frozen


_ITEM_FIELDS = tuple(name for name in _Item.__slots__ if name != "_frozen")


class ChatState:
    """Fold of the execution log into chat items. ``apply`` one event at a time, in seq order.

    Pure: no I/O, no clock. Events at or below ``seq`` are ignored, so re-delivered events
    never duplicate text, progress or results.
    """

    def __init__(self) -> None:
        self.seq = 0
        self.session = SessionState()
        """The session fold over the same events (messages, pending requests, turns)."""
        self._items: dict[str, _Item] = {}
        """Working key -> item, in order of appearance. A card's key stays the id it was
        created under; ``_alias`` maps its call id to that key once known."""
        self._alias: dict[str, str] = {}
        self._drafts: dict[str, dict[int, str]] = {}
        """model_call_id -> fragment index -> key of the card it streams."""
        self._by_message: dict[str, str] = {}
        """message id -> item key (assistant replies are keyed by model call)."""
        self._sources: dict[str, str] = {}
        """input_id -> input kind; a user message's id is ``msg_<input_id>``."""
        self._open: set[str] = set()
        """Keys of items whose status is in ``IN_FLIGHT``."""
        self._order: list[str] | None = None
        self.retired_items = 0
        """Items of retired turns (``retire``), no longer kept here."""
        self.items_loader: ItemsLoader | None = None
        """Reads older items from the log (see ``last_items``)."""
        self._older: list[ChatItem] = []
        """Retired items read back so far, oldest first (they never change)."""
        self._auxiliary: set[str] = set()
        """Model calls under way that are auxiliary (a compaction's summariser): folded out
        of the chat, so no reply item is drafted for them."""

    @classmethod
    def fold(cls, events: Iterable[Event]) -> ChatState:
        state = cls()
        for event in events:
            state.apply(event)
        return state

    # -- snapshots (a cache of the fold; see agentnb.folds) ---------------------------------

    def dump(self) -> dict[str, Any]:
        """The whole fold as JSON-ready data; ``load`` gives an equal fold back."""
        items = [
            {name: _plain(getattr(item, name)) for name in _ITEM_FIELDS} | {"key": key}
            for key, item in self._items.items()
        ]
        return {
            "version": CHAT_VERSION,
            "seq": self.seq,
            "session": self.session.dump(),
            "items": items,
            "alias": self._alias,
            "drafts": {mc: {str(i): k for i, k in d.items()} for mc, d in self._drafts.items()},
            "by_message": self._by_message,
            "sources": self._sources,
            "open": sorted(self._open),
            "retired_items": self.retired_items,
            "auxiliary": sorted(self._auxiliary),
        }

    @classmethod
    def load(cls, data: dict[str, Any], context_loader: ContextLoader | None = None) -> ChatState:
        """The fold ``dump`` described; ``ValueError`` if it comes from another version.

        ``context_loader`` reads the messages from the log when first asked for (a snapshot
        does not carry them).
        """
        if data.get("version") != CHAT_VERSION:
            raise ValueError(f"chat snapshot version {data.get('version')} is not {CHAT_VERSION}")
        state = cls()
        state.seq = data["seq"]
        state.session = SessionState.load(data["session"], context_loader)
        for raw in data["items"]:
            item = _Item.__new__(_Item)
            for name in _ITEM_FIELDS:
                setattr(item, name, raw[name])
            item.tool_call_ids = tuple(raw["tool_call_ids"])
            item.progress = list(raw["progress"])
            item.plan = [freeze_json(step) for step in raw["plan"]]
            for name in ("arguments", "result", "request", "subagent"):
                if raw[name] is not None:
                    setattr(item, name, freeze_json(raw[name]))
            item._frozen = None
            state._items[raw["key"]] = item
        state._alias = dict(data["alias"])
        state._drafts = {mc: {int(i): k for i, k in d.items()} for mc, d in data["drafts"].items()}
        state._by_message = dict(data["by_message"])
        state._sources = dict(data["sources"])
        state._open = set(data["open"])
        state.retired_items = data["retired_items"]
        state._auxiliary = set(data["auxiliary"])
        return state

    def retire(self, keep: int = KEEP_TURNS) -> None:
        """Forget the items of finished turns older than the newest ``keep`` (see
        ``retire_turns``); ``last_items`` reads them back from the log when asked."""
        ids = retire_turns(self.session, None, keep)
        if not ids:
            return
        gone = {k for k, item in self._items.items() if item.turn_id in ids}
        for key in gone:
            del self._items[key]
        self.retired_items += len(gone)
        self._alias = {a: k for a, k in self._alias.items() if k not in gone}
        self._drafts = {
            mc: d for mc, d in self._drafts.items() if not gone.intersection(d.values())
        }
        self._by_message = {m: k for m, k in self._by_message.items() if k not in gone}
        self._sources = {i: kind for i, kind in self._sources.items() if f"msg_{i}" not in gone}
        self._open -= gone
        self._order = None
        self._older = []

    # -- reading -----------------------------------------------------------------------------

    @property
    def items(self) -> tuple[ChatItem, ...]:
        """The items, oldest first (unchanged items are the same objects as last time)."""
        return tuple(item.frozen() for item in self._items.values())

    def __len__(self) -> int:
        """Every item of ``(0, seq]``: those kept here and those of retired turns."""
        return len(self._items) + self.retired_items

    def last_items(self, n: int) -> tuple[ChatItem, ...]:
        """The newest ``n`` items, oldest first, without freezing the others.

        Past the items kept here, older ones are read from the log (``items_loader``) by
        page and kept: those of retired turns never change.
        """
        if n <= 0:
            return ()
        keys = self._order
        if keys is None or len(keys) != len(self._items):
            keys = self._order = list(self._items)
        newest = tuple(self._items[k].frozen() for k in keys[-n:])
        wanted = min(n - len(newest), self.retired_items)
        if wanted <= 0 or self.items_loader is None:
            return newest
        if len(self._older) < wanted:
            self._older = self.items_loader(self.session.retired_through, wanted)
        return tuple(self._older[-wanted:]) + newest

    def to_json(self) -> str:
        """Canonical JSON of the fold (cursor, items, messages, pending requests)."""
        return canonical_json(
            {
                "cursor": self.seq,
                "items": [item.to_dict() for item in self.items],
                "messages": [m.model_dump(mode="json") for m in self.session.context],
                "pending": {
                    rid: _interaction_dict(i) for rid, i in interactions_of(self.session).items()
                },
            }
        )

    def snapshot(self, inbox: InboxState | None = None, *, executing: bool = False) -> ChatSnapshot:
        """The ``ChatSnapshot`` at ``seq``; ``inbox`` adds the tasks still queued there.

        ``executing`` says whether some runtime holds the session's lease now: a run left
        open without one was cut off, and its task shows as ``interrupted`` (``tasks()`` rule).
        """
        state = self.session
        return ChatSnapshot(
            items=self.items,
            messages=state.transcript_through(self.seq),
            pending=interactions_of(state),
            tasks=tuple(tasks_of(state, inbox, executing=executing)),
            cursor=self.seq,
        )

    # -- the fold ----------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if event.seq and event.seq <= self.seq:
            return
        self.session.apply(event)
        self.seq = event.seq
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event, event.payload)

    def _on_compaction_end(self, event: Event, p: Any) -> None:
        """A marker where the working context was compacted (history keeps every message)."""
        if p.get("status") != "completed":
            return
        key = f"cmp_{p.get('compaction_id') or event.seq}"
        replaced = (p.get("before_count") or 0) - (p.get("after_count") or 0) + 1
        text = p.get("summary") or (
            f"{replaced} earlier messages were removed from the context the model sees"
        )
        self._add(key, _Item(key, "summary", "system", event, "completed", text=text))

    def _on_agent_changed(self, event: Event, p: Any) -> None:
        """A marker where the session's agent changed (``agent/changed``): what differs."""
        key = f"agc_{event.event_id}"
        changes = p.get("changes") or ()
        text = "; ".join(str(c) for c in changes) or str(p.get("reason") or "")
        self._add(key, _Item(key, "agent_changed", "system", event, "completed", text=text))

    def _add(self, key: str, item: _Item) -> _Item:
        self._items[key] = item
        if self._order is not None:
            self._order.append(key)
        if item.status in IN_FLIGHT:
            self._open.add(key)
        return item

    def _set(self, key: str, item: _Item, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(item, name, value)
        item._frozen = None
        if item.status in IN_FLIGHT:
            self._open.add(key)
        else:
            self._open.discard(key)

    def _key_of_call(self, call_id: str) -> str | None:
        key = self._alias.get(call_id, call_id)
        return key if key in self._items else None

    def _card(self, event: Event, call_id: str, name: str | None) -> tuple[str, _Item]:
        """The card of ``call_id``, created (``requested``) if it was not streamed."""
        key = self._key_of_call(call_id)
        if key is None:
            key = call_id
            self._add(key, _Item(call_id, "tool", "tool", event, "requested", tool_name=name))
        return key, self._items[key]

    def _on_message(self, event: Event, p: Any) -> None:
        message = p["message"]
        role = message["role"]
        if role == "assistant":
            self._on_assistant(event, p, message)
            return
        key = message["id"]
        if key in self._items:
            return
        input_id = key[4:] if key.startswith("msg_") else key
        self._add(
            key,
            _Item(
                key,
                "message",
                role,
                event,
                "completed",
                text=message.get("text") or "",
                source=self._sources.get(input_id),
            ),
        )

    def _reply(self, event: Event, model_call_id: str) -> tuple[str, _Item]:
        item = self._items.get(model_call_id)
        if item is None:
            item = self._add(
                model_call_id,
                _Item(
                    model_call_id,
                    "message",
                    "assistant",
                    event,
                    "waiting",
                    model_call_id=model_call_id,
                ),
            )
        return model_call_id, item

    def _on_request_prepared(self, event: Event, p: Any) -> None:
        if self.session.auxiliary(p):
            self._auxiliary.add(p["model_call_id"])

    def _folded_out(self, p: Any, *, ended: bool = False) -> bool:
        """Whether a ``model/*`` event is of an auxiliary call (kept out of the chat)."""
        model_call_id = p["model_call_id"]
        if model_call_id not in self._auxiliary and model_call_id not in self._items:
            if not self.session.compacting:
                return False
            self._auxiliary.add(model_call_id)  # a summariser call logged before ``purpose``
        if model_call_id not in self._auxiliary:
            return False
        if ended:
            self._auxiliary.discard(model_call_id)
        return True

    def _on_model_dispatch(self, event: Event, p: Any) -> None:
        if self._folded_out(p):
            return
        key, item = self._reply(event, p["model_call_id"])
        # A retried call streams again from the start: its earlier draft is discarded.
        self._set(
            key, item, text="", reasoning="", status="waiting", run_id=event.run_id, error=None
        )
        for card_key in self._drafts.get(key, {}).values():
            card = self._items[card_key]
            self._set(card_key, card, arguments_text="", arguments=None, status="generating")

    def _on_model_chunk(self, event: Event, p: Any) -> None:
        if self._folded_out(p):
            return
        key, item = self._reply(event, p["model_call_id"])
        if item.status not in {"waiting", "streaming"}:
            return  # a completed reply is never overwritten by its draft
        thought = "".join(f.get("text", "") for f in p.get("reasoning_fragments", ()))
        self._set(
            key,
            item,
            text=item.text + p.get("text", ""),
            reasoning=item.reasoning + thought,
            status="streaming",
        )
        drafts = self._drafts.setdefault(key, {})
        for fragment in p.get("tool_call_fragments", ()):
            index = fragment["index"]
            card_key = drafts.get(index)
            call_id = fragment.get("call_id")
            if card_key is None:
                card_key = drafts[index] = call_id or f"{key}:{index}"
                self._add(
                    card_key,
                    _Item(
                        card_key,
                        "tool",
                        "tool",
                        event,
                        "generating",
                        model_call_id=key,
                        index=index,
                    ),
                )
            card = self._items[card_key]
            fields: dict[str, Any] = {
                "arguments_text": card.arguments_text + fragment.get("arguments_delta", "")
            }
            if fragment.get("name"):
                fields["tool_name"] = fragment["name"]
            parsed = _parse_object(fields["arguments_text"])
            if parsed is not None:
                fields["arguments"] = parsed
            if call_id and card.id != call_id:
                fields["id"] = call_id
                self._alias[call_id] = card_key
            self._set(card_key, card, **fields)

    def _on_model_end(self, event: Event, p: Any) -> None:
        if self._folded_out(p, ended=True):
            return
        key = p["model_call_id"]
        item = self._items.get(key)
        if item is None or item.status not in {"waiting", "streaming"}:
            return
        status = {"completed": "finishing", "failed": "failed", "cancelled": "interrupted"}
        self._set(key, item, status=status[p["status"]], error=p.get("error"))
        if p["status"] != "completed":
            for card_key in self._drafts.get(key, {}).values():
                card = self._items[card_key]
                if card.status == "generating":
                    self._set(card_key, card, status=status[p["status"]])

    def _on_assistant(self, event: Event, p: Any, message: Mapping[str, Any]) -> None:
        key = p.get("model_call_id") or message["id"]
        key, item = self._reply(event, key)
        calls = message.get("tool_calls") or ()
        self._by_message[message["id"]] = key
        # Streamed cards pair with the final calls in fragment-index order (how the stream
        # collector builds them); cards the final message does not have are dropped.
        drafts = self._drafts.pop(key, {})
        streamed = [drafts[i] for i in sorted(drafts)]
        for card_key in streamed[len(calls) :]:
            del self._items[card_key]
            self._open.discard(card_key)
            self._order = None
        for n, call in enumerate(calls):
            if n < len(streamed):
                card_key = streamed[n]
                self._alias[call["call_id"]] = card_key
                self._set(
                    card_key,
                    self._items[card_key],
                    id=call["call_id"],
                    tool_name=call["name"],
                    arguments=call.get("arguments") or freeze_json({}),
                    status="requested",
                    index=None,
                )
            else:
                card_key, card = self._card(event, call["call_id"], call["name"])
                self._set(card_key, card, arguments=call.get("arguments") or freeze_json({}))
        self._set(
            key,
            item,
            text=message.get("text") or "",
            reasoning=reasoning_text(message),
            status="completed",
            tool_call_ids=tuple(c["call_id"] for c in calls),
            run_id=event.run_id or item.run_id,
            error=None,
        )

    def _on_turn_output(self, event: Event, p: Any) -> None:
        message = p["message"]
        key = self._by_message.get(message["id"])
        if key is not None:
            item = self._items[key]
            self._set(key, item, text=message.get("text") or "", status="completed")

    def _on_input_received(self, event: Event, p: Any) -> None:
        self._sources[p["input_id"]] = p["kind"]

    def _on_tool_requested(self, event: Event, p: Any) -> None:
        key, card = self._card(event, p["call_id"], p["name"])
        self._set(
            key,
            card,
            tool_name=p["name"],
            arguments=p.get("arguments") or freeze_json({}),
            status="requested",
        )

    def _on_tool_decision(self, event: Event, p: Any) -> None:
        key = self._key_of_call(p["call_id"])
        if key is None:
            return
        card = self._items[key]
        decision = p["decision"]
        status = {"allowed": "allowed", "suspended": "waiting", "denied": "denied"}[decision]
        self._set(key, card, status=status, error=p.get("reason") if decision == "denied" else None)

    def _on_tool_dispatch(self, event: Event, p: Any) -> None:
        key, card = self._card(event, p["call_id"], p["name"])
        self._set(
            key,
            card,
            tool_name=p["name"],
            arguments=p.get("arguments") or freeze_json({}),
            status="running",
            run_id=event.run_id,
            progress=[],  # a re-run reports its own progress
        )

    def _on_tool_chunk(self, event: Event, p: Any) -> None:
        key = self._key_of_call(p["call_id"])
        if key is None:
            return
        card = self._items[key]
        # A card keeps its latest PROGRESS_KEEP reports: what a view shows, and a bound on
        # the fold's size however chatty a tool is (every report stays in the log).
        self._set(key, card, progress=[*card.progress[-(PROGRESS_KEEP - 1) :], p.get("data")])

    def _on_action_end(self, event: Event, p: Any) -> None:
        key = self._key_of_call(p["call_id"])
        if key is not None and p["status"] == "interrupted":
            self._set(key, self._items[key], status="interrupted")
        elif key is not None and p["status"] == "suspended":  # its sub-agent waits for a person
            self._set(key, self._items[key], status="waiting")

    def _on_subagent_spawned(self, event: Event, p: Any) -> None:
        key, card = self._card(event, p["call_id"], p.get("name"))
        info = {
            "child": p["child"],
            "agent_id": p["agent_id"],
            "name": p.get("name"),
            "task": p["task"],
            "status": "running",
        }
        self._set(key, card, kind="subagent", subagent=freeze_json(info))

    def _on_subagent_completed(self, event: Event, p: Any) -> None:
        key = self._key_of_call(p["call_id"])
        if key is None:
            return
        card = self._items[key]
        info = dict(card.subagent or {"child": p["child"]})
        info.update(
            status=p["status"], output=p.get("output"), error=p.get("error"), usage=p.get("usage")
        )
        self._set(key, card, kind="subagent", subagent=freeze_json(info))

    def _on_presentation_hint(self, event: Event, p: Any) -> None:
        target = p.get("target")
        key = self._key_of_call(target) if target else None
        if key is not None:
            self._set(key, self._items[key], hint=p["hint"])

    def _on_plan_changed(self, event: Event, p: Any) -> None:
        call_id = p.get("call_id")
        key = self._key_of_call(call_id) if call_id else None
        if key is None:
            key = f"plan_{event.seq}"
            self._add(key, _Item(key, "plan", "tool", event, "success", tool_name="todo"))
        self._set(key, self._items[key], kind="plan", plan=list(p["items"]))

    def _on_tool_result(self, event: Event, p: Any) -> None:
        key, card = self._card(event, p["call_id"], p["name"])
        result: dict[str, Any] = {"status": p["status"], "output": p.get("output", "")}
        for flag in ("synthetic", "reconciled"):
            if p.get(flag):
                result[flag] = True
        if p.get("duration_ms") is not None:
            result["duration_ms"] = p["duration_ms"]
        if p.get("traceback"):
            result["traceback"] = p["traceback"]
        if p.get("blocks"):  # a rich result: the page and the view show its blocks
            result["blocks"] = p["blocks"]
        self._set(key, card, result=freeze_json(result), status=p["status"])

    def _on_interaction_requested(self, event: Event, p: Any) -> None:
        call_id = p.get("call_id")
        request = freeze_json(
            {
                "request_id": p["request_id"],
                "kind": p["kind"],
                "prompt": p.get("prompt"),
                "arguments": p.get("arguments") or {},
                "status": "pending",
            }
        )
        if call_id is None:  # a request of no tool call: its own card
            key = p["request_id"]
            if key not in self._items:
                self._add(key, _Item(key, "tool", "tool", event, "waiting", request=request))
            return
        key, card = self._card(event, call_id, p.get("tool_name"))
        self._set(key, card, request=request, status="waiting")

    def _on_interaction_resolved(self, event: Event, p: Any) -> None:
        request = self.session.interactions.get(p["request_id"], {})
        key = self._key_of_call(request.get("call_id") or p["request_id"])
        if key is None:
            return
        card = self._items[key]
        done = dict(card.request or {}, status=p["status"], answer=p.get("answer") or {})
        status = card.status
        if status == "waiting":
            status = "answered" if p["status"] == "answered" else "cancelled"
        self._set(key, card, request=freeze_json(done), status=status)

    def _settle(self, run_id: str | None, turn_id: str | None, status: str) -> None:
        """Items of a run (or turn) that were still in flight take the way it ended."""
        for key in list(self._open):
            item = self._items[key]
            if (run_id is not None and item.run_id == run_id) or (
                run_id is None and turn_id is not None and item.turn_id == turn_id
            ):
                waits = item.kind in {"tool", "subagent"}  # for its person, or its sub-agent's
                if item.status == "waiting" and waits and status != "cancelled":
                    continue  # still waits for its person
                self._set(key, item, status=status)

    def _on_run_end(self, event: Event, p: Any) -> None:
        status = _RUN_END.get(p["status"])
        if status is not None:
            self._settle(event.run_id, None, status)

    def _on_recovery(self, event: Event, p: Any) -> None:
        for run_id in p.get("interrupted_runs", ()):
            self._settle(run_id, None, "interrupted")

    def _on_turn_cancelled(self, event: Event, p: Any) -> None:
        self._settle(None, event.turn_id, "cancelled")


_HANDLERS = {
    "agent/changed": ChatState._on_agent_changed,
    "compaction/end": ChatState._on_compaction_end,
    "message/user": ChatState._on_message,
    "message/assistant": ChatState._on_message,
    "request/prepared": ChatState._on_request_prepared,
    "model/dispatch": ChatState._on_model_dispatch,
    "model/chunk": ChatState._on_model_chunk,
    "model/end": ChatState._on_model_end,
    "turn/output": ChatState._on_turn_output,
    "input/received": ChatState._on_input_received,
    "tool/requested": ChatState._on_tool_requested,
    "tool/decision": ChatState._on_tool_decision,
    "tool/dispatch": ChatState._on_tool_dispatch,
    "tool/chunk": ChatState._on_tool_chunk,
    "tool/result": ChatState._on_tool_result,
    "action/end": ChatState._on_action_end,
    "subagent/spawned": ChatState._on_subagent_spawned,
    "subagent/completed": ChatState._on_subagent_completed,
    "plan/changed": ChatState._on_plan_changed,
    "presentation/hint": ChatState._on_presentation_hint,
    "interaction/requested": ChatState._on_interaction_requested,
    "interaction/resolved": ChatState._on_interaction_resolved,
    "run/end": ChatState._on_run_end,
    "recovery/applied": ChatState._on_recovery,
    "turn/cancelled": ChatState._on_turn_cancelled,
}


# --------------------------------------------------------------------------------------------
# Pending requests and tasks, as the Session facade reports them


def interactions_of(state: SessionState) -> dict[str, Interaction]:
    """The open requests of ``state`` as ``Interaction`` records (``Session.pending()``)."""
    return {
        rid: Interaction(
            rid,
            r["kind"],
            r["turn_id"],
            r.get("call_id"),
            r.get("tool_name"),
            dict(r.get("arguments") or {}),
            r.get("prompt"),
        )
        for rid, r in state.pending.items()
    }


def tasks_of(state: SessionState, inbox: InboxState | None, *, executing: bool) -> list[Task]:
    """One task per turn, in submission order (``Session.tasks()``).

    With ``inbox``, submits not started yet show as ``queued`` (or ``cancelled``) and every
    task's ``created_at`` is its acceptance time; without it only started turns are listed.
    """
    out: list[Task] = []
    if inbox is None:
        return [_task(state, t, t.created_at, executing) for t in state.turns.values()]
    # The two folds may have retired different old turns (see ``retire_turns``): turns whose
    # submit the inbox no longer holds come first; submits older than the state's oldest
    # kept turn belong to turns the state retired, not to queued work.
    submits = {c.turn_id for c in inbox.commands.values() if c.kind == "submit"}
    for kept in state.turns.values():
        if kept.turn_id not in submits:
            out.append(_task(state, kept, kept.created_at, executing, inbox))
    oldest = next(iter(state.turns.values()), None) if state.retired_turns else None
    first = inbox.commands.get(oldest.command_id or "") if oldest is not None else None
    for command in inbox.commands.values():
        if command.kind != "submit" or command.turn_id is None:
            continue
        turn = state.turns.get(command.turn_id)
        if turn is None and first is not None and command.seq < first.seq:
            continue  # a turn the state retired
        if turn is None:
            outcome = refused(inbox, command.command_id, command.turn_id)
            out.append(
                Task(
                    command.turn_id,
                    "queued" if outcome is None else outcome.status,
                    command.input or "",
                    (),
                    command.accepted_at,
                    None,
                    None,
                    None if outcome is None else outcome.error,
                    outcome=outcome,
                    command_id=command.command_id,
                )
            )
            continue
        out.append(_task(state, turn, command.accepted_at, executing, inbox))
    return out


def _task(
    state: SessionState,
    turn: TurnState,
    created_at: datetime | None,
    executing: bool,
    inbox: InboxState | None = None,
) -> Task:
    return Task(
        turn.turn_id,
        effective_status(state, turn, executing=executing),
        turn.input,
        tuple(turn.run_ids),
        created_at,
        turn.started_at,
        turn.ended_at,
        turn.error,
        UsageTotals.of(turn.usage),
        outcome=turn_outcome(
            state, inbox or InboxState(), turn.turn_id, turn.command_id, executing=executing
        ),
        command_id=turn.command_id,
    )


def _parse_object(text: str) -> Mapping[str, Any] | None:
    """Streamed argument text as a JSON object once it is one (else None: still partial)."""
    if not text.endswith("}"):
        return None
    try:
        value = json.loads(text)
        if not isinstance(value, dict):
            return None
        frozen: Mapping[str, Any] = freeze_json(value)
    except (ValueError, InvalidInput):  # partial, or JSON the log could not carry
        return None
    return frozen


def _interaction_dict(i: Interaction) -> dict[str, Any]:
    return {
        "request_id": i.request_id,
        "kind": i.kind,
        "turn_id": i.turn_id,
        "call_id": i.call_id,
        "tool_name": i.tool_name,
        "arguments": i.arguments,
        "prompt": i.prompt,
    }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _task_dict(t: Task) -> dict[str, Any]:
    return {
        "turn_id": t.turn_id,
        "status": t.status,
        "input": t.input,
        "run_ids": list(t.run_ids),
        "created_at": _iso(t.created_at),
        "started_at": _iso(t.started_at),
        "ended_at": _iso(t.ended_at),
        "error": t.error,
    }
