"""History pages: bounded, signed, snapshot-pinned pages of a session's committed messages."""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb import history
from agentnb.errors import (
    CrossSessionCursor,
    ExpiredCursor,
    HistoryTooLarge,
    InvalidCursor,
    InvalidInput,
    InvalidLimit,
    SessionNotFound,
)
from agentnb.events import Event, Message
from agentnb.history import MAX_LIMIT, HistoryPage, HistoryPages, read_history
from agentnb.ids import SessionKey, new_id
from agentnb.projections.state import SessionState
from agentnb.stores import MemoryStore, SessionStore
from agentnb.stores.sqlite import SQLiteStore

KEY = SessionKey("default", "alice", "agent", "s1")
OTHER = SessionKey("default", "alice", "agent", "s2")


# --------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SessionStore]:
    """Every behaviour is checked on each backend, with sessions KEY and OTHER created."""
    s: SessionStore = (
        MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "h.sqlite")
    )
    s.create_session(KEY)
    s.create_session(OTHER)
    try:
        yield s
    finally:
        s.close()


def commit(store: SessionStore, events: list[Event], key: SessionKey = KEY) -> None:
    store.append(key, events, expected_seq=store.head(key), batch_id=new_id("batch"))


def message(role: str, mid: str, text: str = "", **extra: Any) -> dict[str, Any]:
    return {"message": {"id": mid, "role": role, "text": text, **extra}}


def lifecycle(store: SessionStore, count: int, key: SessionKey = KEY) -> None:
    """Append ``count`` events that carry no message."""
    commit(
        store,
        [Event.create("step/start", {"step_id": f"s{i}", "iteration": i}) for i in range(count)],
        key,
    )


def add_turn(store: SessionStore, n: int, *, tools: int = 1, key: SessionKey = KEY) -> int:
    """Append one realistic turn; returns how many messages it holds (3 + tools)."""
    tid, rid = f"turn_{n}", f"run_{n}"

    def ev(type_: str, payload: dict[str, Any]) -> Event:
        return Event.create(type_, payload, turn_id=tid, run_id=rid)

    mc = {"model_call_id": f"mc_{n}"}
    events = [
        ev("turn/start", {"input": f"task {n}"}),
        ev("run/start", {}),
        ev("message/user", message("user", f"msg_u{n}", f"task {n}", turn_id=tid)),
        ev("step/start", {"step_id": f"step_{n}", "iteration": 1}),
        ev("model/dispatch", mc),
        ev("model/chunk", {**mc, "index": 0, "text": "thinking"}),
        ev("model/end", {**mc, "status": "completed", "model": "scripted"}),
    ]
    calls = [
        {"call_id": f"call_{n}_{i}", "name": "lookup", "arguments": {"i": i}} for i in range(tools)
    ]
    if calls:
        events.append(ev("message/assistant", message("assistant", f"msg_c{n}", tool_calls=calls)))
    for call in calls:
        result = {"call_id": call["call_id"], "name": "lookup", "status": "success"}
        events += [
            ev("tool/requested", call),
            ev("tool/dispatch", call),
            ev("tool/result", {**result, "output": f"out {call['call_id']}"}),
        ]
    events += [
        ev("message/assistant", message("assistant", f"msg_a{n}", f"answer {n}", turn_id=tid)),
        ev("step/end", {"step_id": f"step_{n}", "status": "terminal"}),
        ev("turn/completed", {}),
        ev("run/end", {"status": "completed"}),
    ]
    commit(store, events, key)
    return 2 + tools + (1 if calls else 0)


def add_messages(store: SessionStore, count: int, prefix: str = "m") -> None:
    """Append ``count`` user messages and nothing else."""
    commit(
        store,
        [Event.create("message/user", message("user", f"{prefix}{i}")) for i in range(count)],
    )


def transcript(store: SessionStore, key: SessionKey = KEY) -> list[Message]:
    """What ``Session.transcript()`` lists: the context of the folded execution log."""
    return SessionState.fold(store.scan(key)).context


