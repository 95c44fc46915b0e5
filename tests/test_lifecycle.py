"""The session lifecycle at the runtime: listing, titles and labels, deleting, pruning."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.ids import FakeClock, SessionKey
from agentnb.runtime.runtime import session_info
from agentnb.stores.base import SessionRecord
from tests.runtime.helpers import Gate, gated_script

MakeRuntime = Callable[..., nb.Runtime]
KEY = SessionKey("default", "alice", "test-agent", "s1")
ROOT = Path(__file__).resolve().parents[1]


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
        qty: how many
    """
    return f"ordered {qty} x {item}"


def _order_then_done() -> nb.ScriptedModel:
    return nb.ScriptedModel([nb.ToolCall("create_order", {"item": "desk", "qty": 1}), "Done."])


def _record(**fields: Any) -> SessionRecord:
    return SessionRecord(KEY, 100.0, 100.0, 100.0, **fields)


class TestSessionStatus:
    @pytest.mark.parametrize(
        ("fields", "status"),
        [
            ({}, "idle"),
            ({"submits": 1}, "queued"),
            ({"submits": 1, "turns": 1, "turn_status": "completed"}, "idle"),
            ({"submits": 2, "turns": 1, "turn_status": "completed"}, "queued"),
            ({"submits": 1, "turns": 1, "turn_status": "running"}, "interrupted"),
            (
                {
                    "submits": 1,
                    "turns": 1,
                    "turn_status": "running",
                    "lease_owner": "w",
                    "lease_expires": 200.0,
                },
                "running",
            ),
            ({"submits": 1, "turns": 1, "turn_status": "suspended"}, "suspended"),
            ({"submits": 2, "turns": 1, "turn_status": "suspended"}, "parked"),
            ({"submits": 2, "turns": 1, "turn_status": "failed"}, "parked"),
            ({"submits": 1, "turns": 1, "turn_status": "cancelled"}, "idle"),
        ],
    )
    def test_status_follows_the_effective_status_rule(
        self, fields: dict[str, Any], status: str
    ) -> None:
        """A record's status: running only under a live lease, parked when tasks wait behind
        a turn that needs a person, queued when they wait for nothing, else idle."""
        assert session_info(_record(**fields), now=150.0).status == status

    def test_title_defaults_to_the_first_task(self) -> None:
        """Without a title of its own a session shows its first task's first line."""
        assert session_info(_record(first_task="Plan"), now=0).title == "Plan"
        assert session_info(_record(first_task="Plan", title="Trip"), now=0).title == "Trip"

    def test_a_task_cancelled_while_queued_leaves_the_queue(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A queued task that is cancelled never starts: the listing stops counting it."""
        gate = Gate()
        runtime = make_runtime(nb.ScriptedModel(gated_script(["One.", "Two."], {0: gate})))
        session = runtime.session("s1")
        first = session.submit("first")
        gate.wait_arrived()
        queued = session.submit("second")
        assert runtime.sessions()[0].status == "running"
        session.cancel(queued.turn_id)
        gate.release()
        assert first.wait(timeout=30).status == "completed"
        assert runtime.sessions()[0].status == "idle"
        later = session.submit("third")  # the queue still counts what comes next
        assert later.wait(timeout=30).status == "completed"
        assert runtime.sessions()[0].status == "idle"


class TestListing:
    def test_a_finished_session_is_listed_with_title_counts_and_status(
        self, make_runtime: MakeRuntime
    ) -> None:
        """After a task completes, the listing shows its first line as title, idle, counts."""
        runtime = make_runtime(nb.ScriptedModel(["Done."]))
        session = runtime.session("s1", user_id="alice")
        session.run("Plan the offsite\nwith all the details")
        (info,) = runtime.sessions()
        assert (info.key, info.title, info.status) == (session.key, "Plan the offsite", "idle")
        assert info.counts.turns == 1
        assert info.counts.events == session.log.head()
        assert info.counts.bytes > 0
        assert info.created_at <= info.updated_at <= info.last_activity
        assert info.last_activity.tzinfo is UTC

    def test_update_sets_title_and_labels_that_filters_and_search_find(
        self, make_runtime: MakeRuntime
    ) -> None:
        """session.update changes the title and merges labels; listing filters by both."""
        runtime = make_runtime(nb.ScriptedModel([]))
        first = runtime.session("s1", user_id="alice")
        runtime.session("s2", user_id="bob")
        first.update(title="Budget review", labels={"team": "fin", "tmp": "x"})
        first.update(labels={"tmp": None})
        first.update(labels={"tmp": None})  # the same change again: nothing moves
        (info,) = runtime.sessions(labels={"team": "fin"})
        assert (info.key, info.title, dict(info.labels)) == (
            first.key,
            "Budget review",
            {"team": "fin"},
        )
        assert [i.key for i in runtime.sessions(search="BUDGET")] == [first.key]
        assert [i.key.session_id for i in runtime.sessions("bob")] == ["s2"]
        assert runtime.sessions(status="running") == []
        assert len(runtime.sessions(status=["idle", "queued"])) == 2

    def test_pages_follow_each_other_by_cursor(self, make_runtime: MakeRuntime) -> None:
        """limit and before page the listing newest first, without repeats or gaps."""
        runtime = make_runtime(nb.ScriptedModel([]))
        for i in range(5):
            runtime.session(f"s{i}").update(title=f"t{i}")
        first = runtime.sessions(limit=2)
        rest = runtime.sessions(limit=10, before=first[-1].cursor)
        titles = [i.title for i in first + rest]
        assert titles == ["t4", "t3", "t2", "t1", "t0"]

    @pytest.mark.parametrize(
        "filters",
        [
            {"status": "asleep"},
            {"status": []},
            {"since": datetime(2026, 1, 1)},
            {"until": "yesterday"},
            {"limit": 0},
            {"before": "garbage"},
            {"labels": {"k": 1}},
        ],
    )
    def test_bad_filters_are_invalid_input(
        self, make_runtime: MakeRuntime, filters: dict[str, Any]
    ) -> None:
        """Unknown statuses, naive datetimes, bad limits, cursors and labels: InvalidInput."""
        runtime = make_runtime(nb.ScriptedModel([]))
        with pytest.raises(nb.InvalidInput):
            runtime.sessions(**filters)

    @pytest.mark.parametrize(
        "changes", [{"title": ""}, {"title": "a\nb"}, {"labels": {"k": "v" * 300}}]
    )
    def test_bad_update_is_invalid_input_and_writes_nothing(
        self, make_runtime: MakeRuntime, changes: dict[str, Any]
    ) -> None:
        """A bad title or label raises InvalidInput and the listing is unchanged."""
        runtime = make_runtime(nb.ScriptedModel([]))
        session = runtime.session("s1")
        before = runtime.sessions()
        with pytest.raises(nb.InvalidInput):
            session.update(**changes)
        assert runtime.sessions() == before


class TestUpdateIsAnInboxCommand:
    def test_update_is_an_inbox_command_the_store_carries_out(
        self, make_runtime: MakeRuntime
    ) -> None:
        """update() is accepted into the inbox (the record of the change, in order with the
        session's other commands) and the catalogue changes with it; no driver is needed."""
        runtime = make_runtime(nb.ScriptedModel([]))
        session = runtime.session("s1")
        session.update(title="Plan", labels={"team": "a"})
        session.update(labels={"team": None, "env": "prod"})
        updates = [e.payload for e in session.inbox.scan() if e.payload.get("kind") == "update"]
        assert [dict(u["data"]) for u in updates] == [
            {"title": "Plan", "labels": {"team": "a"}},
            {"labels": {"team": None, "env": "prod"}},
        ]
        (info,) = runtime.sessions()
        assert (info.title, dict(info.labels)) == ("Plan", {"env": "prod"})
        assert info.status == "idle"  # nothing queued for a driver
        assert not session.pending()

    def test_update_goes_through_while_a_turn_runs(self, make_runtime: MakeRuntime) -> None:
        """An update does not wait behind the running turn, and does not disturb it."""
        gate = Gate()
        runtime = make_runtime(nb.ScriptedModel(gated_script(["Done."], {0: gate})))
        session = runtime.session("s1")
        receipt = session.submit("work")
        gate.wait_arrived()
        session.update(title="Renamed while running")
        assert runtime.sessions()[0].title == "Renamed while running"
        gate.release()
        assert receipt.wait(timeout=30).status == "completed"
        assert runtime.sessions()[0].title == "Renamed while running"

    def test_update_needs_no_executing_runtime_and_works_when_archived(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A runtime that only submits and observes can update, and so can an archived
        session's owner (an update is not work)."""
        runtime = make_runtime(nb.ScriptedModel(["Done."]))
        runtime.session("s1").run("hello", timeout=30)
        runtime.archive(runtime.session("s1").key)
        observer = make_runtime(nb.ScriptedModel([]), execute=False)
        observer.session("s1").update(labels={"kept": "yes"})
        (info,) = runtime.sessions(archived=True)
        assert dict(info.labels) == {"kept": "yes"}

    def test_a_resent_update_changes_nothing_and_another_under_its_key_is_refused(
        self, make_runtime: MakeRuntime
    ) -> None:
        """With key=, a re-send is recognised; other content under the same key raises
        IdempotencyConflict and writes nothing."""
        runtime = make_runtime(nb.ScriptedModel([]))
        session = runtime.session("s1")
        session.update(title="First", key="rename-1")
        head = session.inbox.head()
        session.update(title="First", key="rename-1")
        assert session.inbox.head() == head
        with pytest.raises(nb.IdempotencyConflict):
            session.update(title="Second", key="rename-1")
        assert session.inbox.head() == head
        assert runtime.sessions()[0].title == "First"

    @pytest.mark.parametrize(
        "changes",
        [
            {"title": "two\nlines"},
            {"title": ""},
            {"labels": {"k": 5}},
            {"labels": ["a"]},
            {"title": "ok", "key": 5},
            {"title": "ok", "key": ""},
        ],
    )
    def test_a_bad_update_writes_nothing(
        self, make_runtime: MakeRuntime, changes: dict[str, Any]
    ) -> None:
        runtime = make_runtime(nb.ScriptedModel([]))
        session = runtime.session("s1")
        head = session.inbox.head()
        with pytest.raises(nb.InvalidInput):
            session.update(**changes)
        assert session.inbox.head() == head
        assert runtime.sessions()[0].title is None


class TestDelete:
    def test_delete_leaves_a_tombstone_and_the_key_never_comes_back(
        self, make_runtime: MakeRuntime
    ) -> None:
        """A deleted session is gone from the listing; open and session raise SessionDeleted
        naming who deleted it."""
        runtime = make_runtime(nb.ScriptedModel(["Done."]))
        session = runtime.session("s1", user_id="alice")
        session.run("hello")
        tombstone = runtime.delete("s1", user_id="alice", reason="GDPR request", by="ops")
        assert (tombstone.key, tombstone.deleted_by, tombstone.reason) == (
            session.key,
            "ops",
            "GDPR request",
        )
        assert runtime.sessions() == []
        with pytest.raises(nb.SessionDeleted, match="ops"):
            runtime.open("s1", user_id="alice")
        with pytest.raises(nb.SessionDeleted):
            runtime.session("s1", user_id="alice")
        assert runtime.delete(session.key) == tombstone

    def test_delete_of_an_unknown_session_is_session_not_found(
        self, make_runtime: MakeRuntime
    ) -> None:
        """Deleting a session that never existed raises SessionNotFound."""
        runtime = make_runtime(nb.ScriptedModel([]))
        with pytest.raises(nb.SessionNotFound):
            runtime.delete("nope")

    def test_delete_is_refused_while_a_turn_runs_unless_forced(
        self, make_runtime: MakeRuntime
    ) -> None:
        """SessionBusy while a turn runs, nothing deleted; force=True interrupts, then deletes."""
        gate = Gate()
        runtime = make_runtime(nb.ScriptedModel(gated_script(["Done."], {0: gate})))
        session = runtime.session("s1")
        session.submit("hello")
        gate.wait_arrived()
        assert runtime.sessions()[0].status == "running"
        with pytest.raises(nb.SessionBusy, match="force=True"):
            session.delete()
        assert runtime.sessions()[0].status == "running"
        done: list[Any] = []
        deleting = threading.Thread(target=lambda: done.append(session.delete(force=True)))
        deleting.start()
        gate.release()
        deleting.join(30)
        assert done
        assert done[0].key == session.key
        assert runtime.sessions() == []

    def test_a_deleted_sessions_rows_leave_the_runtimes_exports(
        self, make_runtime: MakeRuntime, tmp_path: Path
    ) -> None:
        """With export_to, deleting a session makes its rows leave the sink: once the live
        exporter is flushed, the export holds only the other session's events."""
        from agentnb import analysis
        from agentnb.export import ParquetSink

        sink = ParquetSink(tmp_path / "pq")
        runtime = make_runtime(nb.ScriptedModel(["One.", "Two."]), export_to=[sink])
        kept, gone = runtime.session("kept"), runtime.session("gone")
        kept.run("first")
        gone.run("second")
        assert runtime.exporter is not None
        assert runtime.exporter.flush(30)
        assert set(analysis.events(str(tmp_path / "pq"))["session_id"]) == {"kept", "gone"}
        gone.delete()
        assert runtime.exporter.flush(30)
        rows = analysis.events(str(tmp_path / "pq"))
        assert set(rows["session_id"]) == {"kept"}
        assert len(rows) == kept.log.head()


class TestArchive:
    def test_an_archived_session_leaves_the_listing_and_refuses_new_work(
        self, make_runtime: MakeRuntime, tmp_path: Path
    ) -> None:
        """archive() hides a finished session from sessions() (archived=True or None list
        it); it stays readable and exported; submit, send and inject raise SessionArchived
        naming unarchive() and write nothing; after unarchive() it runs new work."""
        from agentnb.export import Exporter, ParquetSink

        runtime = make_runtime(nb.ScriptedModel(["Done.", "Again."]))
        session = runtime.session("s1", user_id="alice")
        other = runtime.session("s2", user_id="alice")
        session.run("Plan the offsite")
        info = session.archive()
        assert info.archived
        assert info.archived_at is not None
        assert [i.key for i in runtime.sessions()] == [other.key]
        assert [i.key for i in runtime.sessions(archived=True)] == [session.key]
        assert {i.key for i in runtime.sessions(archived=None)} == {session.key, other.key}
        assert session.archive().archived_at == info.archived_at  # again: nothing changes
        head, inbox = session.log.head(), session.inbox.head()
        for call in (
            lambda: session.submit("more"),
            lambda: session.send("more"),
            lambda: session.inject("notes"),
        ):
            with pytest.raises(nb.SessionArchived, match=r"unarchive\(\)"):
                call()
        assert (session.log.head(), session.inbox.head()) == (head, inbox)
        assert [m.text for m in session.transcript().messages][-1] == "Done."
        assert session.history().messages
        assert session.inspect().as_of_seq == head
        assert [t.status for t in session.tasks()] == ["completed"]
        assert Exporter(runtime.store, ParquetSink(tmp_path / "pq")).drain() == head
        assert not session.unarchive().archived
        assert session.run("more").output == "Again."
        assert [i.key for i in runtime.sessions()] == [session.key, other.key]

    def test_archive_is_refused_while_a_turn_runs_or_tasks_wait(
        self, make_runtime: MakeRuntime
    ) -> None:
        """SessionBusy while a turn runs and while a task is queued (nothing archived); a
        turn that waits for a person is archived as it is, and its answer is then refused
        (SessionArchived) while cancel still ends it."""
        gate = Gate()
        runtime = make_runtime(nb.ScriptedModel(gated_script(["Done."], {0: gate})))
        session = runtime.session("s1")
        receipt = session.submit("hello")
        gate.wait_arrived()
        with pytest.raises(nb.SessionBusy, match="run open"):
            session.archive()
        gate.release()
        receipt.wait(30)
        assert session.archive().archived

        runtime = make_runtime(_order_then_done(), tools=[create_order])
        waiting = runtime.session("s2")
        assert waiting.run("order a desk").status == "suspended"
        parked = waiting.submit("then this")
        with pytest.raises(nb.SessionBusy, match="wait to be carried out"):
            waiting.archive()
        assert not runtime.sessions(archived=True, status="parked")
        waiting.cancel(parked.turn_id)
        assert waiting.archive().archived
        (request_id,) = waiting.pending()
        with pytest.raises(nb.SessionArchived):
            waiting.respond(request_id, True)
        (turn,) = [t.turn_id for t in waiting.tasks() if t.status == "suspended"]
        waiting.cancel(turn)
        assert [t.status for t in waiting.tasks()] == ["cancelled", "cancelled"]

    def test_another_process_is_refused_too(self, tmp_path: Path) -> None:
        """The flag lives in the store: a runtime in another process that opens the
        archived session gets SessionArchived from submit, and nothing is written."""
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        agent = nb.Agent(name="T", agent_id="test-agent", model=nb.ScriptedModel(["Done."]))
        with nb.Runtime(agent, store=url) as runtime:
            session = runtime.session("s1")
            session.run("hello")
            session.archive()
            inbox = session.inbox.head()
        code = (
            "import agentnb as nb, sys\n"
            "agent = nb.Agent(name='T', agent_id='test-agent', model=nb.ScriptedModel(['x']))\n"
            f"with nb.Runtime(agent, store={url!r}) as runtime:\n"
            "    try:\n"
            "        runtime.session('s1').submit('more')\n"
            "    except nb.SessionArchived as exc:\n"
            "        print('refused', exc)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code],
            check=False,
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert done.stdout.startswith("refused"), done.stderr
        assert "unarchive()" in done.stdout
        store = nb.open_store(url)
        try:
            assert store.inbox_head(session.key) == inbox
        finally:
            store.close()

    def test_archive_of_a_deleted_or_unknown_session_is_refused(
        self, make_runtime: MakeRuntime
    ) -> None:
        """archive() of a deleted session raises SessionDeleted, of one never created
        SessionNotFound; unarchive() the same."""
        runtime = make_runtime(nb.ScriptedModel([]))
        runtime.session("gone").delete()
        for call in (runtime.archive, runtime.unarchive):
            with pytest.raises(nb.SessionDeleted):
                call("gone")
            with pytest.raises(nb.SessionNotFound):
                call("never")

    def test_prune_covers_archived_sessions(self, make_runtime: MakeRuntime) -> None:
        """A retention rule selects archived sessions like the others."""
        clock = FakeClock()
        store = nb.MemoryStore(clock=clock)
        runtime = make_runtime(nb.ScriptedModel([]), store=store)
        runtime.session("old").archive()
        clock.advance(3600)
        report = runtime.prune(1800)
        assert [i.key.session_id for i in report.sessions] == ["old"]


class TestPrune:
    def test_dry_run_reports_and_a_real_run_deletes(self, make_runtime: MakeRuntime) -> None:
        """prune lists idle sessions older than the cutoff in a dry run and deletes them when
        asked; recent and labelled-out sessions stay."""
        clock = FakeClock()
        store = nb.MemoryStore(clock=clock)
        runtime = make_runtime(nb.ScriptedModel([]), store=store)
        old = runtime.session("old")
        old.update(labels={"kind": "scratch"})
        runtime.session("kept").update(labels={"kind": "real"})
        clock.advance(3600)
        runtime.session("new").update(labels={"kind": "scratch"})
        report = runtime.prune(timedelta(minutes=30), labels={"kind": "scratch"})
        assert report.dry_run
        assert report.deleted == 0
        assert [i.key for i in report.sessions] == [old.key]
        assert len(runtime.sessions()) == 3
        report = runtime.prune(1800, labels={"kind": "scratch"}, dry_run=False)
        assert report.deleted == 1
        assert sorted(i.key.session_id for i in runtime.sessions()) == ["kept", "new"]

    @pytest.mark.parametrize(
        "arguments",
        [{"older_than": -1}, {"older_than": "a week"}, {"older_than": 1, "status": "running"}],
    )
    def test_bad_rules_are_invalid_input(
        self, make_runtime: MakeRuntime, arguments: dict[str, Any]
    ) -> None:
        """A negative or non-numeric age, or a rule that would prune running work: InvalidInput."""
        runtime = make_runtime(nb.ScriptedModel([]))
        runtime.session("s1")
        with pytest.raises(nb.InvalidInput):
            runtime.prune(**arguments)
        assert len(runtime.sessions()) == 1


class TestCommandLine:
    @pytest.fixture
    def url(self, tmp_path: Any) -> str:
        url = f"sqlite:///{tmp_path / 'agentnb.sqlite'}"
        clock = FakeClock()
        store = nb.open_store(url, clock=clock)
        for name, labels in (("old", {"env": "scratch"}), ("keep", {"env": "prod"})):
            key = SessionKey("default", "alice", "agent", name)
            store.create_session(key)
            store.update_session(key, title=f"{name} work", labels=labels)
        clock.advance(7 * 86_400)
        store.create_session(SessionKey("default", "bob", "agent", "new"))
        store.close()
        return url

    def _run(self, argv: list[str], capsys: Any) -> tuple[int, str, str]:
        from agentnb.cli import main

        code = main(argv)
        out, err = capsys.readouterr()
        return code, out, err

    def test_sessions_filters_and_prints_json(self, url: str, capsys: Any) -> None:
        """sessions takes the listing's filters and prints title, labels and status."""
        code, out, _ = self._run(
            ["sessions", "--json", "--store", url, "--label", "env=scratch"], capsys
        )
        assert code == 0
        (row,) = json.loads(out)
        assert (row["session_id"], row["title"], row["status"]) == ("old", "old work", "idle")
        assert row["labels"] == {"env": "scratch"}
        code, out, _ = self._run(["sessions", "--json", "--store", url, "--user", "bob"], capsys)
        assert [r["session_id"] for r in json.loads(out)] == ["new"]

    def test_sessions_lists_archived_ones_when_asked(self, url: str, capsys: Any) -> None:
        """sessions leaves archived sessions out; --archived lists only them, --all both."""
        store = nb.open_store(url)
        store.set_archived(SessionKey("default", "alice", "agent", "old"))
        store.close()

        def listed(*flags: str) -> list[tuple[str, bool]]:
            code, out, _ = self._run(["sessions", "--json", "--store", url, *flags], capsys)
            assert code == 0
            return sorted((r["session_id"], r["archived_at"] is not None) for r in json.loads(out))

        assert listed() == [("keep", False), ("new", False)]
        assert listed("--archived") == [("old", True)]
        assert listed("--all") == [("keep", False), ("new", False), ("old", True)]
        with pytest.raises(SystemExit) as exited:
            self._run(["sessions", "--store", url, "--archived", "--all"], capsys)
        assert exited.value.code == 2
        assert "not allowed with" in capsys.readouterr().err

    def test_prune_is_a_dry_run_until_apply(self, url: str, capsys: Any) -> None:
        """prune lists what it would delete; with --apply it deletes exactly that."""
        argv = ["prune", "--store", url, "--older-than", "3d", "--json"]
        code, out, _ = self._run([*argv, "--label", "env=scratch"], capsys)
        report = json.loads(out)
        assert (code, report["dry_run"], report["deleted"]) == (0, True, 0)
        assert [s["key"]["session_id"] for s in report["sessions"]] == ["old"]
        code, out, _ = self._run([*argv, "--label", "env=scratch", "--apply"], capsys)
        assert (code, json.loads(out)["deleted"]) == (0, 1)
        code, out, _ = self._run(["sessions", "--json", "--store", url], capsys)
        assert sorted(r["session_id"] for r in json.loads(out)) == ["keep", "new"]

    def test_delete_then_delete_again_is_not_found(self, url: str, capsys: Any) -> None:
        """delete prints the tombstone; the session is then not found (exit 3)."""
        code, out, _ = self._run(
            ["delete", "keep", "--store", url, "--reason", "asked", "--json"], capsys
        )
        assert code == 0
        assert json.loads(out)["reason"] == "asked"
        code, _, err = self._run(["delete", "keep", "--store", url], capsys)
        assert code == 3
        assert "no session" in err

    def test_delete_of_a_running_session_is_refused(self, url: str, capsys: Any) -> None:
        """A session whose turn runs under a live lease is not deleted (exit 1)."""
        store = nb.open_store(url)
        key = SessionKey("default", "alice", "agent", "old")
        lease = store.acquire_lease(key, "worker-1", ttl=600)
        start = nb.Event.create("turn/start", {"input": "x"}, turn_id="turn_1")
        store.append(key, [start], expected_seq=0, batch_id="b", fence=lease)
        store.close()
        code, _, err = self._run(["delete", "old", "--store", url], capsys)
        assert code == 1
        assert "turn running" in err

    @pytest.mark.parametrize(
        "argv",
        [
            ["prune", "--older-than", "soon"],
            ["prune", "--older-than", "1d", "--label", "novalue"],
            ["sessions", "--since", "last tuesday"],
        ],
    )
    def test_bad_values_are_usage_errors(self, url: str, capsys: Any, argv: list[str]) -> None:
        """A bad duration, label or date exits 2 and changes nothing."""
        code, _, err = self._run([*argv, "--store", url], capsys)
        assert code == 2
        assert "error:" in err
