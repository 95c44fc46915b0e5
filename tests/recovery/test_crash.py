"""Crash recovery with real processes: ``kill -9`` at random moments, then recover and finish.

Each trial starts ``tests/recovery/_crash_child.py`` on a fresh SQLite file, lets it run one
task, kills it with SIGKILL at a random moment, and then drives recovery from this process with
a new ``nb.Runtime`` on the same file. Four cases: during a streamed model reply, during an
idempotent tool, during a non-idempotent tool, and while an approval is pending. Every trial
checks that no event the child saw committed is lost, that seqs stay gapless, that no tool
effect is duplicated beyond what the contract allows (tools count their effects in a side file),
that the uncertain set is exactly the dispatched calls without a result, that the turn
completes, and that the recovering runtime wrote nothing before the dead process's lease ran
out. Trials of one case run a few at a time, each on its own files.

Timeouts here only stop a broken test from hanging; nothing asserts on how long a step takes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import random
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentnb as nb
from tests.recovery._crash_child import (
    KEY,
    LONG_ANSWER,
    RECOVERING_LEASE,
    SESSION_ID,
    USER_ID,
    make_agent,
    make_script,
    side_lines,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
GUARD = 30.0
"""Seconds any one wait may take before the trial fails instead of hanging."""
TRIALS = 20
WORKERS = 4
"""Trials of one case running at once: most of a trial is waiting for a lease to expire."""
RESUMED = "resumed answer"
STRAY_CALLS = 1.0
"""Seconds a closed runtime's leftover worker-thread store calls may take (renewals, and
interrupt watchers that wait up to 0.5 s)."""


# -- the child ---------------------------------------------------------------------------------


class Child:
    """One ``_crash_child`` process; its ``SEQ`` lines are collected as they arrive."""

    def __init__(self, trial_dir: Path, case: str) -> None:
        self.db = trial_dir / "db.sqlite"
        self.side = trial_dir / "side.txt"
        self._err_path = trial_dir / "child.err"
        self._err = self._err_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.recovery._crash_child",
                case,
                str(self.db),
                str(self.side),
            ],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            bufsize=1,
        )
        self.seqs: dict[int, str] = {}
        """Events the child printed as committed: seq -> type."""
        self._lines: queue.Queue[list[str] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line cut off by SIGKILL was never acknowledged
                self._lines.put(line.split())
        self._lines.put(None)

    def _take(self, parts: list[str]) -> list[str]:
        if parts[0] == "SEQ":
            self.seqs[int(parts[1])] = parts[2]
        return parts

    def expect(self, accept: Callable[[list[str]], bool]) -> list[str]:
        """The next line ``accept`` takes (SEQ lines on the way are recorded)."""
        deadline = time.monotonic() + GUARD
        while True:
            try:
                parts = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"child printed nothing expected: {self.stderr()}") from None
            if parts is None:
                raise AssertionError(f"child exited early: {self.stderr()}")
            if accept(self._take(parts)):
                return parts

    def kill(self) -> None:
        """SIGKILL, reap, and collect every complete line it printed before dying."""
        self.proc.kill()
        self.proc.wait(GUARD)
        self._reader.join(GUARD)
        while (parts := self._lines.get_nowait()) is not None:
            self._take(parts)

    def stderr(self) -> str:
        self._err.flush()
        text = self._err_path.read_text(errors="replace")
        # The head has what went wrong; the tail has where each thread stood (faulthandler).
        return text if len(text) < 6000 else f"{text[:3000]}\n...\n{text[-3000:]}"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(GUARD)
        self._reader.join(GUARD)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._err.close()


# -- one trial ---------------------------------------------------------------------------------


@dataclass
class Crash:
    """What was true right after the kill, before anything else touched the store."""

    db: Path
    child_owner: str
    seqs: dict[int, str]
    events: list[nb.Event]
    lease_owner: str | None
    lease_epoch: int
    lease_expires: float
    side: list[tuple[str, str]]
    killed_at: float
    """Wall-clock time right after the kill: the holder was dead from then on."""

    @property
    def head(self) -> int:
        return len(self.events)

    @property
    def run_open(self) -> bool:
        """Whether the child was inside a run when it died."""
        return (
            bool(self.events)
            and self.events[-1].type != "run/end"
            and any(e.type == "run/start" for e in self.events)
        )

    @property
    def held_lease(self) -> bool:
        return self.lease_owner == self.child_owner

    def dispatched(self) -> set[str]:
        return {e.payload["call_id"] for e in self.events if e.type == "tool/dispatch"}

    def resulted(self) -> set[str]:
        return {e.payload["call_id"] for e in self.events if e.type == "tool/result"}

    def uncertain(self) -> set[str]:
        return self.dispatched() - self.resulted()


def _lease_row(db: Path) -> tuple[str | None, int, float]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute(
            "SELECT lease_owner, lease_epoch, lease_expires FROM sessions "
            "WHERE namespace=? AND user_id=? AND agent_id=? AND session_id=?",
            (KEY.namespace, KEY.user_id, KEY.agent_id, KEY.session_id),
        ).fetchone()
    assert row is not None, "the child never created its session"
    return row[0], int(row[1]), float(row[2])


def crash(child: Child, store: nb.SessionStore, kill_when: Callable[[Child], None]) -> Crash:
    """Run the child until ``kill_when`` returns, kill it, and record the state it left."""
    owner = child.expect(lambda parts: parts[0] == "OWNER")[1]
    kill_when(child)
    child.kill()
    killed_at = time.time()
    lease_owner, lease_epoch, lease_expires = _lease_row(child.db)
    current = store.current_lease(KEY)
    # The lease stays the dead owner's until someone takes over; nobody else holds it yet.
    if current is None:
        assert lease_owner is None or time.time() >= lease_expires
    else:
        assert (current.owner, current.epoch) == (owner, lease_epoch)
        assert lease_owner == owner
    return Crash(
        child.db,
        owner,
        dict(child.seqs),
        list(store.scan(KEY)),
        lease_owner,
        lease_epoch,
        lease_expires,
        side_lines(child.side),
        killed_at,
    )


def after_seqs(child: Child, count: int, delay: float) -> None:
    """Wait until the child printed ``count`` committed events, then ``delay`` seconds more."""
    child.expect(lambda parts: parts[0] == "SEQ" and len(child.seqs) >= count)
    time.sleep(delay)


def after_type(child: Child, type_: str, delay: float) -> None:
    """Wait until the child printed an event of ``type_``, then ``delay`` seconds more."""
    child.expect(lambda parts: parts[0] == "SEQ" and parts[2] == type_)
    time.sleep(delay)


@contextlib.contextmanager
def recovering(case: str, child: Child, store: nb.SessionStore) -> Iterator[nb.Session]:
    """A fresh runtime on the dead child's store; its model has its own script."""
    model = nb.ScriptedModel(make_script(case, RESUMED))
    runtime = nb.Runtime(
        make_agent(case, child.side, model), store=store, lease_ttl=RECOVERING_LEASE
    )
    try:
        yield runtime.session(SESSION_ID, user_id=USER_ID)
    finally:
        runtime.close()


