"""Middleware that records (``Agent(middleware=[...])``) and reducers of application events
(``register_event_type(..., reducer=)``, ``session.app_state``), on a real runtime."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.events import Event, unregister_event_type
from agentnb.folds import Folds
from agentnb.middleware import Hooks
from agentnb.projections.state import SessionState
from tests.remote import RemoteDoor
from tests.runtime.helpers import WAIT

AUDIT = "acme.mw/audit"
COUNT = "acme.mw/count"
NOISY = "acme.mw/noisy"
STRICT = "acme.mw/strict"
TYPES = (AUDIT, COUNT, NOISY, STRICT)

RAN: list[str] = []


@nb.tool
def lookup(item: str) -> str:
    """Look an item up.

    Args:
        item: what to look up
    """
    RAN.append(item)
    return f"{item}: in stock"


def count(state: dict[str, Any], event: Event) -> dict[str, Any]:
    """Counts events and keeps the last note."""
    return {"n": state.get("n", 0) + 1, "last": event.payload.get("note")}


def explode(state: dict[str, Any], event: Event) -> dict[str, Any]:
    raise ValueError(f"cannot fold {event.payload.get('note')!r}")


@pytest.fixture(autouse=True)
def _types() -> Iterator[None]:
    RAN.clear()
    nb.register_event_type(AUDIT)
    nb.register_event_type(COUNT, reducer=count, required=True)
    nb.register_event_type(NOISY, reducer=explode)
    nb.register_event_type(STRICT, reducer=explode, required=True)
    yield
    for name in TYPES:
        unregister_event_type(name)


MakeRuntime = Callable[..., nb.Runtime]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[MakeRuntime]:
    """Runtimes on one SQLite file, with the given middleware and script; closed after."""
    runtimes: list[nb.Runtime] = []

    def build(script: list[Any], middleware: list[object] = (), **kwargs: Any) -> nb.Runtime:  # type: ignore[assignment]
        agent = nb.Agent(
            name="Mw",
            agent_id="mw-agent",
            model=nb.ScriptedModel(script),
            tools=[lookup],
            middleware=middleware,
        )
        runtime = nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'mw.sqlite'}", **kwargs)
        runtimes.append(runtime)
        return runtime

    yield build
    for runtime in runtimes:
        runtime.close()


def _log(session: nb.Session) -> list[Event]:
    return list(session.log.scan())


class Recorder:
    """Every hook records one audit event naming itself and its step."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def before_model(self, ctx: nb.MiddlewareContext, request: Any) -> None:
        self.seen.append(("before_model", len(request.messages)))
        ctx.record(AUDIT, {"hook": "before_model", "step": ctx.step_id})

    def after_model(self, ctx: nb.MiddlewareContext, reply: nb.ModelReply) -> None:
        self.seen.append(("after_model", [c.name for c in reply.tool_calls]))
        ctx.record(AUDIT, {"hook": "after_model", "step": ctx.step_id})

    async def before_tool(self, ctx: nb.MiddlewareContext, call: Any) -> None:
        self.seen.append(("before_tool", call.name))
        ctx.record(AUDIT, {"hook": "before_tool", "step": ctx.step_id, "call": ctx.call_id})
        await ctx.aflush()

    def after_tool(self, ctx: nb.MiddlewareContext, call: Any, result: nb.ToolCallResult) -> None:
        self.seen.append(("after_tool", result.output))
        ctx.record(AUDIT, {"hook": "after_tool", "step": ctx.step_id, "call": ctx.call_id})
        ctx.flush()  # a sync hook runs in a worker thread: it may wait for the commit


