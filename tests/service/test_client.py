"""The remote client against ``agentnb serve``: the records ``Session`` returns, rebuilt;
the same typed errors, rebuilt with their data; follows that end when told to; and live
notifications from the stream."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime
from typing import Any

import pytest

import agentnb as nb
from agentnb.live import LiveEvent
from agentnb.projections.chat import ChatItem
from tests.service.conftest import Service
from tests.service.helpers import WAIT

_n = iter(range(1, 10_000))


@pytest.fixture
def remote(service: Service) -> nb.RemoteRuntime:
    runtime = nb.connect(service.url, service.alice)
    yield runtime
    runtime.close()


@pytest.fixture
def session(remote: nb.RemoteRuntime) -> nb.RemoteSession:
    return remote.session(f"c{next(_n)}")


class TestRecords:
    def test_receipt_waits_and_awaits(self, session: nb.RemoteSession) -> None:
        """A remote receipt is a Receipt: wait() and await give the Outcome."""
        receipt = session.submit("hello")
        assert isinstance(receipt, nb.Receipt)
        outcome = receipt.wait(timeout=WAIT)
        assert isinstance(outcome, nb.Outcome)
        assert outcome.output == "You said: hello"
        assert isinstance(outcome.usage, nb.UsageTotals)
        again = session.submit("again")
        assert asyncio.run(_await(again)).output == "You said: again"

    def test_reads_are_the_session_records(self, session: nb.RemoteSession) -> None:
        """tasks, snapshot, transcript, inspect, history and the log give Session's records."""
        session.run("hello", timeout=WAIT)
        (task,) = session.tasks()
        assert isinstance(task, nb.Task)
        assert isinstance(task.created_at, datetime)
        assert session.task(task.turn_id) == task
        snap = session.snapshot()
        assert isinstance(snap, nb.ChatSnapshot)
        assert all(isinstance(i, ChatItem) for i in snap.items)
        assert [m.role for m in snap.messages][-1] == "assistant"
        assert snap.cursor == session.log.head()
        assert session.transcript().messages == tuple(snap.messages)
        inspection = session.inspect()
        assert isinstance(inspection, nb.Inspection)
        assert inspection.as_of_seq == snap.cursor
        assert (inspection.context_tokens or 0) > 0
        pages = list(session.history_pages(limit=1))
        assert [m.id for p in pages for m in p.messages] == [m.id for m in snap.messages]
        events = list(session.log.scan())
        assert all(isinstance(e, nb.Event) for e in events)
        assert [e.seq for e in events] == list(range(1, snap.cursor + 1))

    def test_listing_and_lifecycle(self, remote: nb.RemoteRuntime) -> None:
        """sessions() lists SessionInfo records; update, archive and delete go through."""
        session = remote.session("c-life")
        session.update(title="A plan", labels={"team": "fin"})
        infos = remote.sessions(labels={"team": "fin"})
        assert [i.key.session_id for i in infos] == ["c-life"]
        assert isinstance(infos[0], nb.SessionInfo)
        assert infos[0].title == "A plan"
        assert session.archive().archived
        assert remote.sessions(labels={"team": "fin"}) == []
        assert not session.unarchive().archived
        tombstone = session.delete(reason="done")
        assert tombstone.reason == "done"
        with pytest.raises(nb.SessionDeleted):
            remote.open("c-life")


class TestExactReceipts:
    def test_a_task_observes_the_turn_where_the_receipt_stops(
        self, session: nb.RemoteSession
    ) -> None:
        """The submit's remote receipt stops at the suspension; the task's wait() follows the
        turn through the answer; the answer's receipt observes the continuation."""
        first = session.submit("ask your name?")
        assert first.wait(timeout=WAIT).status == "suspended"
        task = session.task(first.turn_id)
        (rid,) = session.pending()
        answered = session.respond(rid, "Ann")
        assert task.wait(timeout=WAIT).status == "completed"
        assert answered.wait(timeout=WAIT).run_id == session.tasks()[-1].run_ids[-1]
        assert first.wait(timeout=WAIT).status == "suspended"

    def test_permission_rules_are_granted_listed_and_revoked(
        self, session: nb.RemoteSession
    ) -> None:
        """approve(remember="session") through the client records a rule permissions() lists;
        a later order runs without asking until revoke()."""
        assert session.run("order pen 2", timeout=WAIT).status == "suspended"
        (rid,) = session.pending()
        session.respond(rid, nb.Answer.approve(remember="session")).wait(timeout=WAIT)
        (rule,) = session.permissions()
        assert (rule.tool_name, rule.scope) == ("create_order", "session")
        assert session.run("order cup 1", timeout=WAIT).status == "completed"
        session.revoke(rule.rule_id)
        assert session.permissions() == []
        assert session.run("order mug 1", timeout=WAIT).status == "suspended"

    def test_resume_with_uncertain_unknown_goes_through(self, session: nb.RemoteSession) -> None:
        """A call cut off mid-run blocks resume(); resume(uncertain="unknown") records it as
        unknown and the turn completes."""
        receipt = session.submit("snooze 60")
        for event in session.log.follow(idle_timeout=WAIT):
            if event.type == "action/start":
                break
        assert session.interrupt()
        assert receipt.wait(timeout=WAIT).status == "interrupted"
        with pytest.raises(nb.UncertainToolCalls):
            session.resume(receipt.turn_id)
        out = session.resume(receipt.turn_id, uncertain="unknown").wait(timeout=WAIT)
        assert out.status == "completed"
        results = [e.payload for e in session.log.scan() if e.type == "tool/result"]
        assert [r["status"] for r in results] == ["unknown"]