def wait_recovered(session: nb.Session, after: int) -> nb.Event:
    """The ``recovery/applied`` the recovering runtime commits once it holds the lease."""
    for event in session.log.follow(after, idle_timeout=GUARD):
        if event.type == "recovery/applied":
            return event
    raise AssertionError("the recovering runtime never closed the crashed run")


def recover_open_run(
    session: nb.Session, crashed: Crash, store: nb.SessionStore, patient: bool
) -> str:
    """Close the crashed run and check how it reads; ``patient`` looks before recovery too."""
    turn_id = crashed.events[0].turn_id or ""
    assert crashed.held_lease, "the child was executing, so it held the lease when it died"
    if patient:
        # The holder is dead (same host, process gone): reads say the turn was cut off at
        # once, while its lease has not yet expired.
        inspection = session.inspect()
        assert [t.status for t in session.tasks()] == ["interrupted"]
        assert inspection.interrupted_turn == turn_id
        assert inspection.active_runs == ()
        assert {c.call_id for c in inspection.uncertain_tool_calls} == crashed.uncertain()
        holder = inspection.holder
        assert holder is None or (holder.owner == crashed.child_owner and holder.alive is False)
    session.start()  # takes over at once: the holder is known dead
    recovery = wait_recovered(session, crashed.head)
    assert recovery.payload["reason"] == "crash"
    assert recovery.turn_id == turn_id
    assert recovery.occurred_at.timestamp() >= crashed.killed_at
    assert [t.status for t in session.tasks()] == ["interrupted"]
    inspection = session.inspect()
    assert inspection.interrupted_turn == turn_id
    assert {c.call_id for c in inspection.uncertain_tool_calls} == crashed.uncertain()
    return turn_id


