"""Schedules (issue 36, item 3): durable in the session's inbox, fired as submits with a key
from schedule and due time, exactly once across kill -9 and restarts and across two
PostgreSQL workers; each overlap and catch_up value; bad values are typed errors naming
the field."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.errors import IdempotencyConflict, InvalidInput
from agentnb.ops.schedules import Scheduler, add_schedule, schedules_of

ROOT = Path(nb.__file__).parent.parent
WAIT = 60.0


@nb.tool
def slow(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "slept"


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall:
    last = messages[-1]
    if last.role == "user" and last.text.startswith("slow"):
        return nb.ToolCall("slow", {"seconds": float(last.text.split()[1])})
    return f"did: {last.text}"


AGENT = nb.Agent(name="Scheduled", agent_id="scheduled", model=nb.ScriptedModel(_reply))
SLOW_AGENT = nb.Agent(
    name="Scheduled slow", agent_id="scheduled", model=nb.ScriptedModel(_reply), tools=[slow]
)


def fired(store: nb.SessionStore, key: nb.SessionKey) -> list[dict[str, Any]]:
    return [
        dict(e.payload)
        for e in store.inbox_read_after(key, 0, 10_000)
        if e.type == "schedule/fired"
    ]


def scheduled_submits(store: nb.SessionStore, key: nb.SessionKey) -> list[str]:
    return [
        e.payload["key"]
        for e in store.inbox_read_after(key, 0, 10_000)
        if e.type == "inbox/accepted"
        and e.payload["kind"] == "submit"
        and (e.payload.get("key") or "").startswith("sched-")
    ]


def wait_for(predicate: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def caught_up(store: nb.SessionStore, key: nb.SessionKey) -> bool:
    """Every claim that says it submitted has its submit."""
    records = fired(store, key)
    submitted = {r["key"] for r in records if r["disposition"] in ("submitted", "queued")}
    return submitted <= set(scheduled_submits(store, key))


def check_each_due_once(store: nb.SessionStore, key: nb.SessionKey, every: float) -> list[float]:
    """Every due time from the first fired to the last was fired exactly once, and each
    submit happened once."""
    records = fired(store, key)
    dues = sorted(r["due"] for r in records)
    assert len(dues) == len(set(dues)), f"a due time fired twice: {dues}"
    steps = [round(b - a, 3) for a, b in itertools.pairwise(dues)]
    assert all(step == every for step in steps), f"a due time was skipped: {steps}"
    submitted = [r["key"] for r in records if r["disposition"] in ("submitted", "queued")]
    keys = scheduled_submits(store, key)
    assert Counter(keys) == Counter(submitted)
    return dues


class TestFiring:
    def test_every_second_fires_each_due_time_once_as_a_submit(self, tmp_path: Path) -> None:
        """every=1: the runtime that added it submits at each due time, with the derived key;
        the turns run; schedules() shows the last and next due times."""
        with nb.Runtime(AGENT, store=f"sqlite:///{tmp_path / 's.db'}") as runtime:
            session = runtime.session("ticks")
            schedule = session.schedule("tick", every=1, catch_up="all")
            assert schedule.next_due == pytest.approx(schedule.created_at + 1)
            wait_for(lambda: len(fired(runtime.store, session.key)) >= 3, "3 firings")
            session.unschedule(schedule.schedule_id)
            dues = check_each_due_once(runtime.store, session.key, 1.0)
            assert dues[0] == pytest.approx(schedule.created_at + 1)
            wait_for(
                lambda: sum(t.status == "completed" for t in session.tasks()) >= 3, "the turns"
            )
            assert session.schedules() == []
            count = len(fired(runtime.store, session.key))
            time.sleep(1.5)
            assert len(fired(runtime.store, session.key)) == count  # removed: no more

    def test_a_key_makes_schedule_idempotent(self, tmp_path: Path) -> None:
        """The same key and schedule give the same Schedule; the key with another schedule
        is IdempotencyConflict; unscheduling an unknown id is InvalidInput."""
        with nb.Runtime(AGENT, store=f"sqlite:///{tmp_path / 's.db'}", execute=False) as rt:
            session = rt.session("keyed")
            a = session.schedule("report", cron="0 9 * * 1-5", tz="Europe/Paris", key="daily")
            b = session.schedule("report", cron="0 9 * * 1-5", tz="Europe/Paris", key="daily")
            assert a.schedule_id == b.schedule_id
            assert [s.schedule_id for s in session.schedules()] == [a.schedule_id]
            due = a.next_due_at
            assert due is not None
            assert (due.hour, due.minute, due.weekday() < 5) == (9, 0, True)
            with pytest.raises(IdempotencyConflict):
                session.schedule("other", cron="0 9 * * 1-5", key="daily")
            with pytest.raises(InvalidInput, match="no active schedule"):
                session.unschedule("sch_nope")


_CHILD = """
import sys, time
import agentnb as nb
from tests.ops.test_schedules import AGENT
runtime = nb.Runtime(AGENT, store=sys.argv[1], schedules=True)
if sys.argv[2] == "add":
    runtime.session("cron").schedule("tick", every=1, catch_up="all", key="every-second")
