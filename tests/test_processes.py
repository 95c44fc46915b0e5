"""Worker processes sharing the embedded SQLite store (issue 27, item 3): a runtime made with
``processes=N`` forks N workers that claim sessions with queued work from the file, as
``agentnb worker --store sqlite:///...`` processes do; the runtime itself only submits and
observes. Durability is proven by ``kill -9`` of a worker in the middle of a tool call.

The agent is defined here, at the top level of the test module: forked workers run this very
object, spawned ones (every test of ``TestWorkerProcesses`` runs under both start methods,
issue 36) import it again as ``tests.test_processes:AGENT``. A task's text says what it does:
``task <n>`` answers at once; with ``idem <s>`` it first calls an idempotent tool that takes
``s`` seconds, with ``risky <s>`` a non-idempotent one. Each tool says which process ran it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import agentnb as nb
from agentnb.errors import InvalidInput
from agentnb.holders import holder_alive

REPO = Path(__file__).resolve().parents[1]
WAIT = 60.0
"""Seconds any one wait may take before the test fails (never a threshold on speed)."""


@nb.tool(idempotent=True)
def idem(seconds: float) -> str:
    """Sleep, then say which process slept; safe to run again."""
    time.sleep(seconds)
    return f"pid {os.getpid()}"


@nb.tool
def risky(seconds: float) -> str:
    """Sleep, then say which process slept; not safe to run twice."""
    time.sleep(seconds)
    return f"pid {os.getpid()}"


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall:
    tasks = [i for i, m in enumerate(messages) if m.role == "user" and m.text.startswith("task")]
    task = messages[tasks[-1]]
    words = task.text.split()
    if messages[-1] is task:
        for tool in ("idem", "risky"):
            if tool in words:
                return nb.ToolCall(tool, {"seconds": float(words[words.index(tool) + 1])})
    ran = [m.text for m in messages[tasks[-1] :] if m.role == "tool"]
    return " ".join([f"done: {task.text}", *ran])


AGENT = nb.Agent(
    name="Process test",
    agent_id="process-agent",
    model=nb.ScriptedModel(_reply),
    tools=[idem, risky],
)

HELPER = nb.Agent(
    name="Helper",
    agent_id="process-helper",
    model=nb.ScriptedModel(lambda messages: f"helped in pid {os.getpid()}"),
)
BOSS = nb.Agent(
    name="Boss",
    agent_id="process-boss",
    model=nb.ScriptedModel(
        lambda messages: (
            messages[-1].text
            if messages[-1].role == "tool"
            else nb.ToolCall("process-helper", {"task": "help"})
        )
    ),
    tools=[nb.subagent(HELPER)],
)


# A process that makes a runtime with two workers, says their pids and the turn it submits,
# then waits to be killed (its workers are then orphans: their parent is gone).
_PARENT = """
import sys, time
import agentnb as nb
from tests.test_processes import AGENT
runtime = nb.Runtime(AGENT, store=sys.argv[1], processes=2)
print(*runtime.worker_pids, flush=True)
print(runtime.session("orphaned").submit("task slow idem 2.0").turn_id, flush=True)
time.sleep(600)
"""


@pytest.fixture(params=["fork", "spawn"])
def start_method(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The start method the workers of this test use, forced through AGENTNB_START_METHOD."""
    method: str = request.param
    monkeypatch.setenv("AGENTNB_START_METHOD", method)
    return method


