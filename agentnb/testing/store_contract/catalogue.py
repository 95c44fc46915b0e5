"""The store contract of the catalogue: creating, listing, updating and finding sessions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentnb.errors import (
    InvalidInput,
    SessionNotFound,
)
from agentnb.events import (
    Event,
    canonical_json,
)
from agentnb.ids import FakeClock, SessionKey
from agentnb.log import Inbox
from agentnb.stores.base import (
    MAX_LABEL_KEY,
    MAX_LABEL_VALUE,
    MAX_LABELS,
    MAX_LIST_LIMIT,
    MAX_TITLE,
    SessionStore,
)
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    session_key,
    step,
)

__all__ = ["CatalogueContract"]


class CatalogueContract(ContractBase):
    """The catalogue: creating, listing, updating and finding sessions, and their metadata."""

    # -- catalogue ------------------------------------------------------------------------------

    def test_create_session_is_get_or_create(self, store: SessionStore, clock: FakeClock) -> None:
        """Creating an existing session returns the original record and changes nothing."""
        key = session_key()
        first = store.create_session(key)
        clock.advance(5)
        again = store.create_session(key)
        assert again == first
        assert again.key == key
        assert len(store.list_sessions()) == 1

    def test_get_session_never_creates(self, store: SessionStore) -> None:
        """get_session of an unknown key returns None and leaves the catalogue empty."""
        assert store.get_session(session_key("nope")) is None
        assert store.list_sessions() == []
        created = store.create_session(session_key("yes"))
        assert store.get_session(session_key("yes")) == created

    def test_list_sessions_filters_by_namespace_user_and_agent(self, store: SessionStore) -> None:
        """list_sessions returns sessions matching every filter given, oldest first."""
        keys = [
            session_key("a", namespace="n1", user_id="alice", agent_id="x"),
            session_key("b", namespace="n1", user_id="bob", agent_id="x"),
            session_key("c", namespace="n2", user_id="alice", agent_id="y"),
            session_key("d", namespace="n1", user_id="alice", agent_id="y"),
        ]
        for k in keys:
            store.create_session(k)

        def ids(**filters: str) -> list[str]:
            return [r.key.session_id for r in store.list_sessions(**filters)]

        assert ids() == ["a", "b", "c", "d"]
        assert ids(namespace="n1") == ["a", "b", "d"]
        assert ids(user_id="alice") == ["a", "c", "d"]
        assert ids(agent_id="y") == ["c", "d"]
        assert ids(namespace="n1", user_id="alice", agent_id="y") == ["d"]
        assert ids(user_id="carol") == []

    def test_list_sessions_rejects_bad_filters(self, store: SessionStore) -> None:
        """A filter that is not an identifier string raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.list_sessions(user_id=5)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            store.list_sessions(namespace="")

    def test_unknown_session_raises_session_not_found(self, store: SessionStore) -> None:
        """Every per-session operation on an unknown session raises SessionNotFound."""
        key = session_key("ghost")
        calls: list[Callable[[], object]] = [
            lambda: store.head(key),
            lambda: store.append(key, [step()], expected_seq=0, batch_id="b"),
            lambda: store.read_after(key, 0, 10),
            lambda: list(store.scan(key)),
            lambda: store.inbox_append(key, command()),
            lambda: store.inbox_head(key),
            lambda: store.heads(key),
            lambda: store.inbox_read_after(key, 0, 10),
            lambda: store.acquire_lease(key, "owner"),
            lambda: store.current_lease(key),
            lambda: store.watermark(key, "sink"),
            lambda: store.wait_for_head(key, 0, 0.01),
        ]
        for call in calls:
            with pytest.raises(SessionNotFound):
                call()
        assert store.get_session(key) is None

    def test_non_key_arguments_are_invalid_input(self, store: SessionStore) -> None:
        """Passing something other than a SessionKey raises InvalidInput."""
        with pytest.raises(InvalidInput):
            store.create_session("default/alice/agent/s1")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            store.head(("a", "b", "c", "d"))  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            store.heads("default/alice/agent/s1")  # type: ignore[arg-type]

    # -- lifecycle: metadata, finding, deleting -------------------------------------------------

    def test_new_session_record_carries_empty_metadata(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """A new record has its times set to now, no title or labels and zero counts."""
        record = store.create_session(session_key())
        now = clock.now()
        assert (record.created_at, record.updated_at, record.last_activity) == (now, now, now)
        assert (record.title, record.labels, record.first_task) == (None, {}, None)
        assert (record.events, record.turns, record.bytes, record.submits) == (0, 0, 0, 0)
        assert record.turn_status is None

    def test_append_keeps_counts_times_and_turn_status_current(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """Each commit adds its events, turns and payload size, moves the times and sets the
        latest turn's raw status; a replayed batch changes nothing."""
        clock.advance(10)
        batch = [Event.create("turn/start", {"input": "hi"}, turn_id="turn_1"), step(2)]
        store.append(key, batch, expected_seq=0, batch_id="b1")
        record = store.get_session(key)
        assert record is not None
        assert (record.events, record.turns, record.turn_status) == (2, 1, "running")
        assert record.bytes == sum(len(canonical_json(e.payload)) for e in batch)
        assert record.updated_at == record.last_activity == clock.now()
        clock.advance(10)
        store.append(key, batch, expected_seq=0, batch_id="b1")  # a lost-ack replay
        assert store.get_session(key) == record
        done = Event.create("turn/suspended", {"reason": "needs a person"}, turn_id="turn_1")
        store.append(key, [done], expected_seq=2, batch_id="b2")
        after = store.get_session(key)
        assert after is not None
        assert (after.events, after.turns, after.turn_status) == (3, 1, "suspended")
        assert after.created_at == record.created_at

    def test_first_submit_is_the_first_task_and_submits_are_counted(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """The first accepted submit's first line becomes first_task; every submit counts once
        (a deduplicated re-send does not) and moves last_activity but not updated_at."""
        clock.advance(3)
        first = Event.create(
            "inbox/accepted",
            {"command_id": "c1", "kind": "submit", "input": "\n  Plan the trip \nin detail"},
        )
        store.inbox_append(key, first, dedupe_key="k1")
        store.inbox_append(key, first, dedupe_key="k1")
        store.inbox_append(key, command("second task"))
        store.inbox_append(
            key,
            Event.create("inbox/accepted", {"command_id": "c3", "kind": "inject", "input": "x"}),
        )
        record = store.get_session(key)
        assert record is not None
        assert record.first_task == "Plan the trip"
        assert record.submits == 2
        assert record.last_activity == clock.now() > record.updated_at

    def test_update_sets_title_and_merges_labels(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """update_session sets the title, merges labels (None removes one) and is idempotent."""
        clock.advance(1)
        record = store.update_session(key, title="Trip plan", labels={"team": "a", "env": "x"})
        assert (record.title, record.labels) == ("Trip plan", {"env": "x", "team": "a"})
        assert record.updated_at == clock.now()
        record = store.update_session(key, labels={"env": None, "tier": "gold"})
        assert (record.title, record.labels) == ("Trip plan", {"team": "a", "tier": "gold"})
        again = store.update_session(key, labels={"env": None, "tier": "gold"})
        assert again == record
        cleared = store.update_session(key, title=None)
        assert (cleared.title, cleared.labels) == (None, {"team": "a", "tier": "gold"})
        assert store.get_session(key) == cleared

    @pytest.mark.parametrize(
        "changes",
        [
            {"title": ""},
            {"title": "two\nlines"},
            {"title": "x" * (MAX_TITLE + 1)},
            {"title": 5},
            {"labels": ["a"]},
            {"labels": {"": "v"}},
            {"labels": {"k" * (MAX_LABEL_KEY + 1): "v"}},
            {"labels": {"k": "v" * (MAX_LABEL_VALUE + 1)}},
            {"labels": {"k": 5}},
            {"labels": {f"k{i}": "v" for i in range(MAX_LABELS + 1)}},
        ],
    )
    def test_bad_metadata_is_invalid_input_and_writes_nothing(
        self, store: SessionStore, key: SessionKey, changes: dict[str, Any]
    ) -> None:
        """A bad title or bad labels raise InvalidInput and the record is unchanged."""
        before = store.get_session(key)
        with pytest.raises(InvalidInput):
            store.update_session(key, **changes)
        assert store.get_session(key) == before

    def test_labels_past_the_bound_after_merging_are_refused(
        self, store: SessionStore, key: SessionKey
    ) -> None:
        """Merging labels that would exceed MAX_LABELS raises InvalidInput, nothing written."""
        store.update_session(key, labels={f"k{i}": "v" for i in range(MAX_LABELS)})
        before = store.get_session(key)
        with pytest.raises(InvalidInput, match="remove some"):
            store.update_session(key, labels={"one-more": "v"})
        assert store.get_session(key) == before

    def test_an_update_command_changes_the_record_as_it_is_accepted(
        self, store: SessionStore, key: SessionKey, clock: FakeClock
    ) -> None:
        """An ``update`` inbox command (``Session.update``) is carried out in the transaction
        that accepts it; a re-send under its key changes nothing; a bad one (or labels past
        the bound once merged) is refused with neither the command nor the record written."""
        inbox = Inbox(store, key)
        clock.advance(1)
        inbox.accept("update", data={"title": "Trip", "labels": {"team": "a"}}, key="u1")
        record = store.get_session(key)
        assert record is not None
        assert (record.title, record.labels) == ("Trip", {"team": "a"})
        assert record.updated_at == clock.now()
        clock.advance(1)
        again = {"title": "Trip", "labels": {"team": "a"}}
        assert inbox.accept("update", data=again, key="u1")[1] is False
        assert store.get_session(key) == record
        inbox.accept(
            "update",
            data={"labels": {"team": None, **{f"k{i}": "v" for i in range(MAX_LABELS - 1)}}},
        )
        head = store.inbox_head(key)
        before = store.get_session(key)
        for bad in (
            {"title": "two\nlines"},
            {"title": 5},
            {"labels": {"k": 5}},
            {"labels": ["a"]},
            {"labels": {"one": "v", "two": "v"}},  # past MAX_LABELS once merged
        ):
            with pytest.raises(InvalidInput):
                inbox.accept("update", data=bad)
        assert store.inbox_head(key) == head
        assert store.get_session(key) == before

    def test_find_sessions_is_newest_activity_first(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """Sessions come newest last_activity first, and activity moves a session up."""
        keys = self._sessions(store, clock, 4)
        assert [r.key for r in store.find_sessions()] == keys[::-1]
        clock.advance(1)
        store.append(keys[0], [step()], expected_seq=0, batch_id="b")
        assert store.find_sessions(limit=1)[0].key == keys[0]

    def test_find_sessions_pages_with_a_stable_cursor(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """Pages follow each other without gaps or repeats, even while sessions are added."""
        keys = self._sessions(store, clock, 5)
        first = store.find_sessions(limit=2)
        assert [r.key for r in first] == [keys[4], keys[3]]
        clock.advance(1)
        store.create_session(session_key("new"))  # newer: it belongs before page one
        second = store.find_sessions(limit=2, before=first[-1].cursor)
        third = store.find_sessions(limit=2, before=second[-1].cursor)
        assert [r.key for r in second + third] == [keys[2], keys[1], keys[0]]
        assert store.find_sessions(limit=2, before=third[-1].cursor) == []

    def test_listing_follows_the_first_sessions_own_activity_exactly(
        self, store: SessionStore, clock: FakeClock
    ) -> None:
        """While the session listed first goes on committing, its ``last_activity``, the
        ``since`` / ``until`` bounds and the cursor follow each commit exactly; once another
        session is active, or created, or the first one deleted, the order is still by
        activity."""
        keys = self._sessions(store, clock, 3)
        head = 0
        for _ in range(3):  # the newest session commits again and again
            clock.advance(1)
            store.append(keys[2], [step()], expected_seq=head, batch_id=f"b{head}")
            head += 1
        top = store.find_sessions()[0]
        assert (top.key, top.last_activity) == (keys[2], clock.now())
        assert [r.key for r in store.find_sessions(since=clock.now())] == [keys[2]]
        assert [r.key for r in store.find_sessions(until=clock.now())] == [keys[1], keys[0]]
        assert [r.key for r in store.find_sessions(before=top.cursor)] == [keys[1], keys[0]]
        clock.advance(1)
        store.inbox_append(keys[0], command("another task"))
        assert [r.key for r in store.find_sessions()] == [keys[0], keys[2], keys[1]]
        assert [r.key for r in store.find_sessions(since=clock.now() - 1)] == [keys[0], keys[2]]
        clock.advance(1)
        newest = session_key("newest")
        store.create_session(newest)
        clock.advance(1)
        store.append(keys[2], [step()], expected_seq=head, batch_id="again")
        assert [r.key for r in store.find_sessions()] == [keys[2], newest, keys[0], keys[1]]
        store.delete_session(keys[2], by="test")
        clock.advance(1)
        store.append(keys[1], [step()], expected_seq=0, batch_id="b")
        listed = store.find_sessions()
        assert [r.key for r in listed] == [keys[1], newest, keys[0]]
        assert [r.last_activity for r in listed] == sorted(
            (r.last_activity for r in listed), reverse=True
        )

    def test_find_sessions_filters(self, store: SessionStore, clock: FakeClock) -> None:
        """User, labels (all must match), activity range, text search and raw turn status
        each narrow the listing."""
        keys = self._sessions(store, clock, 4)

        def ids(**filters: Any) -> list[str]:
            return [r.key.session_id for r in store.find_sessions(**filters)]

        middle = store.get_session(keys[2])
        assert middle is not None
        assert ids(since=middle.last_activity) == ["s3", "s2"]
        assert ids(until=middle.last_activity) == ["s1", "s0"]
        clock.advance(1)
        store.update_session(keys[1], title="Quarterly BUDGET review", labels={"team": "fin"})
        store.update_session(keys[3], labels={"team": "fin", "tier": "gold"})
        store.inbox_append(keys[2], command("Draft the budget memo"))
        store.append(
            keys[0],
            [Event.create("turn/start", {"input": "x"}, turn_id="turn_1")],
            expected_seq=0,
            batch_id="b",
        )
        assert ids(user_id="alice") == ["s3", "s1"]
        assert ids(labels={"team": "fin"}) == ["s3", "s1"]
        assert ids(labels={"team": "fin", "tier": "gold"}) == ["s3"]
        assert ids(search="budget") == ["s2", "s1"]
        assert ids(search="BUDGET", user_id="bob") == ["s2"]
        assert ids(turn_status=["running"]) == ["s0"]
        assert ids(turn_status=["none"]) == ["s3", "s2", "s1"]
        assert ids(agent_id="other") == []

    @pytest.mark.parametrize(
        "filters",
        [
            {"limit": 0},
            {"limit": MAX_LIST_LIMIT + 1},
            {"before": "not-a-cursor"},
            {"before": 5},
            {"search": " "},
            {"labels": {"k": 5}},
            {"turn_status": "running"},
            {"since": "yesterday"},
            {"user_id": ""},
            {"archived": "no"},
        ],
    )
    def test_bad_find_arguments_are_invalid_input(
        self, store: SessionStore, filters: dict[str, Any]
    ) -> None:
        """Bad filters, limits and cursors raise InvalidInput saying what to pass."""
        with pytest.raises(InvalidInput):
            store.find_sessions(**filters)