def roles(session: nb.Session) -> list[str]:
    return [m.role for m in session.transcript().messages]


def check_log(session: nb.Session, crashed: Crash) -> list[nb.Event]:
    """No acknowledged event lost, seqs gapless, nothing written before the holder died."""
    events = list(session.log.scan())
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for seq, type_ in crashed.seqs.items():
        assert seq <= len(events), f"committed event {seq} ({type_}) is gone"
        assert events[seq - 1].type == type_, f"committed event {seq} changed"
    assert [e.event_id for e in events[: crashed.head]] == [e.event_id for e in crashed.events]
    assert max(crashed.seqs, default=0) <= crashed.head
    if crashed.held_lease:
        for event in events[crashed.head :]:
            assert event.occurred_at.timestamp() >= crashed.killed_at, (
                f"{event.type} (seq {event.seq}) was written before its holder died"
            )
    if len(events) > crashed.head:  # the taker-over wrote under a newer lease epoch
        assert _lease_row(crashed.db)[1] > crashed.lease_epoch
    crash_recoveries = [
        e
        for e in events[crashed.head :]
        if e.type == "recovery/applied" and e.payload.get("reason") == "crash"
    ]
    assert len(crash_recoveries) == (1 if crashed.run_open else 0)
    assert not any(e.type == "recovery/applied" for e in events[: crashed.head])
    return events


Trial = Callable[[Child, nb.SessionStore, random.Random, int], str]
"""One trial: the child to kill, a store on its file, its random source and its index."""


def run_trials(tmp_path: Path, case: str, trial: Trial) -> list[str]:
    """``TRIALS`` trials of ``case``, ``WORKERS`` at a time; each returns what it hit."""
    stores: list[nb.SessionStore] = []

    def one(i: int) -> str:
        trial_dir = tmp_path / f"trial-{i:02d}"
        trial_dir.mkdir()
        child = Child(trial_dir, case)
        try:
            stores.append(store := nb.open_store(f"sqlite:///{child.db}"))
            return trial(child, store, random.Random(f"{case}-{i}"), i)
        except AssertionError as exc:
            raise AssertionError(f"{case} trial {i}: {exc}") from exc
        finally:
            child.close()

    try:
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            outcomes = list(pool.map(one, range(TRIALS)))
    finally:
        # A closed runtime may still be inside a store call on a worker thread (see
        # test_close_races.py); closing the store under it can crash this process.
        time.sleep(STRAY_CALLS)
        for store in stores:
            store.close()
    print(f"{case}: {dict(Counter(outcomes))}")
    return outcomes


# -- the cases ---------------------------------------------------------------------------------


class TestKillDuringStreamedReply:
    def test_committed_chunks_survive_and_resume_completes(self, tmp_path: Path) -> None:
        """A kill mid-stream loses no committed chunk; the turn is interrupted; resume ends it."""

        def trial(child: Child, store: nb.SessionStore, rng: random.Random, i: int) -> str:
            crashed = crash(
                child, store, lambda c: after_seqs(c, rng.randint(6, 14), rng.uniform(0, 0.1))
            )
            types = [e.type for e in crashed.events]
            assert "model/dispatch" in types
            assert "model/end" not in types, "the kill came after the stream ended"
            chunks = [e for e in crashed.events if e.type == "model/chunk"]
            text = "".join(e.payload["text"] for e in chunks)
            with recovering("stream", child, store) as session:
                turn_id = recover_open_run(session, crashed, store, patient=i % 2 == 0)
                assert session.inspect().uncertain_tool_calls == ()
                outcome = session.resume(turn_id).wait(GUARD)
                assert (outcome.status, outcome.turn_id) == ("completed", turn_id)
                assert outcome.output == RESUMED  # the new process called its model again
                assert [t.status for t in session.tasks()] == ["completed"]
                assert roles(session) == ["user", "assistant"]  # no half reply in the transcript
                events = check_log(session, crashed)
            kept = [e for e in events if e.type == "model/chunk"][: len(chunks)]
            assert kept == chunks
            assert LONG_ANSWER.startswith(text)  # committed in order, nothing reordered
            return f"{len(chunks)}-chunks" if chunks else "no-chunk"

        outcomes = run_trials(tmp_path, "stream", trial)
        assert any(o != "no-chunk" for o in outcomes), "no trial was killed after a chunk commit"