@pytest.fixture
def make(tmp_path: Path) -> Iterator[Callable[..., nb.Runtime]]:
    """Runtimes on one SQLite file of this test, closed (workers stopped) after it."""
    made: list[nb.Runtime] = []

    def runtime(**kwargs: object) -> nb.Runtime:
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        made.append(nb.Runtime(AGENT, store=url, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    yield runtime
    for runtime_ in made:
        runtime_.close()


def log_of(store: nb.SessionStore, key: nb.SessionKey) -> list[nb.Event]:
    events: list[nb.Event] = []
    while page := store.read_after(key, len(events), 1000):
        events += page
    return events


def outputs(store: nb.SessionStore, key: nb.SessionKey) -> list[str]:
    return [e.payload["message"]["text"] for e in log_of(store, key) if e.type == "turn/output"]


def check_runs_never_overlap(events: list[nb.Event]) -> None:
    """Each run ends before the next one starts (one execution at a time)."""
    open_run = None
    for e in events:
        if e.type == "run/start":
            assert open_run is None, f"run {e.run_id} started while {open_run} ran"
            open_run = e.run_id
        elif e.type == "run/end":
            assert open_run == e.run_id
            open_run = None


def wait_for(predicate: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def worker_pids(runtime: nb.Runtime) -> set[int]:
    return set(runtime.worker_pids)


@pytest.mark.usefixtures("start_method")
class TestWorkerProcesses:
    def test_sessions_run_in_the_worker_processes(self, make: Callable[..., nb.Runtime]) -> None:
        """24 sessions x 2 tasks with processes=2: every task completes once, in order, in a
        worker process (both of them: one holds at most 16 sessions at once), never in the
        runtime's own; the runtime only submits and waits."""
        runtime = make(processes=2)
        assert runtime.execute is False
        workers = worker_pids(runtime)
        assert len(workers) == 2
        assert os.getpid() not in workers
        sessions = [runtime.session(f"s{i}") for i in range(24)]
        receipts = [
            [s.submit(f"task {i}.0 idem 1.0"), s.submit(f"task {i}.1")]
            for i, s in enumerate(sessions)
        ]
        ran: set[int] = set()
        for session, pair in zip(sessions, receipts, strict=True):
            first, second = (session.wait(r, timeout=WAIT) for r in pair)
            assert (first.status, second.status) == ("completed", "completed")
            assert first.output is not None
            ran.add(int(first.output.rsplit(" ", 1)[1]))
            check_runs_never_overlap(log_of(runtime.store, session.key))
        assert ran == workers

    def test_sub_agent_children_are_claimed_by_the_workers(self, tmp_path: Path) -> None:
        """A parent run in a worker process waits for its sub-agent's child session, which a
        worker claims from the file like any queued work; the parent completes."""
        runtime = nb.Runtime(BOSS, store=f"sqlite:///{tmp_path / 'tree.db'}", processes=2)
        try:
            session = runtime.session("tree")
            outcome = session.run("delegate", timeout=WAIT)
            assert outcome.status == "completed"
            pid = int(outcome.output.rsplit(" ", 1)[1])
            assert pid in worker_pids(runtime)
            (child,) = session.children()
            assert child.status == "completed"
        finally:
            runtime.close()

    def test_workers_run_sync_tools_after_the_parent_ran_one(
        self, make: Callable[..., nb.Runtime], tmp_path: Path
    ) -> None:
        """A process whose own runtime ran a sync tool (so a tool thread idles in it) forks
        workers that run sync tools too: the child counts none of its parent's threads."""
        with nb.Runtime(AGENT, store=f"sqlite:///{tmp_path / 'own.db'}") as own:
            first = own.session("here").run("task 0 idem 0.01", timeout=WAIT)
            assert first.output == f"done: task 0 idem 0.01 pid {os.getpid()}"
        runtime = make(processes=2)
        session = runtime.session("there")
        outcome = session.run("task 1 idem 0.01", timeout=WAIT)
        assert outcome.status == "completed"
        assert outcome.output is not None
        assert int(outcome.output.split()[-1]) in worker_pids(runtime)  # "... pid <n>"

    def test_a_killed_worker_is_taken_over_once_it_is_dead(
        self, make: Callable[..., nb.Runtime]
    ) -> None:
        """kill -9 of a worker in the middle of its tool calls: the other worker claims its
        sessions as soon as it sees the holder dead, long before the leases (10 minutes)
        expire; the idempotent calls run again by themselves, the non-idempotent one waits
        for a person to reconcile it; nothing is lost."""
        runtime = make(processes=2, lease_ttl=600, auto_resume=True)
        sessions = [runtime.session(f"k{i}") for i in range(3)]
        texts = [
            ["task a idem 3.0", "task b"],
            ["task a idem 3.0", "task b"],
            ["task a risky 3.0", "task b"],
        ]
        for session, pair in zip(sessions, texts, strict=True):
            for text in pair:
                session.submit(text)

        def dispatched(key: nb.SessionKey) -> bool:
            return any(e.type == "action/start" for e in log_of(runtime.store, key))

        for session in sessions:
            wait_for(lambda s=session: dispatched(s.key), "the tool calls")

        def holder(key: nb.SessionKey) -> int:
            lease = runtime.store.current_lease(key)
            assert lease is not None
            return int(lease.owner.split(":")[1])  # host:pid:...

        holders = {s.key: holder(s.key) for s in sessions}
        risky_session = sessions[2]
        doomed = holders[risky_session.key]
        (survivor,) = worker_pids(runtime) - {doomed}
        os.kill(doomed, signal.SIGKILL)
        wait_for(lambda: risky_session.inspect().uncertain_tool_calls, "the uncertain call")
        (call,) = risky_session.inspect().uncertain_tool_calls
        assert call.tool_name == "risky"
        risky_session.reconcile({call.call_id: nb.ToolOutcome.success("sent")}, reason="checked")
        risky_session.resume(call.turn_id or "")
        for session in sessions[:2]:
            wait_for(lambda s=session: len(outputs(runtime.store, s.key)) == 2, "both tasks")
            first, second = outputs(runtime.store, session.key)
            assert first == f"done: task a idem 3.0 pid {survivor}"  # rerun if it was cut off
            assert second == "done: task b"
        wait_for(lambda: len(outputs(runtime.store, risky_session.key)) == 2, "both tasks")
        assert outputs(runtime.store, risky_session.key) == [
            "done: task a risky 3.0 sent",
            "done: task b",
        ]
        for session in sessions:
            events = log_of(runtime.store, session.key)
            check_runs_never_overlap(events)
            calls = sum(e.type == "action/start" for e in events)
            cut_off = holders[session.key] == doomed and session is not risky_session
            assert calls == (2 if cut_off else 1)  # run again only if idempotent and cut off

    def test_closing_the_runtime_stops_its_workers_cooperatively(
        self, make: Callable[..., nb.Runtime]
    ) -> None:
        """close() ends a running turn with a committed reason (interrupted), as a runtime
        that executes itself does, and every worker exits cleanly."""
        runtime = make(processes=2)
        session = runtime.session("closing")
        receipt = session.submit("task slow idem 2.0")
        wait_for(lambda: any(e.type == "action/start" for e in session.log.scan()), "the call")
        workers = worker_pids(runtime)
        runtime.close()
        for pid in workers:  # exited, and reaped
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        with nb.Runtime(AGENT, store=runtime.store.url, execute=False) as reader:
            task = next(
                t for t in reader.session("closing").tasks() if t.turn_id == receipt.turn_id
            )
            assert task.status == "interrupted"

    def test_workers_stop_when_their_runtimes_process_is_killed(self, tmp_path: Path) -> None:
        """kill -9 of the process that made the runtime (a notebook's kernel, say): its
        workers notice, end the running turn with a committed reason and exit; nothing is
        left running."""
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        parent = subprocess.Popen(
            [sys.executable, "-c", _PARENT, url],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert parent.stdout is not None
            workers = [int(pid) for pid in parent.stdout.readline().split()]
            turn_id = parent.stdout.readline().strip()
            with nb.Runtime(AGENT, store=url, execute=False) as reader:
                session = reader.session("orphaned")
                wait_for(
                    lambda: any(e.type == "action/start" for e in session.log.scan()), "the call"
                )
                parent.kill()
                parent.communicate()

                def gone(pid: int) -> bool:
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        return True
                    return False

                wait_for(lambda: all(gone(pid) for pid in workers), "the workers to exit")
                (task,) = [t for t in session.tasks() if t.turn_id == turn_id]
                assert task.status == "interrupted"
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.communicate()

    @pytest.mark.parametrize("processes", [0, -1, 65, 1.5, True, "2"])
    def test_bad_process_counts_are_invalid_input(
        self, make: Callable[..., nb.Runtime], processes: object
    ) -> None:
        """A count that is not an int in 1..64 raises InvalidInput; nothing is started."""
        with pytest.raises(InvalidInput, match="processes"):
            make(processes=processes)

    def test_workers_need_a_store_processes_share_and_a_runtime_that_executes(self) -> None:
        """processes > 1 on memory:// (no other process sees it), or with execute=False (a
        runtime that executes nothing), raises InvalidInput saying what to do."""
        with pytest.raises(InvalidInput, match="not memory://"):
            nb.Runtime(AGENT, store="memory://", processes=2)
        with pytest.raises(InvalidInput, match="execute=False"):
            nb.Runtime(AGENT, store="memory://", processes=2, execute=False)


class TestDeadHolders:
    def test_a_killed_process_not_yet_reaped_is_a_dead_holder(self) -> None:
        """A holder killed by a signal is dead at once, even while its parent has not
        reaped it yet (a zombie, as a killed worker is until its runtime looks)."""
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                (
                    "import time; from agentnb.holders import new_owner; "
                    "print(new_owner(), flush=True); time.sleep(600)"
                ),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert child.stdout is not None
            owner = child.stdout.readline().strip()
            assert holder_alive(owner) is True
            os.kill(child.pid, signal.SIGKILL)
            wait_for(lambda: holder_alive(owner) is False, "the holder to be seen dead")
            assert child.returncode is None  # not reaped: it is a zombie
        finally:
            child.kill()
            child.communicate()


class TestWorkerCommand:
    def test_agentnb_worker_serves_a_sqlite_store(self, tmp_path: Path) -> None:
        """`agentnb worker --store sqlite:///...` claims the sessions a client runtime
        (execute=False) submits to the file, and runs them."""
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        with nb.Runtime(AGENT, store=url, execute=False) as client:
            session = client.session("cli")
            receipt = session.submit("task 1")
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agentnb.cli",
                    "worker",
                    "--store",
                    url,
                    "--agent",
                    "tests.test_processes:AGENT",
                    "--poll",
                    "0.2",
                ],
                cwd=REPO,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            try:
                assert session.wait(receipt, timeout=WAIT).output == "done: task 1"
            finally:
                worker.send_signal(signal.SIGTERM)
                _, err = worker.communicate(timeout=WAIT)
            assert worker.returncode == 0, err


class TestAgentPaths:
    def test_an_agent_path_is_accepted_and_served_by_spawned_workers(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Runtime("module:attribute", processes=2) imports the agent itself, and spawned
        workers import it by that path and run the session's turn."""
        monkeypatch.setenv("AGENTNB_START_METHOD", "spawn")
        url = f"sqlite:///{tmp_path / 'path.db'}"
        with nb.Runtime("tests.test_processes:AGENT", store=url, processes=2) as runtime:
            assert runtime.agent is AGENT
            outcome = runtime.session("by-path").run("task 1 idem 0.01", timeout=WAIT)
        assert outcome.status == "completed"
        assert outcome.output is not None
        assert int(outcome.output.split()[-1]) != os.getpid()

    def test_an_agent_no_module_holds_is_refused_under_spawn(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An agent made inside a function (as in a notebook cell) cannot be imported by a
        spawned worker: InvalidInput says to define it in a module; nothing starts."""
        monkeypatch.setenv("AGENTNB_START_METHOD", "spawn")
        local = nb.Agent(name="Local", agent_id="local", model=nb.ScriptedModel(["hi"]))
        with pytest.raises(InvalidInput, match="top level of a module"):
            nb.Runtime(local, store=f"sqlite:///{tmp_path / 'l.db'}", processes=2)

    @pytest.mark.parametrize(
        ("spec", "message"),
        [
            ("no-colon", "not a path"),
            ("tests.no_such_module:AGENT", "cannot be imported"),
            ("tests.test_processes:NOPE", "no attribute"),
            ("tests.test_processes:WAIT", "not an nb.Agent"),
        ],
    )
    def test_bad_agent_paths_are_invalid_input(self, spec: str, message: str) -> None:
        """A path that is malformed, names no module, no attribute or no agent raises
        InvalidInput saying which."""
        with pytest.raises(InvalidInput, match=message):
            nb.Runtime(spec, store="memory://")

    def test_an_unknown_start_method_is_invalid_input(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """AGENTNB_START_METHOD other than fork or spawn raises InvalidInput naming it."""
        monkeypatch.setenv("AGENTNB_START_METHOD", "forkserver-ish")
        with pytest.raises(InvalidInput, match="AGENTNB_START_METHOD"):
            nb.Runtime(AGENT, store=f"sqlite:///{tmp_path / 'm.db'}", processes=2)


class TestFollowersAcrossProcesses:
    def test_a_workers_commits_reach_a_view_of_the_notebook(
        self, make: Callable[..., nb.Runtime]
    ) -> None:
        """With processes=2 a worker process commits the turn; the notebook's SessionView
        (whose commit bus never carries those commits) folds every one of them from the
        store."""
        pytest.importorskip("ipywidgets")
        from agentnb.widgets import SessionView

        runtime = make(processes=2)
        assert runtime.execute is False  # every commit of the turn is a worker's
        session = runtime.session("viewed")
        view = SessionView(session, redraw_interval=0.0)
        try:
            assert session.run("task 0", timeout=60).status == "completed"
            head = session.log.head()
            deadline = time.monotonic() + 60
            while view.cursor < head:
                assert time.monotonic() < deadline, "the view never reached the worker's commits"
                time.sleep(0.05)
            assert session.snapshot().cursor == head
        finally:
            view.close()