def walk(store: SessionStore, limit: int, key: SessionKey = KEY) -> list[HistoryPage]:
    """Every page of one walk, following next_cursor by hand."""
    pages = [read_history(store, key, limit)]
    while pages[-1].next_cursor is not None:
        pages.append(read_history(store, key, limit, pages[-1].next_cursor))
    return pages


def flat(pages: list[HistoryPage]) -> list[Message]:
    return [m for page in pages for m in page.messages]


def sign(store: SessionStore, payload: Any) -> str:
    """A cursor with any JSON payload, signed exactly as this store signs its own."""
    text = json.dumps(payload, separators=(",", ":")).encode()
    signed = f"h1.{history._b64(text)}"
    key = history._signing_key(store.secret())
    return f"{signed}.{history._b64(history._sign(key, signed))}"


def cursor_for(store: SessionStore, after_seq: int, hwm: int, key: SessionKey = KEY) -> str:
    """A genuine cursor of ``key`` at ``after_seq`` with snapshot ``hwm``."""
    c = history._Cursor(history._key_hash(key), history._Position(after_seq, 0), hwm)
    return history._encode(history._signing_key(store.secret()), c)


def parts(token: str) -> tuple[dict[str, Any], str]:
    """The decoded JSON payload of a cursor and its signature part."""
    _, payload, sig = token.split(".")
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))), sig