def tool_effects(side: list[tuple[str, str]], word: str) -> Counter[str]:
    return Counter(call_id for w, call_id in side if w == word)


def after_effect(child: Child, delay: float) -> None:
    """Wait until the tool's effect is in the side file, then ``delay`` seconds more."""
    deadline = time.monotonic() + GUARD
    while not any(word == "DONE" for word, _ in side_lines(child.side)):
        assert child.proc.poll() is None, f"child exited early: {child.stderr()}"
        assert time.monotonic() < deadline, "the tool never did its effect"
        time.sleep(0.002)
    time.sleep(delay)


def tool_kill(rng: random.Random, i: int) -> Callable[[Child], None]:
    """When to kill: while the call streams in, just after the effect, or around the tool."""
    if i % 4 == 0:
        return lambda c: after_seqs(c, rng.randint(1, 9), rng.uniform(0, 0.1))
    if i % 4 == 1:  # the effect happened; its result is most likely not committed yet
        return lambda c: after_effect(c, rng.uniform(0, 0.02))
    return lambda c: after_type(c, "action/start", rng.uniform(0, 0.3))


def check_tool_log(events: list[nb.Event], crashed: Crash, side: list[tuple[str, str]]) -> str:
    """One call, one result; effects only after their dispatch committed; returns which window."""
    calls = {e.payload["call_id"] for e in events if e.type == "tool/requested"}
    assert len(calls) == 1, f"the turn makes one tool call, the log has {sorted(calls)}"
    (call_id,) = calls
    results = [e for e in events if e.type == "tool/result"]
    assert [e.payload["call_id"] for e in results] == [call_id]
    # Commit before side effect: whatever started before the kill had a committed dispatch.
    assert set(tool_effects(crashed.side, "START")) <= crashed.dispatched()
    assert set(tool_effects(side, "START")) | set(tool_effects(side, "DONE")) == {call_id}
    if not crashed.dispatched():
        assert crashed.side == [], "a tool started before its dispatch was committed"
        return "before-dispatch"
    if crashed.uncertain():
        done = "effect-done" if tool_effects(crashed.side, "DONE") else "effect-unknown"
        return f"uncertain-{done}"
    return "after-result" if crashed.run_open else "after-completion"


class TestKillDuringIdempotentTool:
    def test_uncertain_call_is_run_again_once(self, tmp_path: Path) -> None:
        """A dispatched idempotent call without result is uncertain, then re-run by resume."""

        def trial(child: Child, store: nb.SessionStore, rng: random.Random, i: int) -> str:
            crashed = crash(child, store, tool_kill(rng, i))
            with recovering("idempotent", child, store) as session:
                if crashed.run_open:
                    turn_id = recover_open_run(session, crashed, store, patient=i % 2 == 0)
                    outcome = session.resume(turn_id).wait(GUARD)  # allowed: idempotent
                    assert (outcome.status, outcome.turn_id) == ("completed", turn_id)
                assert [t.status for t in session.tasks()] == ["completed"]
                assert roles(session) == ["user", "assistant", "tool", "assistant"]
                events = check_log(session, crashed)
            side = side_lines(child.side)
            window = check_tool_log(events, crashed, side)
            (call_id,) = set(tool_effects(side, "START"))
            attempts = [
                e.payload["attempt"]
                for e in events
                if e.type == "tool/dispatch" and e.payload["call_id"] == call_id
            ]
            done_before = tool_effects(crashed.side, "DONE")[call_id]
            if call_id in crashed.uncertain():
                assert attempts == [1, 2]
                assert tool_effects(side, "START")[call_id] == 2
                assert tool_effects(side, "DONE")[call_id] == done_before + 1 <= 2
            else:
                assert attempts == [1]
                assert tool_effects(side, "DONE")[call_id] == 1
            return window

        outcomes = run_trials(tmp_path, "idempotent", trial)
        assert "uncertain-effect-unknown" in outcomes, "no kill hit the tool mid-effect"
        assert "uncertain-effect-done" in outcomes, "no kill came between effect and result"
        assert "before-dispatch" in outcomes, "no kill came before the dispatch"