class TestHooks:
    def test_records_are_in_the_log_in_order_inside_their_step(self, make: MakeRuntime) -> None:
        """Each hook's record lands in hook order, between its step's start and end."""
        mw = Recorder()
        session = make([nb.ToolCall("lookup", {"item": "desk"}), "done"], [mw]).session("s1")
        outcome = session.run("find a desk", timeout=WAIT)
        assert outcome.status == "completed", outcome.error
        events = _log(session)
        audits = [e for e in events if e.type == AUDIT]
        assert [e.payload["hook"] for e in audits] == [
            "before_model",
            "after_model",
            "before_tool",
            "after_tool",
            "before_model",
            "after_model",
        ]
        for audit in audits:
            start = next(
                e.seq
                for e in events
                if e.type == "step/start" and e.payload["step_id"] == audit.payload["step"]
            )
            end = next(e.seq for e in events if e.type == "step/end" and e.seq > start)
            assert start < audit.seq < end
            assert audit.turn_id == outcome.turn_id
            assert audit.run_id == outcome.run_id
        call_id = next(e.payload["call_id"] for e in events if e.type == "tool/requested")
        assert {a.payload.get("call") for a in audits[2:4]} == {call_id}
        assert mw.seen[1] == ("after_model", ["lookup"])
        assert mw.seen[3] == ("after_tool", "desk: in stock")

    def test_aflush_commits_the_record_before_the_tool_runs(self, make: MakeRuntime) -> None:
        """What ``before_tool`` recorded and flushed is committed before ``tool/dispatch``."""
        seen_committed: list[bool] = []
        runtime: nb.Runtime

        class Flusher:
            async def before_tool(self, ctx: nb.MiddlewareContext, call: Any) -> None:
                ctx.record(AUDIT, {"hook": "before_tool"})
                await ctx.aflush()
                committed = await asyncio.to_thread(list, runtime.store.scan(ctx.session))  # type: ignore[arg-type]
                seen_committed.append(any(e.type == AUDIT for e in committed))

        runtime = make([nb.ToolCall("lookup", {"item": "desk"}), "done"], [Flusher()])
        session = runtime.session("s1")
        assert session.run("go", timeout=WAIT).status == "completed"
        assert seen_committed == [True]
        types = [e.type for e in _log(session)]
        assert types.index(AUDIT) < types.index("tool/dispatch")

    def test_missing_hooks_are_skipped_and_decided_once(self) -> None:
        """Only the methods an object has are hooks; an object with none is refused."""

        class OnlyAfterTool:
            def after_tool(self, ctx: Any, call: Any, result: Any) -> None: ...

        hooks = Hooks([OnlyAfterTool()])
        assert not hooks.before_model
        assert not hooks.after_model
        assert not hooks.before_tool
        assert [h.label for h in hooks.after_tool] == ["OnlyAfterTool#0"]
        assert hooks.after_tool[0].is_async is False
        with pytest.raises(nb.InvalidInput, match="none of the hooks"):
            nb.Agent(name="x", agent_id="x", model=nb.ScriptedModel([]), middleware=[object()])
        with pytest.raises(nb.InvalidInput, match=r"pass an instance: OnlyAfterTool\(\)"):
            Hooks([OnlyAfterTool])
        with pytest.raises(nb.InvalidInput, match="list of objects"):
            nb.Agent(name="x", agent_id="x", model=nb.ScriptedModel([]), middleware="nope")

    def test_bad_record_payload_fails_the_run_with_the_reason(self, make: MakeRuntime) -> None:
        """A record of an unregistered required type ends the run failed, saying why."""

        class Bad:
            def before_model(self, ctx: nb.MiddlewareContext, request: Any) -> None:
                ctx.record("acme.mw/unknown", {"x": 1}, required=True)

        outcome = make(["done"], [Bad()]).session("s1").run("go", timeout=WAIT)
        assert outcome.status == "failed"
        assert "Bad#0.before_model" in (outcome.error or "")
        assert "no registered codec" in (outcome.error or "")

    def test_a_kept_context_cannot_record_after_its_hook(self, make: MakeRuntime) -> None:
        """A context kept past its hook call refuses ``record`` (the seed: do not retain
        the recorder for writes after its invocation ends)."""
        kept: list[nb.MiddlewareContext] = []

        class Keeper:
            def after_model(self, ctx: nb.MiddlewareContext, reply: object) -> None:
                kept.append(ctx)

        assert make(["done"], [Keeper()]).session("s1").run("go", timeout=WAIT).status == (
            "completed"
        )
        with pytest.raises(nb.InvalidInput, match="has ended"):
            kept[0].record(AUDIT, {"late": True})