print("ready", flush=True)
time.sleep(600)
"""


class TestExactlyOnce:
    def _child(self, url: str, *args: str) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, url, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        return child

    def _kill(self, child: subprocess.Popen[str]) -> None:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            child.wait(WAIT)
        if child.stdout is not None:
            child.stdout.close()

    def test_every_second_across_kill_minus_nine_and_restart(self, tmp_path: Path) -> None:
        """kill -9 of the firing runtime, 2.5 s of downtime, a restart: with catch_up="all"
        the missed due times are fired after the restart, each due time exactly once."""
        url = f"sqlite:///{tmp_path / 'k.db'}"
        child = self._child(url, "add")
        store = nb.open_store(url)
        try:
            (record,) = store.list_sessions()
            wait_for(lambda: len(fired(store, record.key)) >= 2, "2 firings")
            self._kill(child)
            before = len(fired(store, record.key))
            time.sleep(2.5)
            child = self._child(url, "restart")
            # Claims are recorded a pass at a time, then submitted: kill once they are.
            wait_for(
                lambda: (
                    len(fired(store, record.key)) >= before + 4 and caught_up(store, record.key)
                ),
                "the catch-up",
            )
            self._kill(child)
            check_each_due_once(store, record.key, 1.0)
        finally:
            self._kill(child)
            store.close()

    def test_two_postgres_workers_fire_each_due_time_once(self, pg_store_url: str) -> None:
        """Two processes with schedules=True on one PostgreSQL store: every due time is
        claimed by exactly one of them, and submitted once."""
        first = self._child(pg_store_url, "add")
        second = self._child(pg_store_url, "restart")
        store = nb.open_store(pg_store_url)
        try:
            (record,) = store.list_sessions()
            wait_for(
                lambda: len(fired(store, record.key)) >= 5 and caught_up(store, record.key),
                "5 firings",
            )
            self._kill(first)
            self._kill(second)
            check_each_due_once(store, record.key, 1.0)
        finally:
            self._kill(first)
            self._kill(second)
            store.close()


class FakeSession:
    """Records what the scheduler asks of a session; ``running`` says whether a turn runs."""

    def __init__(self, store: nb.SessionStore, key: nb.SessionKey) -> None:
        self.store, self.key = store, key
        self.running = False
        self.submitted: list[tuple[str, str | None]] = []
        self.steered: list[str] = []

    def submit(self, input: str, key: str | None = None) -> None:
        self.submitted.append((input, key))

    def steer(self, input: str) -> None:
        self.steered.append(input)

    def tasks(self) -> list[Any]:
        class T:
            status = "running" if self.running else "completed"

        return [T()]


def _scheduler(
    store: nb.SessionStore, key: nb.SessionKey, now: list[float]
) -> tuple[Scheduler, FakeSession]:
    fake = FakeSession(store, key)
    return Scheduler(store, lambda k: fake, lambda since: [key], clock=lambda: now[0]), fake


T0 = 1_800_000_000.0


class TestChoices:
    @pytest.mark.parametrize(
        ("catch_up", "dues", "missed"),
        [("all", [10, 20, 30], 0), ("one", [30], 2), ("none", [], 2)],
    )
    def test_catch_up_after_downtime(self, catch_up: str, dues: list[int], missed: int) -> None:
        """35 s after a schedule every 10 s was added, with no scheduler running: "all" fires
        the 3 missed due times, "one" the latest (recording 2 missed), "none" none of them
        (the latest is marked passed)."""
        store = nb.MemoryStore()
        key = nb.SessionKey("default", "u", "scheduled", "s")
        store.create_session(key)
        add_schedule(store, key, "tick", every=10, catch_up=catch_up, now=T0)
        now = [T0 + 35]
        scheduler, fake = _scheduler(store, key, now)
        scheduler.tick()
        assert [k for _, k in fake.submitted] == [
            f"sched-{s}-{round((T0 + d) * 1000)}"
            for s in [schedules_of(store, key)[0].schedule_id]
            for d in dues
        ]
        records = fired(store, key)
        assert records[0]["missed"] == missed
        assert (schedules_of(store, key)[0].next_due or 0) == T0 + 40

    @pytest.mark.parametrize(
        ("overlap", "disposition"),
        [("skip", "skipped"), ("queue", "queued"), ("steer", "steered")],
    )
    def test_overlap_while_a_turn_runs(self, overlap: str, disposition: str) -> None:
        """A due time that finds a turn running is skipped, queued as a task, or steers
        the running turn, as overlap says; with nothing running it is a submit."""
        store = nb.MemoryStore()
        key = nb.SessionKey("default", "u", "scheduled", "s")
        store.create_session(key)
        add_schedule(store, key, "tick", every=10, overlap=overlap, now=T0)
        now = [T0 + 10.1]
        scheduler, fake = _scheduler(store, key, now)
        fake.running = True
        scheduler.tick()
        now[0] = T0 + 20.1
        fake.running = False
        scheduler.tick()
        assert [r["disposition"] for r in fired(store, key)] == [disposition, "submitted"]
        submits = 2 if overlap == "queue" else 1
        assert len(fake.submitted) == submits
        assert fake.steered == (["tick"] if overlap == "steer" else [])

    def test_a_second_scheduler_never_fires_a_due_time_again(self) -> None:
        """Two schedulers on one store at the same due time: one claims it; the other sees
        the claim and at most repeats its submit under the same key (one task, by the key)."""
        store = nb.MemoryStore()
        key = nb.SessionKey("default", "u", "scheduled", "s")
        store.create_session(key)
        add_schedule(store, key, "tick", every=10, now=T0)
        now = [T0 + 10.5]
        a, fake_a = _scheduler(store, key, now)
        b, fake_b = _scheduler(store, key, now)
        a.tick()
        b.tick()
        assert len({k for _, k in fake_a.submitted + fake_b.submitted}) == 1
        assert len(fired(store, key)) == 1

    def test_a_one_shot_at_fires_once(self) -> None:
        """at= fires at its time, then the schedule is no longer active."""
        store = nb.MemoryStore()
        key = nb.SessionKey("default", "u", "scheduled", "s")
        store.create_session(key)
        add_schedule(store, key, "once", at="2027-01-15T10:00:00+01:00", now=T0)
        due = schedules_of(store, key)[0].next_due
        assert due is not None
        now = [due + 0.2]
        scheduler, fake = _scheduler(store, key, now)
        scheduler.tick()
        now[0] += 100
        scheduler.tick()
        assert len(fake.submitted) == 1
        assert schedules_of(store, key) == []


class TestBadSchedules:
    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"cron": "61 * * * *"}, "cron"),
            ({"cron": "every day"}, "cron"),
            ({"every": 0.1}, "every"),
            ({"every": "5"}, "every"),
            ({"at": "tomorrow"}, "at"),
            ({"every": 5, "tz": "Mars/Olympus"}, "tz"),
            ({"every": 5, "overlap": "merge"}, "overlap"),
            ({"every": 5, "catch_up": "some"}, "catch_up"),
            ({"every": 5, "cron": "* * * * *"}, "exactly one"),
            ({}, "exactly one"),
        ],
    )
    def test_bad_values_are_invalid_input_naming_the_field(
        self, tmp_path: Path, kwargs: dict[str, Any], field: str
    ) -> None:
        """Each bad value raises InvalidInput naming its field; nothing is recorded."""
        with nb.Runtime(AGENT, store="memory://", execute=False) as runtime:
            session = runtime.session("bad")
            with pytest.raises(InvalidInput, match=field):
                session.schedule("tick", **kwargs)
            assert session.schedules() == []


class TestDoors:
    def test_v1_routes_add_list_and_remove_schedules(self, tmp_path: Path) -> None:
        """POST, GET and DELETE /v1/sessions/{id}/schedules call the Session verbs; a bad
        cron is a 400 problem naming the field."""
        import httpx

        from agentnb import tokens
        from tests.service.helpers import ServerThread

        url = f"sqlite:///{tmp_path / 'api.db'}"
        with nb.Runtime(AGENT, store=url) as runtime:
            token, _ = tokens.issue(runtime.store, "alice")
            runtime.session("api", user_id="alice").run("hello", timeout=WAIT)
            with ServerThread(runtime) as server:
                client = httpx.Client(
                    base_url=f"{server.url}/v1", headers={"Authorization": f"Bearer {token}"}
                )
                made = client.post(
                    "/sessions/api/schedules",
                    json={"text": "report", "cron": "0 9 * * *", "tz": "Europe/Paris"},
                )
                assert made.status_code == 201, made.text
                sid = made.json()["schedule_id"]
                listed = client.get("/sessions/api/schedules").json()
                assert [s["schedule_id"] for s in listed] == [sid]
                bad = client.post("/sessions/api/schedules", json={"text": "x", "cron": "nope"})
                assert bad.status_code == 400
                assert bad.json()["type"] == "InvalidInput"
                assert "cron" in bad.json()["detail"]
                assert client.delete(f"/sessions/api/schedules/{sid}").status_code == 204
                assert client.get("/sessions/api/schedules").json() == []
                client.close()

    def test_schedule_command_adds_lists_and_removes(self, tmp_path: Path) -> None:
        """agentnb schedule add|list|remove do the same from the command line."""
        url = f"sqlite:///{tmp_path / 'cli.db'}"
        with nb.Runtime(AGENT, store=url) as runtime:
            runtime.session("cli").run("hello", timeout=WAIT)

        def agentnb(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "agentnb.cli", "schedule", *args, "--store", url],
                check=False,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )

        added = agentnb("add", "cli", "daily report", "--every", "3600")
        assert added.returncode == 0, added.stderr
        sid = added.stdout.split()[1]
        assert sid in agentnb("list", "cli").stdout
        bad = agentnb("add", "cli", "x", "--cron", "nope")
        assert bad.returncode == 2
        assert "cron" in bad.stderr
        assert agentnb("remove", "cli", sid).returncode == 0
        assert agentnb("list", "cli").stdout.strip() == ""


class TestRemoteClient:
    """``nb.connect(...)``'s ``RemoteSession`` schedules through a real uvicorn server."""

    @staticmethod
    def _served(tmp_path: Path, **options: Any) -> Any:
        from agentnb import tokens

        runtime = nb.Runtime(AGENT, store=f"sqlite:///{tmp_path / 'remote.db'}", **options)
        token, _ = tokens.issue(runtime.store, "alice")
        return runtime, token

    def test_a_remote_schedule_fires_on_the_service_and_unschedules(self, tmp_path: Path) -> None:
        """schedule(every=timedelta) from the client is fired by the service's runtime as
        submits; schedules() shows it; unschedule() removes it."""
        from datetime import timedelta

        from tests.service.helpers import ServerThread

        runtime, token = self._served(tmp_path)
        with runtime, ServerThread(runtime) as server, nb.connect(server.url, token) as remote:
            session = remote.session("remote-ticks")
            made = session.schedule("tick", every=timedelta(seconds=1), catch_up="all")
            assert made.every == 1.0
            assert made.next_due == pytest.approx(made.created_at + 1)
            assert [s.schedule_id for s in session.schedules()] == [made.schedule_id]
            wait_for(lambda: sum(t.status == "completed" for t in session.tasks()) >= 2, "2 turns")
            listed = session.schedules()
            assert listed[0].last_fired is not None
            session.unschedule(made.schedule_id)
            assert session.schedules() == []
            local = runtime.open("remote-ticks", user_id="alice")
            check_each_due_once(runtime.store, local.key, 1.0)

    def test_remote_schedules_equal_the_local_ones(self, tmp_path: Path) -> None:
        """A cron schedule made remotely reads the same through the client and the local
        Session; a naive at= is read in tz, as locally."""
        from datetime import datetime

        from tests.service.helpers import ServerThread

        runtime, token = self._served(tmp_path, execute=False)
        with runtime, ServerThread(runtime) as server, nb.connect(server.url, token) as remote:
            session = remote.session("remote-cron")
            daily = session.schedule("report", cron="0 9 * * 1-5", tz="Europe/Paris", key="d")
            once = session.schedule("once", at=datetime(2031, 1, 15, 10, 0), tz="Asia/Tokyo")
            local = runtime.open("remote-cron", user_id="alice").schedules()
            assert session.schedules() == local
            assert {s.schedule_id for s in local} == {daily.schedule_id, once.schedule_id}
            when = once.next_due_at
            assert when is not None
            assert (when.isoformat(), str(when.tzinfo)) == (
                "2031-01-15T10:00:00+09:00",
                "Asia/Tokyo",
            )

    @pytest.mark.parametrize(
        ("kwargs", "field"),
        [
            ({"cron": "61 * * * *"}, "cron"),
            ({"every": 0.1}, "every"),
            ({"at": "tomorrow"}, "at"),
            ({"every": 5, "tz": "Mars/Olympus"}, "tz"),
            ({"every": 5, "overlap": "merge"}, "overlap"),
            ({"every": 5, "catch_up": "some"}, "catch_up"),
            ({}, "exactly one"),
        ],
    )
    def test_bad_values_are_invalid_input_naming_the_field(
        self, tmp_path: Path, kwargs: dict[str, Any], field: str
    ) -> None:
        """Each bad value comes back as InvalidInput naming its field; nothing is recorded."""
        from tests.service.helpers import ServerThread

        runtime, token = self._served(tmp_path, execute=False)
        with runtime, ServerThread(runtime) as server, nb.connect(server.url, token) as remote:
            session = remote.session("remote-bad")
            with pytest.raises(InvalidInput, match=field):
                session.schedule("tick", **kwargs)
            assert session.schedules() == []

    def test_keys_conflicts_and_unknown_ids_are_typed(self, tmp_path: Path) -> None:
        """The same key gives the same schedule; the key with another schedule is
        IdempotencyConflict; unscheduling an unknown id is InvalidInput."""
        from tests.service.helpers import ServerThread

        runtime, token = self._served(tmp_path, execute=False)
        with runtime, ServerThread(runtime) as server, nb.connect(server.url, token) as remote:
            session = remote.session("remote-keys")
            a = session.schedule("report", every=3600, key="hourly")
            assert session.schedule("report", every=3600, key="hourly") == a
            with pytest.raises(IdempotencyConflict):
                session.schedule("other", every=3600, key="hourly")
            with pytest.raises(InvalidInput, match="no active schedule"):
                session.unschedule("sch_nope")
            assert [s.schedule_id for s in session.schedules()] == [a.schedule_id]