class TestErrors:
    def test_parked_carries_the_blocking_turn(self, session: nb.RemoteSession) -> None:
        """Waiting on a task queued behind a suspended turn raises Parked naming that turn."""
        blocking = session.run("order pen 1", timeout=WAIT)
        assert blocking.status == "suspended"
        queued = session.submit("after it")
        with pytest.raises(nb.Parked) as caught:
            queued.wait(timeout=WAIT)
        assert caught.value.blocking_turn == blocking.turn_id
        assert caught.value.turn_id == queued.turn_id
        assert caught.value.blocking_status == "suspended"

    def test_typed_errors_come_back(
        self, remote: nb.RemoteRuntime, session: nb.RemoteSession
    ) -> None:
        """The service's refusals raise agentnb's own exception classes here."""
        receipt = session.submit("hi", key="same")
        with pytest.raises(nb.IdempotencyConflict):
            session.submit("other", key="same")
        session.wait(receipt, timeout=WAIT)
        with pytest.raises(nb.NotRunning):
            session.steer("too late")
        with pytest.raises(nb.CannotResume):
            session.resume(receipt.turn_id)
        with pytest.raises(nb.InvalidAnswer):
            session.respond("req_nope", True)
        with pytest.raises(nb.InvalidInput):
            session.submit("")
        with pytest.raises(nb.SessionNotFound):
            remote.open("never-made")
        with pytest.raises(nb.InvalidInput, match="acts for user 'alice'"):
            remote.session("x", user_id="bob")

    def test_refused_token_and_unreachable_service(self, service: Service) -> None:
        """A wrong token raises Unauthorized; a service that is not there, StorageError."""
        forged = "tok_0000000000000000." + "A" * 43
        with nb.connect(service.url, forged) as remote, pytest.raises(nb.Unauthorized):
            remote.sessions()
        with (
            nb.connect("http://127.0.0.1:9", timeout=2) as remote,
            pytest.raises(nb.StorageError, match="cannot reach"),
        ):
            remote.sessions()


class TestFollow:
    def test_idle_timeout_ends_the_follow(self, session: nb.RemoteSession) -> None:
        """A follow with idle_timeout ends once nothing was committed for that long."""
        session.run("hello", timeout=WAIT)
        events = list(session.log.follow(after=0, idle_timeout=0.5))
        assert [e.seq for e in events] == list(range(1, session.log.head() + 1))

    def test_close_from_another_thread_ends_a_waiting_follow(
        self, session: nb.RemoteSession
    ) -> None:
        """close() ends a follow blocked waiting for the next commit."""
        follow = session.log.follow(after=session.log.head())
        got: list[nb.Event] = []
        reader = threading.Thread(target=lambda: got.extend(follow), daemon=True)
        reader.start()
        threading.Timer(0.3, follow.close).start()
        reader.join(WAIT)
        assert not reader.is_alive()
        assert got == []

    def test_async_follow(self, session: nb.RemoteSession) -> None:
        """async for over a follow yields the same events."""
        session.run("hello", timeout=WAIT)

        async def collect() -> list[int]:
            return [e.seq async for e in session.log.follow(after=0, idle_timeout=0.5)]

        assert asyncio.run(collect()) == list(range(1, session.log.head() + 1))

    def test_live_events_bring_chunks_before_commits(self, session: nb.RemoteSession) -> None:
        """events() gives the stream's live chunks and commit notices as LiveEvents."""
        subscription = session.events()
        try:
            session.run("long 20", timeout=WAIT)
            kinds = []
            while (item := subscription.get(timeout=2)) is not None:
                if isinstance(item, LiveEvent):
                    kinds.append(item.kind)
                if "committed" in kinds and "model/chunk" in kinds:
                    break
        finally:
            subscription.close()
            session.close()
        assert "model/chunk" in kinds
        assert "committed" in kinds

    def test_events_returns_once_the_stream_is_open(
        self, session: nb.RemoteSession, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """On a slow network, a run started right after events() still brings its live
        chunks: events() returns once the service accepted the stream."""
        client = session.runtime.http.client
        send = client.send

        def slow_stream(request: Any, **kwargs: Any) -> Any:
            if request.url.path.endswith("/stream"):
                time.sleep(0.5)  # a slow network, before the stream is opened
            return send(request, **kwargs)

        monkeypatch.setattr(client, "send", slow_stream)
        subscription = session.events()
        try:
            session.run("long 5", timeout=WAIT)
            kinds = []
            while (item := subscription.get(timeout=2)) is not None:
                kinds.append(item.kind)
                if item.kind == "committed" and item.data["seq"] == session.log.head():
                    break
        finally:
            subscription.close()
            session.close()
        assert "model/chunk" in kinds


async def _await(receipt: nb.Receipt) -> nb.Outcome:
    return await receipt


class TestCreate:
    def test_create_makes_a_sortable_id_with_title_and_labels(
        self, remote: nb.RemoteRuntime
    ) -> None:
        """``RemoteRuntime.create`` gets a new id from the service, sortable by creation,
        with the title and labels set."""
        first = remote.create(title="First", labels={"kind": "created"})
        second = remote.create()
        assert first.key.session_id < second.key.session_id
        assert first.key.user_id == remote.user_id
        found = {i.key.session_id: i for i in remote.sessions(labels={"kind": "created"})}
        assert found[first.key.session_id].title == "First"
        assert first.run("hello", timeout=WAIT).output == "You said: hello"

    def test_a_bad_title_is_invalid_input(self, remote: nb.RemoteRuntime) -> None:
        """A title of two lines is refused with the typed error, as locally."""
        with pytest.raises(nb.InvalidInput, match="title"):
            remote.create(title="two\nlines")

    def test_another_users_id_is_refused(self, remote: nb.RemoteRuntime) -> None:
        """``user_id`` must be the token's user."""
        with pytest.raises(nb.InvalidInput, match="token"):
            remote.create(user_id="mallory")