class TestRefusal:
    def test_refused_call_never_runs_and_the_model_sees_why(self, make: MakeRuntime) -> None:
        """``Refuse(reason)`` is the call's ``denied`` decision and its error result."""

        class Policy:
            def before_tool(self, ctx: nb.MiddlewareContext, call: Any) -> nb.Refuse | None:
                if call.arguments.get("item") == "gold":
                    return nb.Refuse("gold is not for sale")
                return None

        runtime = make([nb.ToolCall("lookup", {"item": "gold"}), "sorry"], [Policy()])
        session = runtime.session("s1")
        outcome = session.run("find gold", timeout=WAIT)
        assert outcome.status == "completed"
        assert RAN == []
        events = _log(session)
        decision = next(e for e in events if e.type == "tool/decision")
        assert decision.payload["decision"] == "denied"
        assert "gold is not for sale" in decision.payload["reason"]
        result = next(e for e in events if e.type == "tool/result")
        assert result.payload["status"] == "error"
        assert "gold is not for sale" in result.payload["output"]
        assert not any(e.type == "tool/dispatch" for e in events)
        model = runtime.agent.model
        assert isinstance(model, nb.ScriptedModel)
        assert "gold is not for sale" in str(model.requests[-1][-1].text)

    def test_a_refusal_shows_in_the_decisions_audit(self, make: MakeRuntime) -> None:
        """The analysis ``tool_calls`` frame lists the refused call as ``denied`` with why."""
        from agentnb import analysis

        class Policy:
            def before_tool(self, ctx: nb.MiddlewareContext, call: Any) -> nb.Refuse:
                return nb.Refuse("not today")

        runtime = make([nb.ToolCall("lookup", {"item": "desk"}), "ok"], [Policy()])
        assert runtime.session("s1").run("go", timeout=WAIT).status == "completed"
        (row,) = analysis.tool_calls(runtime.store).to_dict("records")
        assert row["decision"] == "denied"
        assert "not today" in row["decision_reason"]
        assert row["outcome"] == "error"
        assert row["synthetic"]

    def test_a_refusal_needs_a_reason(self) -> None:
        """``Refuse("")`` is refused: the audit must say why."""
        with pytest.raises(nb.InvalidInput, match="reason"):
            nb.Refuse("  ")


HOOK_NAMES = ["before_model", "after_model", "before_tool", "after_tool"]


def _raising(name: str) -> object:
    def hook(self: object, ctx: object, *args: object) -> None:
        raise RuntimeError(f"{name} broke")

    return type("Broken", (), {name: hook})()