class TestKillDuringNonIdempotentTool:
    def test_uncertain_call_blocks_resume_until_reconciled(self, tmp_path: Path) -> None:
        """An uncertain plain call blocks resume; reconcile records it; it never runs again."""

        def trial(child: Child, store: nb.SessionStore, rng: random.Random, i: int) -> str:
            crashed = crash(child, store, tool_kill(rng, i))
            uncertain = crashed.uncertain()
            expected: dict[str, nb.ToolOutcome] = {}
            with recovering("plain", child, store) as session:
                if crashed.run_open:
                    turn_id = recover_open_run(session, crashed, store, patient=i % 2 == 0)
                    if uncertain:
                        with pytest.raises(nb.UncertainToolCalls) as refused:
                            session.resume(turn_id)
                        assert {c.call_id for c in refused.value.calls} == uncertain
                        done = tool_effects(crashed.side, "DONE")
                        expected = {
                            call_id: nb.ToolOutcome.success("the order exists")
                            if done[call_id]
                            else nb.ToolOutcome.unknown()
                            for call_id in uncertain
                        }
                        session.reconcile(expected, reason="checked the side file")
                        assert session.inspect().uncertain_tool_calls == ()
                    outcome = session.resume(turn_id).wait(GUARD)
                    assert (outcome.status, outcome.turn_id) == ("completed", turn_id)
                assert [t.status for t in session.tasks()] == ["completed"]
                assert roles(session) == ["user", "assistant", "tool", "assistant"]
                events = check_log(session, crashed)
            side = side_lines(child.side)
            window = check_tool_log(events, crashed, side)
            (call_id,) = set(tool_effects(side, "START"))
            dispatches = [e for e in events if e.type == "tool/dispatch"]
            assert [e.payload["attempt"] for e in dispatches] == [1]  # never re-run
            assert tool_effects(side, "START")[call_id] == 1
            assert tool_effects(side, "DONE")[call_id] <= 1
            (result,) = [e for e in events if e.type == "tool/result"]
            if call_id in uncertain:
                assert result.payload.get("reconciled") is True
                assert result.payload["status"] == expected[call_id].status
                assert result.payload["output"] == expected[call_id].text
            else:
                assert tool_effects(side, "DONE")[call_id] == 1
                assert result.payload["status"] == "success"
            return window

        outcomes = run_trials(tmp_path, "plain", trial)
        assert "uncertain-effect-unknown" in outcomes, "no kill hit the tool mid-effect"
        assert "uncertain-effect-done" in outcomes, "no kill came between effect and result"
        assert "before-dispatch" in outcomes, "no kill came before the dispatch"


class TestKillDuringPendingApproval:
    def test_request_survives_and_respond_runs_the_tool_once(self, tmp_path: Path) -> None:
        """A pending approval outlives the process; respond completes it and the tool runs once."""

        def trial(child: Child, store: nb.SessionStore, rng: random.Random, i: int) -> str:
            seen: list[str] = []

            def kill_when(c: Child) -> None:
                seen.append(c.expect(lambda parts: parts[0] == "PENDING")[1])
                time.sleep(rng.uniform(0, 0.8))  # sometimes before the idle child lets go

            crashed = crash(child, store, kill_when)
            (request_id,) = seen
            assert not crashed.run_open
            assert crashed.side == []
            with recovering("approval", child, store) as session:
                assert list(session.pending()) == [request_id]
                turn_id = session.pending()[request_id].turn_id
                with pytest.raises(nb.CannotResume) as refused:
                    session.resume(turn_id)
                assert not isinstance(refused.value, nb.UncertainToolCalls)
                outcome = session.respond(request_id, True).wait(GUARD)
                assert (outcome.status, outcome.turn_id) == ("completed", turn_id)
                assert outcome.output == RESUMED
                assert session.pending() == {}
                assert roles(session) == ["user", "assistant", "tool", "assistant"]
                events = check_log(session, crashed)
            side = side_lines(child.side)
            assert side == [("START", request_id), ("DONE", request_id)]
            (result,) = [e for e in events if e.type == "tool/result"]
            assert result.payload["status"] == "success"
            return "lease-held" if crashed.held_lease else "lease-released"

        run_trials(tmp_path, "approval", trial)