class Reads:
    """Records every ``read_after`` a store serves: (after, limit, events returned)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: SessionStore) -> None:
        self.calls: list[tuple[int, int, int]] = []
        real = store.read_after

        def read_after(key: SessionKey, after: int, limit: int) -> list[Event]:
            events = real(key, after, limit)
            self.calls.append((after, limit, len(events)))
            return events

        monkeypatch.setattr(store, "read_after", read_after)

    @property
    def examined(self) -> int:
        return sum(n for _, _, n in self.calls)


def forbid_io(monkeypatch: pytest.MonkeyPatch, store: SessionStore) -> None:
    """Make every store call the history module could make fail the test."""

    def boom(*_: object, **__: object) -> Any:
        raise AssertionError("the store was touched")

    for name in ("read_after", "head", "secret", "scan"):
        monkeypatch.setattr(store, name, boom)


# --------------------------------------------------------------------------------------------


class TestPaging:
    @pytest.mark.parametrize("limit", [1, 2, 7, MAX_LIMIT])
    def test_walk_lists_the_transcript_in_order(self, store: SessionStore, limit: int) -> None:
        """Concatenated pages equal the transcript: same messages, same ids, same order."""
        commit(store, [Event.create("message/user", message("user", "msg_first", "Be brief"))])
        for n in range(6):
            add_turn(store, n, tools=n % 3)
        expected = transcript(store)
        pages = walk(store, limit)
        assert flat(pages) == expected
        assert [m.id for m in flat(pages)] == [m.id for m in expected]
        assert all(len(p.messages) == limit for p in pages[:-1])
        assert 1 <= len(pages[-1].messages) <= limit

    def test_tool_results_become_tool_messages(self, store: SessionStore) -> None:
        """A tool/result is listed as the tool message the model context holds for it."""
        add_turn(store, 1, tools=1)
        tool = [m for m in read_history(store, KEY).messages if m.role == "tool"]
        assert tool == [
            Message(
                id="msg_call_1_0",
                role="tool",
                text="out call_1_0",
                call_id="call_1_0",
                name="lookup",
                turn_id="turn_1",
            )
        ]

    def test_default_limit_is_100(self, store: SessionStore) -> None:
        """Without a limit a page holds 100 messages."""
        add_messages(store, 150)
        page = read_history(store, KEY)
        assert len(page.messages) == 100
        assert page.next_cursor is not None

    def test_empty_session_gives_one_empty_page(self, store: SessionStore) -> None:
        """A session with no events yields one page with no messages and no cursor."""
        assert read_history(store, KEY) == HistoryPage((), None)

    def test_session_without_messages_gives_one_empty_page(self, store: SessionStore) -> None:
        """Lifecycle events alone produce one empty page and no cursor."""
        lifecycle(store, 30)
        assert read_history(store, KEY, 5) == HistoryPage((), None)

    def test_baseline_messages_are_paged_inside_their_event(self, store: SessionStore) -> None:
        """Messages a migration/baseline carries are listed in order, split across pages."""
        carried = [{"id": f"b{i}", "role": "user", "text": str(i)} for i in range(5)]
        commit(store, [Event.create("migration/baseline", {"state": {"messages": carried}})])
        add_messages(store, 2, prefix="after")
        pages = walk(store, 2)
        assert [m.id for m in flat(pages)] == ["b0", "b1", "b2", "b3", "b4", "after0", "after1"]
        assert [len(p.messages) for p in pages] == [2, 2, 2, 1]

    def test_unknown_session_raises_session_not_found(self, store: SessionStore) -> None:
        """Paging a session that does not exist raises SessionNotFound."""
        with pytest.raises(SessionNotFound):
            read_history(store, SessionKey("default", "alice", "agent", "nope"))

    def test_pages_are_frozen_records(self, store: SessionStore) -> None:
        """A HistoryPage is immutable and holds its messages in a tuple."""
        add_messages(store, 1)
        page = read_history(store, KEY)
        assert isinstance(page.messages, tuple)
        with pytest.raises(AttributeError):
            page.next_cursor = "x"  # type: ignore[misc]


class TestLastPage:
    def test_exact_boundary_with_trailing_lifecycle_events_ends(self, store: SessionStore) -> None:
        """A full page followed only by non-message events has no next_cursor."""
        add_messages(store, 4)
        lifecycle(store, 20)
        page = read_history(store, KEY, 4)
        assert len(page.messages) == 4
        assert page.next_cursor is None

    def test_exact_boundary_on_a_later_page_ends(self, store: SessionStore) -> None:
        """A walk whose last page is exactly full ends there instead of with an empty page."""
        for n in range(2):
            add_turn(store, n, tools=1)  # 4 messages each, lifecycle events after the last
        assert [len(p.messages) for p in walk(store, 4)] == [4, 4]

    def test_cursor_only_when_another_message_exists(self, store: SessionStore) -> None:
        """next_cursor appears when one more message follows, and that page holds it."""
        add_messages(store, 5)
        first = read_history(store, KEY, 4)
        assert first.next_cursor is not None
        second = read_history(store, KEY, 4, first.next_cursor)
        assert [m.id for m in second.messages] == ["m4"]
        assert second.next_cursor is None


class TestSnapshot:
    def test_walk_sees_only_the_first_pages_snapshot(self, store: SessionStore) -> None:
        """Messages committed after a walk started never appear in that walk."""
        for n in range(3):
            add_turn(store, n)
        before = transcript(store)
        first = read_history(store, KEY, 3)
        for n in range(3, 6):
            add_turn(store, n)
        pages = [first]
        while pages[-1].next_cursor is not None:
            pages.append(read_history(store, KEY, 3, pages[-1].next_cursor))
        assert flat(pages) == before

    def test_new_walk_sees_everything(self, store: SessionStore) -> None:
        """A walk started after more commits lists all of them."""
        add_turn(store, 0)
        walk(store, 2)
        add_turn(store, 1)
        assert flat(walk(store, 2)) == transcript(store)

    def test_iterator_walk_is_pinned_too(self, store: SessionStore) -> None:
        """HistoryPages pins the snapshot at its first page."""
        add_messages(store, 4, prefix="old")
        pages = HistoryPages(store, KEY, 2)
        first = next(pages)
        add_messages(store, 4, prefix="new")
        rest = list(pages)
        assert [m.id for m in flat([first, *rest])] == ["old0", "old1", "old2", "old3"]


class TestLimit:
    @pytest.mark.parametrize("limit", [0, MAX_LIMIT + 1, -1, "5", True, 5.0, None])
    def test_bad_limit_is_refused_before_any_io(
        self, store: SessionStore, monkeypatch: pytest.MonkeyPatch, limit: Any
    ) -> None:
        """A limit outside 1..256, or not an int, raises InvalidLimit without touching the store."""
        forbid_io(monkeypatch, store)
        with pytest.raises(InvalidLimit, match=r"1\.\.256"):
            read_history(store, KEY, limit)

    def test_bad_limit_is_refused_by_the_iterator_at_once(self, store: SessionStore) -> None:
        """HistoryPages checks its limit when it is built, not on the first next()."""
        with pytest.raises(InvalidLimit):
            HistoryPages(store, KEY, 0)

    def test_largest_limit_is_accepted(self, store: SessionStore) -> None:
        """A limit of 256 returns up to 256 messages."""
        add_messages(store, 300)
        assert len(read_history(store, KEY, MAX_LIMIT).messages) == MAX_LIMIT

    def test_limit_may_change_between_pages(self, store: SessionStore) -> None:
        """A cursor is not tied to the limit that produced it."""
        add_messages(store, 10)
        first = read_history(store, KEY, 3)
        second = read_history(store, KEY, 7, first.next_cursor)
        assert [m.id for m in second.messages] == [f"m{i}" for i in range(3, 10)]
        assert second.next_cursor is None


class TestCursorErrors:
    @pytest.fixture
    def token(self, store: SessionStore) -> str:
        """A genuine cursor of KEY (its session has 6 messages; the page limit was 2)."""
        add_messages(store, 6)
        cursor = read_history(store, KEY, 2).next_cursor
        assert cursor is not None
        return cursor

    @pytest.mark.parametrize(
        "bad",
        [
            "",
            "garbage",
            "h1.",
            "h1..",
            "h1.e30",
            "h1.!!!!.AAAA",
            "h1.e30.AAAA",
            "eh1.e30.AAAA",
            "h1." + "A" * 5000 + ".AAAA",
            5,
            b"h1.e30.AAAA",
        ],
    )
    def test_malformed_cursor_is_invalid(self, store: SessionStore, token: str, bad: Any) -> None:
        """Strings that are not cursors, and non-strings, raise InvalidCursor."""
        with pytest.raises(InvalidCursor):
            read_history(store, KEY, 2, bad)

    def test_other_version_prefix_is_invalid(self, store: SessionStore, token: str) -> None:
        """A cursor with another version prefix raises InvalidCursor."""
        with pytest.raises(InvalidCursor):
            read_history(store, KEY, 2, "h2" + token[2:])

    def test_truncated_cursor_is_invalid(self, store: SessionStore, token: str) -> None:
        """A cursor cut short raises InvalidCursor."""
        with pytest.raises(InvalidCursor):
            read_history(store, KEY, 2, token[:-5])

    def test_tampered_payload_is_invalid(self, store: SessionStore, token: str) -> None:
        """Changing the position inside a cursor breaks its signature: InvalidCursor."""
        payload, sig = parts(token)
        payload["a"] = 0
        forged = history._b64(json.dumps(payload, separators=(",", ":")).encode())
        with pytest.raises(InvalidCursor, match="signature"):
            read_history(store, KEY, 2, f"h1.{forged}.{sig}")

    def test_tampered_signature_is_invalid(self, store: SessionStore, token: str) -> None:
        """A cursor whose signature was changed raises InvalidCursor."""
        head, _, sig = token.rpartition(".")
        flipped = ("B" if sig[0] == "A" else "A") + sig[1:]
        with pytest.raises(InvalidCursor, match="signature"):
            read_history(store, KEY, 2, f"{head}.{flipped}")

    def test_cursor_of_another_store_is_invalid(self, store: SessionStore, token: str) -> None:
        """A cursor signed with another store's secret raises InvalidCursor (same key or not)."""
        other = MemoryStore()
        other.create_session(KEY)
        add_messages(other, 6)
        foreign = read_history(other, KEY, 2).next_cursor
        with pytest.raises(InvalidCursor, match="another store"):
            read_history(store, KEY, 2, foreign)

    def test_signed_cursor_with_bad_content_is_invalid(self, store: SessionStore) -> None:
        """A correctly signed cursor whose content has the wrong shape raises InvalidCursor."""
        add_messages(store, 3)
        good = parts(cursor_for(store, 1, 3))[0]
        for payload in ([1, 2], {**good, "a": -1}, {**good, "h": True}, {"k": good["k"]}):
            with pytest.raises(InvalidCursor, match="content"):
                read_history(store, KEY, 2, sign(store, payload))

    def test_cursor_of_another_session_is_cross_session(
        self, store: SessionStore, token: str
    ) -> None:
        """A cursor of another session in the same store raises CrossSessionCursor."""
        add_messages(store, 1)
        with pytest.raises(CrossSessionCursor) as info:
            read_history(store, OTHER, 2, token)
        assert not isinstance(info.value, InvalidCursor)

    def test_snapshot_past_the_head_is_expired(self, store: SessionStore, token: str) -> None:
        """A cursor whose high-water mark is above the log's head raises ExpiredCursor."""
        with pytest.raises(ExpiredCursor):
            read_history(store, KEY, 2, cursor_for(store, 2, store.head(KEY) + 10))

    def test_position_past_the_snapshot_is_expired(self, store: SessionStore, token: str) -> None:
        """A cursor whose position is beyond its own snapshot raises ExpiredCursor."""
        with pytest.raises(ExpiredCursor):
            read_history(store, KEY, 2, cursor_for(store, 5, 4))

    def test_cursor_errors_are_raised_before_reading_events(
        self, store: SessionStore, token: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Bad, foreign and expired cursors are refused without reading any event."""
        expired = cursor_for(store, 2, store.head(KEY) + 1)
        reads = Reads(monkeypatch, store)
        for bad, error in [
            ("garbage", InvalidCursor),
            (token[:-1] + "x", InvalidCursor),
            (expired, ExpiredCursor),
        ]:
            with pytest.raises(error):
                read_history(store, KEY, 2, bad)
        with pytest.raises(CrossSessionCursor):
            read_history(store, OTHER, 2, token)
        assert reads.calls == []

    def test_errors_never_echo_the_token(self, store: SessionStore, token: str) -> None:
        """No cursor error message contains the token it was given."""
        attempts = [
            (KEY, token[:-3], InvalidCursor),
            (KEY, "h1." + "A" * 5000 + ".AAAA", InvalidCursor),
            (OTHER, token, CrossSessionCursor),
            (KEY, cursor_for(store, 2, 999), ExpiredCursor),
        ]
        for key, bad, error in attempts:
            with pytest.raises(error) as info:
                read_history(store, key, 2, bad)
            assert bad not in str(info.value)
            assert bad.split(".")[1] not in str(info.value)

    def test_cursor_is_compact_url_safe_text(self, store: SessionStore, token: str) -> None:
        """A cursor is short URL-safe text with no session identifiers in the clear."""
        assert token.startswith("h1.")
        assert len(token) < 200
        assert set(token) <= set(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
        )
        payload, _ = parts(token)
        assert "alice" not in json.dumps(payload)


class TestHistoryPages:
    def test_iterator_yields_every_page_of_a_walk(self, store: SessionStore) -> None:
        """HistoryPages yields the same pages as following next_cursor by hand."""
        for n in range(4):
            add_turn(store, n)
        assert list(HistoryPages(store, KEY, 3)) == walk(store, 3)

    def test_empty_session_yields_one_empty_page(self, store: SessionStore) -> None:
        """A fresh session yields exactly one empty page, then stops."""
        assert list(HistoryPages(store, KEY)) == [HistoryPage((), None)]

    def test_iterator_is_lazy(self, store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
        """Building the iterator reads nothing."""
        forbid_io(monkeypatch, store)
        HistoryPages(store, KEY, 5)

    def test_iterator_is_fused(self, store: SessionStore, monkeypatch: pytest.MonkeyPatch) -> None:
        """After the last page, next() keeps raising StopIteration without touching the store."""
        add_messages(store, 3)
        pages = HistoryPages(store, KEY, 2)
        next(pages)
        assert next(pages).next_cursor is None
        forbid_io(monkeypatch, store)
        for _ in range(3):
            with pytest.raises(StopIteration):
                next(pages)

    def test_failed_page_can_be_retried(
        self, store: SessionStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """If reading a page raises, the next call retries that same page."""
        add_messages(store, 5)
        expected = walk(store, 2)
        pages = HistoryPages(store, KEY, 2)
        assert next(pages) == expected[0]
        real = store.read_after
        monkeypatch.setattr(store, "read_after", _failing_once(real))
        with pytest.raises(OSError, match="flaky"):
            next(pages)
        assert [next(pages), next(pages)] == expected[1:]
        with pytest.raises(StopIteration):
            next(pages)


def _failing_once(real: Callable[..., list[Event]]) -> Callable[..., list[Event]]:
    failed: list[bool] = []

    def read_after(*args: Any) -> list[Event]:
        if not failed:
            failed.append(True)
            raise OSError("flaky disk")
        return real(*args)

    return read_after


class TestReplayLimit:
    def test_page_over_the_replay_limit_is_too_large(self, store: SessionStore) -> None:
        """A page that must examine more events than replay_limit raises HistoryTooLarge."""
        add_messages(store, 1, prefix="a")
        lifecycle(store, 50)
        add_messages(store, 1, prefix="b")
        with pytest.raises(HistoryTooLarge, match=r"replay_limit=40.*smaller limit"):
            read_history(store, KEY, 5, replay_limit=20)

    def test_replay_limit_bounds_each_page_not_the_walk(self, store: SessionStore) -> None:
        """A walk over more events than replay_limit succeeds when each page stays under it."""
        for n in range(10):
            add_turn(store, n)  # 17 events and 4 messages each
        pages = list(HistoryPages(store, KEY, 2, replay_limit=40))
        assert flat(pages) == transcript(store)

    def test_replay_limit_stops_reading_just_past_the_bound(
        self, store: SessionStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A page gives up after examining replay_limit + 1 events, not a whole batch more."""
        lifecycle(store, 500)
        reads = Reads(monkeypatch, store)
        with pytest.raises(HistoryTooLarge):
            read_history(store, KEY, 5, replay_limit=100)
        assert reads.examined == 101

    @pytest.mark.parametrize("bad", [0, -1, True, "10"])
    def test_bad_replay_limit_is_refused(self, store: SessionStore, bad: Any) -> None:
        """replay_limit must be a positive int."""
        with pytest.raises(InvalidInput):
            read_history(store, KEY, replay_limit=bad)


@pytest.fixture
def session_on(store: SessionStore) -> Iterator[nb.Session]:
    """A Session facade over KEY of ``store`` (nothing is executed)."""
    agent = nb.Agent(name="History", agent_id=KEY.agent_id, model=nb.ScriptedModel([]))
    runtime = nb.Runtime(agent, store=store)
    try:
        yield runtime.session(KEY.session_id, user_id=KEY.user_id)
    finally:
        runtime.close()


class TestSessionReplayLimit:
    def test_advice_names_an_argument_session_history_takes(
        self, store: SessionStore, session_on: nb.Session
    ) -> None:
        """HistoryTooLarge advises replay_limit=, and Session.history accepts it."""
        add_messages(store, 1, prefix="a")
        lifecycle(store, 50)
        add_messages(store, 1, prefix="b")
        with pytest.raises(HistoryTooLarge, match=r"history\(limit, after, replay_limit=40\)"):
            session_on.history(5, replay_limit=20)
        assert "replay_limit" in inspect.signature(nb.Session.history).parameters
        assert "replay_limit" in inspect.signature(nb.Session.history_pages).parameters

    def test_following_the_advice_reads_the_page(
        self, store: SessionStore, session_on: nb.Session
    ) -> None:
        """The larger replay_limit the error suggests makes the same page readable."""
        add_messages(store, 1, prefix="a")
        lifecycle(store, 30)
        add_messages(store, 1, prefix="b")
        page = session_on.history(5, replay_limit=40)
        assert [m.id for m in page.messages] == ["a0", "b0"]

    def test_history_pages_passes_replay_limit_on(
        self, store: SessionStore, session_on: nb.Session
    ) -> None:
        """session.history_pages(limit, replay_limit=N) bounds every page of the walk by N."""
        add_messages(store, 1, prefix="a")
        lifecycle(store, 50)
        add_messages(store, 1, prefix="b")
        with pytest.raises(HistoryTooLarge):
            list(session_on.history_pages(5, replay_limit=20))
        assert len(flat(list(session_on.history_pages(5, replay_limit=100)))) == 2

    def test_bad_replay_limit_is_refused_by_the_session(self, session_on: nb.Session) -> None:
        """session.history(replay_limit=0) raises InvalidInput before reading."""
        with pytest.raises(InvalidInput, match="replay_limit"):
            session_on.history(replay_limit=0)


# --------------------------------------------------------------------------------------------

BIG_EVENTS = 200_000
EVERY = 10
"""One message in every EVERY events of the big session."""


@pytest.fixture(scope="class")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SQLiteStore]:
    """An SQLite session of 200,000 events, one user message in every 10 (built once)."""
    store = SQLiteStore(tmp_path_factory.mktemp("big") / "big.sqlite", synchronous="OFF")
    store.create_session(KEY)
    # Copies of one validated event are far cheaper than creating each one.
    filler = Event.create("step/start", {"step_id": "s", "iteration": 1})
    head = 0
    for start in range(0, BIG_EVENTS, 10_000):
        batch = [
            Event.create("message/user", message("user", f"m{i}"), event_id=f"evt_{i}")
            if i % EVERY == 0
            else filler.model_copy(update={"event_id": f"evt_{i}"})
            for i in range(start, start + 10_000)
        ]
        store.append(KEY, batch, expected_seq=head, batch_id=f"batch_{start}")
        head += len(batch)
    try:
        yield store
    finally:
        store.close()