class TestFaults:
    @pytest.mark.parametrize("hook", HOOK_NAMES)
    def test_a_raising_hook_fails_the_run_with_its_reason(
        self, make: MakeRuntime, hook: str
    ) -> None:
        """Each hook that raises ends the run ``failed``, the hook and error committed."""
        session = make([nb.ToolCall("lookup", {"item": "desk"}), "done"], [_raising(hook)]).session(
            "s1"
        )
        outcome = session.run("go", timeout=WAIT)
        assert outcome.status == "failed"
        assert f"Broken#0.{hook} raised" in (outcome.error or "")
        assert f"{hook} broke" in (outcome.error or "")
        ends = [e for e in _log(session) if e.type == "run/end"]
        assert ends[-1].payload["status"] == "failed"
        assert any(e.type == "turn/failed" for e in _log(session))

    def test_a_hook_raising_system_exit_fails_the_run_not_the_process(
        self, make: MakeRuntime
    ) -> None:
        """``SystemExit`` from a hook is the hook's failure: the run fails, the runtime lives."""

        class Exits:
            async def before_model(self, ctx: object, request: object) -> None:
                raise SystemExit(3)

        runtime = make(["done"], [Exits()])
        outcome = runtime.session("s1").run("go", timeout=WAIT)
        assert outcome.status == "failed"
        assert "Exits#0.before_model raised" in (outcome.error or "")
        assert runtime.session("s2").submit("still here") is not None

    def test_a_turn_cancelled_before_its_first_commit_is_cancelled_not_failed(
        self, make: MakeRuntime
    ) -> None:
        """A cancel accepted while ``before_model`` holds the new turn's first commit: the
        hook's flush sees it and the turn is cancelled, not failed by the middleware."""
        session: nb.Session

        class CancelsThenFlushes:
            def before_model(self, ctx: nb.MiddlewareContext, request: object) -> None:
                session.cancel(ctx.turn_id, timeout=WAIT)
                ctx.record(AUDIT, {"hook": "before_model"})
                ctx.flush()

        session = make(["never"], [CancelsThenFlushes()]).session("s1")
        outcome = session.submit("go").wait(timeout=WAIT)
        assert outcome.status in ("cancelled", "rejected"), outcome
        assert not any(e.type == AUDIT for e in _log(session))
        assert not any(e.type == "turn/failed" for e in _log(session))

    def test_a_hanging_async_hook_is_ended_by_the_time_limit(self, make: MakeRuntime) -> None:
        """An async hook that never returns is stopped by the task's timeout."""

        class Hangs:
            async def before_model(self, ctx: object, request: object) -> None:
                await asyncio.Event().wait()

        session = make(["done"], [Hangs()]).session("s1")
        outcome = session.submit("go", timeout=0.3).wait(timeout=WAIT)
        assert outcome.status == "interrupted"
        assert outcome.stop_reason == "time_limit"

    def test_a_hanging_sync_hook_is_ended_by_an_interrupt(self, make: MakeRuntime) -> None:
        """A sync hook blocked in its thread is left behind when the run is interrupted."""
        entered, release = threading.Event(), threading.Event()

        class Blocks:
            def before_tool(self, ctx: object, call: object) -> None:
                entered.set()
                release.wait(WAIT)

        session = make([nb.ToolCall("lookup", {"item": "desk"}), "done"], [Blocks()]).session("s1")
        receipt = session.submit("go")
        assert entered.wait(WAIT)
        session.interrupt()
        outcome = receipt.wait(timeout=WAIT)
        release.set()
        assert outcome.status == "interrupted"
        assert RAN == []


class TestReducers:
    def test_app_state_folds_and_survives_a_restart(self, make: MakeRuntime) -> None:
        """The reducer's state is the same from a new runtime on the same file."""

        class Counter:
            def before_model(self, ctx: nb.MiddlewareContext, request: object) -> None:
                ctx.record(COUNT, {"note": f"call {len(request.messages)}"})  # type: ignore[attr-defined]

        first = make([nb.ToolCall("lookup", {"item": "desk"}), "done", "again"], [Counter()])
        session = first.session("s1")
        assert session.run("one", timeout=WAIT).status == "completed"
        assert session.run("two", timeout=WAIT).status == "completed"
        before = session.app_state(COUNT)
        assert before["n"] == 3
        first.close()
        second = make(["unused"])
        after = second.session("s1").app_state(COUNT)
        assert after == before

    def test_app_state_rides_in_the_fold_snapshot(self) -> None:
        """``SessionState.dump``/``load`` carry the app states; a dump folded by other
        reducers than those registered now says so (its reader folds the log anew)."""
        state = SessionState()
        for i in range(3):
            e = Event.create(COUNT, {"note": str(i)}, turn_id="t", run_id="r").with_seq(i + 1)
            state.apply(e)
        loaded = SessionState.load(state.dump())
        assert loaded.app.get(COUNT) == {"n": 3, "last": "2"}
        loaded.app.check_current()
        unregister_event_type(NOISY)
        try:
            with pytest.raises(ValueError, match="other reducers"):
                SessionState.load(state.dump()).app.check_current()
        finally:
            nb.register_event_type(NOISY, reducer=explode)

    def test_a_snapshot_folded_before_the_reducer_is_set_aside(
        self, make: MakeRuntime, tmp_path: Path
    ) -> None:
        """Events recorded (and snapshotted) before their reducer was registered fold into
        the app state once it is: the stale snapshot is not trusted for it."""
        late = "acme.mw/late"

        class Late:
            def before_model(self, ctx: nb.MiddlewareContext, request: object) -> None:
                ctx.record(late, {"note": "early"})

        first = make(["one", "two"], [Late()])
        session = first.session("s1")
        session.run("one", timeout=WAIT)
        session.run("two", timeout=WAIT)
        folds = Folds(first.store, session.key)
        folds.refresh()
        folds.save_if_due(every=1)
        assert first.store.get_snapshot(session.key, "session-folds") is not None
        first.close()
        nb.register_event_type(late, reducer=count)
        try:
            second = make(["unused"])
            assert second.session("s1").app_state(late) == {"n": 2, "last": "early"}
            reread = Folds(second.store, session.key)
            state, _ = reread.refresh()
            assert state.app.get(late) == {"n": 2, "last": "early"}
        finally:
            unregister_event_type(late)

    def test_a_required_reducer_that_raises_fails_the_turn(self, make: MakeRuntime) -> None:
        """Fail closed: the event is not written and the turn fails with the reason."""

        class Strict:
            def before_model(self, ctx: nb.MiddlewareContext, request: object) -> None:
                ctx.record(STRICT, {"note": "bad"}, required=True)

        session = make(["done"], [Strict()]).session("s1")
        outcome = session.run("go", timeout=WAIT)
        assert outcome.status == "failed"
        assert "cannot fold 'bad'" in (outcome.error or "")
        assert not any(e.type == STRICT for e in _log(session))
        assert session.app_state(STRICT) == {}

    def test_a_required_reducer_that_raises_on_a_tool_record_fails_the_turn(
        self, make: MakeRuntime
    ) -> None:
        """A tool's ``ctx.record`` refused by a required reducer fails the turn too."""

        @nb.tool
        def noting(ctx: nb.ToolContext) -> str:
            """Note something."""
            try:
                ctx.record(STRICT, {"note": "tool"}, required=True)
            except nb.ReducerFailed:
                return "swallowed"  # the tool cannot hide it: the turn still fails
            return "recorded"

        agent = nb.Agent(
            name="Mw",
            agent_id="mw-tool",
            model=nb.ScriptedModel([nb.ToolCall("noting", {}), "done"]),
            tools=[noting],
        )
        with nb.Runtime(agent, store="memory://") as runtime:
            outcome = runtime.session("s1").run("go", timeout=WAIT)
        assert outcome.status == "failed"
        assert "cannot fold 'tool'" in (outcome.error or "")

    def test_a_plain_reducer_that_raises_keeps_its_state_and_logs(
        self, make: MakeRuntime, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Not required: the event is written, the state stays, a warning says why."""

        class Noisy:
            def before_model(self, ctx: nb.MiddlewareContext, request: object) -> None:
                ctx.record(NOISY, {"note": "x"})

        caplog.set_level(logging.WARNING, logger="agentnb.events")
        session = make(["done"], [Noisy()]).session("s1")
        assert session.run("go", timeout=WAIT).status == "completed"
        assert [e.type for e in _log(session)].count(NOISY) == 1
        assert session.app_state(NOISY) == {}
        assert "cannot fold 'x'" in caplog.text

    def test_bad_reducer_and_unknown_app_state_are_refused(self, make: MakeRuntime) -> None:
        """A reducer that is not a function, and ``app_state`` of a type without one."""
        with pytest.raises(nb.InvalidInput, match="reducer must be a function"):
            nb.register_event_type("acme.mw/bad", reducer=3)  # type: ignore[arg-type]
        session = make(["done"]).session("s1")
        with pytest.raises(nb.InvalidInput, match="no reducer is registered"):
            session.app_state(AUDIT)

    def test_the_remote_session_reads_the_same_app_state(self, make: MakeRuntime) -> None:
        """``RemoteSession.app_state`` answers what the service's local session folds."""

        class Counter:
            def before_model(self, ctx: nb.MiddlewareContext, request: object) -> None:
                ctx.record(COUNT, {"note": "seen"})

        door = RemoteDoor(make(["done"], [Counter()]))
        try:
            remote = door.session("s1")
            assert remote.run("go", timeout=WAIT).status == "completed"
            local = door.runtime.session("s1").app_state(COUNT)
            assert remote.app_state(COUNT) == local == {"n": 1, "last": "seen"}
            with pytest.raises(nb.InvalidInput, match="no reducer"):
                remote.app_state(AUDIT)
        finally:
            door.close()