class TestLargeSession:
    def test_first_page_reads_only_what_it_needs(
        self, big: SQLiteStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first page of a 200,000-event session examines O(limit) events."""
        reads = Reads(monkeypatch, big)
        page = read_history(big, KEY, 100)
        assert [m.id for m in page.messages] == [f"m{i * EVERY}" for i in range(100)]
        assert reads.examined <= 3 * 101 * EVERY
        assert all(limit <= 1_000 for _, limit, _ in reads.calls)

    def test_deep_page_starts_at_its_cursor(
        self, big: SQLiteStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A page deep in the log reads from the cursor's position, never from seq 1."""
        after = 150_000
        reads = Reads(monkeypatch, big)
        page = read_history(big, KEY, 100, cursor_for(big, after, BIG_EVENTS))
        assert [m.id for m in page.messages] == [f"m{after + i * EVERY}" for i in range(100)]
        assert min(a for a, _, _ in reads.calls) == after
        assert reads.examined <= 3 * 101 * EVERY

    def test_whole_walk_reads_each_event_about_once(
        self, big: SQLiteStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Walking every page examines each event about once: no page rescans earlier ones."""
        reads = Reads(monkeypatch, big)
        pages = list(HistoryPages(big, KEY, MAX_LIMIT))
        assert sum(len(p.messages) for p in pages) == BIG_EVENTS // EVERY
        assert reads.examined <= BIG_EVENTS * 5 // 4
        per_page: list[int] = []
        last = 0
        for after, _, n in reads.calls:
            if after < last:
                raise AssertionError(f"a read went back from {last} to {after}")
            last = after
            per_page.append(n)
        assert max(per_page) <= 1_000
