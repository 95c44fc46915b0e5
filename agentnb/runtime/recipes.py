"""The commands' recipes: the events that start, end, answer, cancel and recover runs.

Each event pair is written here once. ``Recipes`` adds events to the host's ``LogWriter``
and commits where a recipe ends; the step loop (``runtime/run_loop.py``) decides when.
A turn starts with ``open_turn``, a later run of it with ``begin_run``; every run ends
with ``finish`` (failed, suspended, interrupted) or with the completion the step loop
commits; ``recover`` closes a run a crash left open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from agentnb.errors import CannotResume, Corrupt, InvalidInput
from agentnb.events import Event, Message, ToolCallData
from agentnb.folds import load_context
from agentnb.ids import new_id
from agentnb.permissions import PERMISSIONS_LABEL, agent_digest
from agentnb.projections.decisions import (
    check_cancel,
    check_respond,
    check_resume,
    uncertain_to_settle,
    waits_for_person,
)
from agentnb.projections.digest import ContextDigest, extend_digest
from agentnb.projections.state import Command
from agentnb.runtime.scope import RunHost
from agentnb.workspace import bound_path, manifest

__all__ = ["WORKER_STOPPING", "Recipes"]

WORKER_STOPPING = "worker_stopping"
"""The ``stop_reason`` of a run a worker's graceful shutdown (SIGTERM) stopped: its turn is
resumed by the next worker that claims the session, when nothing of it is uncertain."""

log = logging.getLogger("agentnb.runtime")


class Recipes:
    """Writes each command's events for the session the host executes."""

    def __init__(self, host: RunHost) -> None:
        self.host = host
        self._digest = ContextDigest()
        """The digest of the context the last checkpoint covered, extended step by step."""

    async def check_checkpoint(self) -> None:
        """``Corrupt`` unless the session's newest checkpoint covers the context the log
        folds to at its seq (its ``context_digest``; checkpoints older than it say nothing
        to check). A resume continues from that state, so it checks it first."""
        host = self.host
        seq = host.state.last_checkpoint_seq
        if seq == 0:
            return
        (event,) = await asyncio.to_thread(host.store.read_after, host.key, seq - 1, 1)
        claimed = event.payload["state"].get("context_digest")
        if claimed is None:
            return
        messages = await asyncio.to_thread(load_context, host.store, host.key, seq)
        found = extend_digest("", messages)
        if found != claimed:
            raise Corrupt(
                f"session {host.key}: the checkpoint at seq {seq} covers a context with "
                f"digest {claimed[:16]}..., but the log folds to {found[:16]}... there; the "
                "log was changed after it was written. Restore the session from a backup "
                "(agentnb restore) or start over from its export_state()"
            )

    def tool(self, name: str) -> Any:
        return self.host.agent.tool_named(name)

    # -- turns and runs ------------------------------------------------------------------------

    def open_turn(self, command: Command) -> tuple[str, str]:
        """Add the events that start a submitted turn and its first run: (turn_id, run_id)."""
        turn_id = command.turn_id or new_id("turn")
        run_id = new_id("run")
        text = command.input or ""
        opening = {"input": text, "command_id": command.command_id}
        self._start_run(command, turn_id, run_id, "submit", "turn/start", opening)
        self.add_input(turn_id, run_id, command.command_id, "submit", text)
        return turn_id, run_id

    def add_input(self, turn_id: str, run_id: str, command_id: str, kind: str, text: str) -> None:
        """A task, steering or injected text entering the context as a user message."""
        w = self.host.writer
        w.add(
            "input/received",
            {"input_id": command_id, "kind": kind, "text": text, "command_id": command_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        message = Message(id=f"msg_{command_id}", role="user", text=text, turn_id=turn_id)
        w.add("message/user", {"message": message}, turn_id=turn_id, run_id=run_id)

    def begin_run(self, command: Command, turn_id: str, reason: str) -> str:
        """Add the events that start a later run of a turn (resume, respond): its run_id."""
        run_id = new_id("run")
        opening = {"command_id": command.command_id, "reason": reason}
        self._start_run(command, turn_id, run_id, reason, "turn/resumed", opening)
        return run_id

    def _start_run(
        self,
        command: Command,
        turn_id: str,
        run_id: str,
        reason: str,
        opening: str,
        payload: dict[str, str],
    ) -> None:
        """The command started, the turn's ``opening`` event, and the run's start."""
        w = self.host.writer
        started = {"command_id": command.command_id, "kind": command.kind}
        w.add("inbox/started", started, turn_id=turn_id, run_id=run_id)
        w.add(opening, payload, turn_id=turn_id, run_id=run_id)
        run_start = {"reason": reason, "command_id": command.command_id}
        w.add("run/start", run_start, turn_id=turn_id, run_id=run_id)

    def checkpoint(self, turn_id: str, run_id: str, applied: list[str]) -> list[Event]:
        """The checkpoint closing a step, and the inputs it makes applied."""
        state = self.host.state
        run = state.runs.get(run_id)
        events = [
            Event.create(
                "state/checkpoint",
                {
                    "reason": "step",
                    "state": {
                        "turn_id": turn_id,
                        "run_id": run_id,
                        "step": run.steps if run else 0,
                        "context_messages": len(state.context),
                        "context_digest": self._digest.of(state.context, state.compactions),
                    },
                },
                turn_id=turn_id,
                run_id=run_id,
            )
        ]
        if applied:
            events.append(
                Event.create(
                    "input/applied", {"input_ids": applied}, turn_id=turn_id, run_id=run_id
                )
            )
        return events

    async def workspace_checkpoint(self, turn_id: str, run_id: str) -> list[Event]:
        """The ``workspace/checkpoint`` closing a run of a session with a workspace: the
        manifest of its files now (hashed off the loop), or nothing without one."""
        path = bound_path(self.host.state.workspace)
        if path is None:
            return []
        listed = await asyncio.to_thread(manifest, path)
        return [Event.create("workspace/checkpoint", listed, turn_id=turn_id, run_id=run_id)]

    async def finish(
        self,
        turn_id: str,
        run_id: str,
        status: str,
        applied: list[str],
        *,
        error: str | None = None,
        step_id: str | None = None,
        stop_reason: str | None = None,
        reason: str | None = None,
    ) -> None:
        """End the run (failed, suspended, interrupted) in one commit.

        ``stop_reason`` is the code ``run/end`` records (by default: ``error`` for a failed
        run, ``needs_person`` for a suspended one, the stop's code for an interrupted one);
        ``reason`` why, in words (an interrupted run's: the stop's).
        """
        host = self.host
        w = host.writer
        stop = host.stop
        code = stop_reason or {"failed": "error", "suspended": "needs_person"}.get(status)
        if status == "interrupted" and code is None:
            code = "interrupted" if stop.command is not None else stop.code
        if status == "interrupted":
            self.stop_requested(turn_id, run_id)
            if stop.command is None and stop.reason is not None:
                reason = error = stop.reason
        for event in self.checkpoint(turn_id, run_id, applied):
            w.add_event(event)
        for event in await self.workspace_checkpoint(turn_id, run_id):
            w.add_event(event)
        if step_id is not None:
            w.add(
                "step/end",
                {"step_id": step_id, "status": "terminal"},
                turn_id=turn_id,
                run_id=run_id,
            )
        w.add(f"turn/{status}", {"error": error, "reason": reason}, turn_id=turn_id, run_id=run_id)
        w.add(
            "run/end",
            {
                "status": status,
                "reason": reason,
                "error": error,
                "inbox_seq": host.inbox.seq,
                "stop_reason": code,
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        await w.flush()
        host.publish("status", turn_id, run_id, status=status)
        if status == "interrupted" and code == WORKER_STOPPING:
            await self.queue_resume(turn_id, f"resume-after-stop:{run_id}")

    async def queue_resume(self, turn_id: str, key: str) -> bool:
        """Accept a resume of ``turn_id`` in the inbox (idempotent by ``key``) for whoever
        executes the session next, if it may resume without a person (``check_resume``:
        no pending request, nothing uncertain but calls of idempotent tools; with
        ``auto_resume="unknown"`` uncertain calls do not stop it: the resume settles them
        as unknown). True if queued; otherwise the turn waits for a person, and the log
        says why."""
        host = self.host
        uncertain = "unknown" if host.auto_resume == "unknown" else "refuse"
        try:
            check_resume(host.state, turn_id, executing=False, tool=self.tool, uncertain=uncertain)
        except CannotResume as exc:
            log.warning("session %s: turn %s waits for a person: %s", host.key, turn_id, exc)
            return False
        await asyncio.to_thread(
            host.inbox_log.accept,
            "resume",
            turn_id=turn_id,
            key=key,
            data={"uncertain": uncertain} if uncertain != "refuse" else None,
        )
        await host.refresh_inbox()
        return True

    def stop_requested(self, turn_id: str, run_id: str) -> bool:
        """Add ``run/stop_requested`` for what asked the run to stop (after ``inbox/started``
        of the interrupt command, if one did), unless it is written already: True if added.

        The step loop commits it the moment the stop is asked for; a run that ends first
        writes it with its end.
        """
        stop = self.host.stop
        w = self.host.writer
        if not stop.is_set():
            return False
        if stop.command is not None and stop.command not in stop.recorded:
            stop.recorded.add(stop.command)
            w.add(
                "inbox/started",
                {"command_id": stop.command, "kind": "interrupt"},
                turn_id=turn_id,
                run_id=run_id,
            )
            w.add(
                "run/stop_requested",
                {"command_id": stop.command},
                turn_id=turn_id,
                run_id=run_id,
            )
            return True
        if stop.command is None and stop.reason is not None and "" not in stop.recorded:
            stop.recorded.add("")
            w.add("run/stop_requested", {"reason": stop.reason}, turn_id=turn_id, run_id=run_id)
            return True
        return False

    def add_dispatch(
        self,
        turn_id: str,
        run_id: str,
        call: ToolCallData,
        name: str,
        *,
        idempotent: bool,
        attempt: int,
    ) -> str:
        """Add ``tool/dispatch`` and ``action/start`` of a new execution attempt of ``call``
        (a tool, a sub-agent or the plan); its ``action_id``."""
        w = self.host.writer
        action_id = new_id("act")
        dispatch = {
            "call_id": call.call_id,
            "name": name,
            "arguments": dict(call.arguments),
            "idempotent": idempotent,
            "attempt": attempt,
            "action_id": action_id,
        }
        w.add("tool/dispatch", dispatch, turn_id=turn_id, run_id=run_id)
        start = {"call_id": call.call_id, "name": name, "action_id": action_id}
        w.add("action/start", start, turn_id=turn_id, run_id=run_id)
        return action_id

    def add_result(
        self,
        call_id: str,
        name: str,
        status: str,
        output: Any,
        *,
        turn_id: str | None,
        run_id: str | None = None,
        **extra: Any,
    ) -> None:
        """Add a ``tool/result`` (``extra``: ``synthetic``, ``reconciled``, ``duration_ms``)."""
        payload = {"call_id": call_id, "name": name, "status": status, "output": output}
        self.host.writer.add("tool/result", payload | extra, turn_id=turn_id, run_id=run_id)

    # -- commands --------------------------------------------------------------------------------

    async def reject(self, command: Command, reason: str) -> None:
        """Refuse a command in the inbox, with why."""
        host = self.host
        await asyncio.to_thread(
            host.inbox_log.record,
            "inbox/rejected",
            {"command_id": command.command_id, "reason": reason, "kind": command.kind},
            turn_id=command.turn_id,
        )
        await host.refresh_inbox()

    async def recover(
        self, why: str = "the process executing it stopped", *, auto_resume: bool = True
    ) -> None:
        """Close a run that a crashed process (or an unrecorded failure) left open."""
        host = self.host
        state = host.state
        run = state.runs[state.active_run or ""]
        w = host.writer
        if waits_for_person(state, run.turn_id):
            await self._recover_suspended(run.turn_id, run.run_id, why)
            return
        w.add(
            "recovery/applied",
            {"reason": "crash", "interrupted_runs": [run.run_id], "source_seq": state.seq},
            turn_id=run.turn_id,
            run_id=run.run_id,
        )
        w.add("turn/interrupted", {"reason": why}, turn_id=run.turn_id, run_id=run.run_id)
        w.add(
            "run/end",
            {
                "status": "interrupted",
                "reason": "crash",
                "inbox_seq": host.inbox.seq,
                "stop_reason": "crash",
            },
            turn_id=run.turn_id,
            run_id=run.run_id,
        )
        if auto_resume and host.auto_resume:
            # Decided on the state these events make (the writer applied them) and accepted
            # before they commit: nobody sees the turn settle as interrupted in between.
            await self.queue_resume(run.turn_id, f"auto-resume:{run.run_id}")
        await w.flush()
        host.publish("status", run.turn_id, run.run_id, status="interrupted")

    async def _recover_suspended(self, turn_id: str, run_id: str, why: str) -> None:
        """Close a run a crash cut off while it waited in place for a person
        (``wait_inline``): as the suspension it falls back to, so the answer continues it."""
        host = self.host
        w = host.writer
        w.add(
            "recovery/applied",
            {"reason": "crash", "interrupted_runs": [run_id], "source_seq": host.state.seq},
            turn_id=turn_id,
            run_id=run_id,
        )
        reason = f"{why} while the run waited for a person; respond continues the turn"
        w.add("turn/suspended", {"reason": reason}, turn_id=turn_id, run_id=run_id)
        w.add(
            "run/end",
            {
                "status": "suspended",
                "reason": reason,
                "inbox_seq": host.inbox.seq,
                "stop_reason": "crash",
            },
            turn_id=turn_id,
            run_id=run_id,
        )
        await w.flush()
        host.publish("status", turn_id, run_id, status="suspended")

    async def resume(self, command: Command) -> tuple[str, str]:
        """Start the run that resumes a turn: (turn_id, run_id).

        Resumes of the same turn accepted meanwhile would repeat this continuation: they
        are rejected with that reason. With ``uncertain="unknown"`` the calls whose outcome
        is unknown (and that cannot safely run again) are settled as ``unknown`` first.
        """
        host = self.host
        await self.check_checkpoint()
        uncertain = command.data.get("uncertain", "refuse")
        turn = check_resume(
            host.state, command.turn_id or "", executing=False, tool=self.tool, uncertain=uncertain
        )
        for other in list(host.inbox.commands.values()):
            if (
                other.kind == "resume"
                and other.turn_id == turn.turn_id
                and other.seq > command.seq
                and other.command_id not in host.state.handled
                and other.command_id not in host.inbox.rejected
            ):
                await self.reject(
                    other,
                    f"a continuation is already queued: turn {turn.turn_id} is resumed by "
                    f"command {command.command_id}, accepted first",
                )
        run_id = self.begin_run(command, turn.turn_id, "resume")
        if uncertain == "unknown":
            self.settle_unknown(turn.turn_id, run_id, "resumed with uncertain='unknown'")
        return turn.turn_id, run_id

    def settle_unknown(self, turn_id: str, run_id: str, reason: str) -> None:
        """Record each uncertain call of the turn that cannot safely run again as
        ``unknown``, telling the model it was not run again (``resume(uncertain="unknown")``)."""
        calls = uncertain_to_settle(self.host.state, turn_id, tool=self.tool)
        if not calls:
            return
        outcomes: dict[str, Any] = {}
        for call in calls:
            output = (
                f"The outcome of this call is unknown: the process running it stopped before "
                f"its result was recorded, and it was not run again ({reason}). Check whether "
                "it took effect before relying on it or calling it again."
            )
            self.add_result(
                call.call_id, call.tool_name, "unknown", output, turn_id=turn_id, run_id=run_id
            )
            outcomes[call.call_id] = {"status": "unknown", "name": call.tool_name}
        self.host.writer.add(
            "recovery/applied",
            {"reason": reason, "resolved_call_ids": list(outcomes), "outcomes": outcomes},
            turn_id=turn_id,
            run_id=run_id,
        )

    async def respond(self, command: Command) -> tuple[str, str | None]:
        """Record a person's answers: (turn_id, run_id of the run that goes on, or None).

        The turn goes on once every pending request of it is answered; until then the
        answers commit on their own and the run_id is None.
        """
        host = self.host
        state = host.state
        answers = command.data.get("answers", {})
        turn_id, checked = check_respond(state, answers, tool=self.tool, normalized=True)
        w = host.writer
        pending = state.pending_of(turn_id)
        if pending and all(r["request_id"] in checked for r in pending):
            run_id: str | None = self.begin_run(command, turn_id, "respond")
        else:
            run_id = None  # more answers are needed before the turn can go on
            w.add(
                "inbox/started",
                {"command_id": command.command_id, "kind": "respond"},
                turn_id=turn_id,
            )
        await self._resolve(command, turn_id, run_id, checked)
        if run_id is None:
            await w.flush()
        return turn_id, run_id

    async def answer_inline(self, command: Command, turn_id: str, run_id: str) -> None:
        """Record a person's answers in the run that waited for them (``wait_inline``): the
        command starts in that run and its answers resolve their requests there, so the run
        goes on instead of a new one. Commits them. ``InvalidAnswer`` as ``respond``."""
        answers = command.data.get("answers", {})
        _, checked = check_respond(self.host.state, answers, tool=self.tool, normalized=True)
        w = self.host.writer
        started = {"command_id": command.command_id, "kind": "respond"}
        w.add("inbox/started", started, turn_id=turn_id, run_id=run_id)
        await self._resolve(command, turn_id, run_id, checked)
        await w.flush()

    async def _resolve(
        self,
        command: Command,
        turn_id: str,
        run_id: str | None,
        checked: Mapping[str, Mapping[str, Any]],
    ) -> None:
        """``interaction/resolved`` for each checked answer (and the rules they grant)."""
        state = self.host.state
        w = self.host.writer
        for request_id, answer in checked.items():
            kind = state.interactions[request_id]["kind"]
            w.add(
                "interaction/resolved",
                {
                    "request_id": request_id,
                    "kind": kind,
                    "status": "answered",
                    "answer": dict(answer),
                    "command_id": command.command_id,
                },
                turn_id=turn_id,
                run_id=run_id,
            )
            if answer.get("remember"):
                tool = state.interactions[request_id].get("tool_name") or ""
                await self.grant(request_id, tool, answer["remember"], command, turn_id, run_id)

    async def grant(
        self,
        request_id: str,
        tool: str,
        remember: dict[str, Any],
        command: Command,
        turn_id: str,
        run_id: str | None,
    ) -> None:
        """Record the permission rule an approval remembered (``permission/changed``),
        bound to the agent that runs now. An agent-wide rule also labels the session, so
        the other sessions of the agent find it."""
        host = self.host
        scope = remember["scope"]
        rule = {
            "rule_id": new_id("rule"),
            "scope": scope,
            "tool": tool,
            "match": dict(remember.get("match") or {}),
            "agent": agent_digest(host.agent.fingerprint),
            "request_id": request_id,
        }
        host.writer.add(
            "permission/changed",
            {"action": "granted", "rule": rule, "command_id": command.command_id},
            turn_id=turn_id,
            run_id=run_id,
        )
        if scope == "agent":
            await asyncio.to_thread(
                host.inbox_log.accept, "update", data={"labels": {PERMISSIONS_LABEL: "agent"}}
            )
            await host.refresh_inbox()

    async def revoke(self, command: Command) -> None:
        """Record that a permission rule of this session was revoked (it stopped applying
        when the command was accepted). The last agent-wide rule takes the label along."""
        host = self.host
        w = host.writer
        rule = host.state.permissions.get(command.data.get("rule_id", ""))
        w.add("inbox/started", {"command_id": command.command_id, "kind": "revoke"})
        if rule is not None:
            w.add(
                "permission/changed",
                {"action": "revoked", "rule": rule, "command_id": command.command_id},
            )
        await w.flush()
        if (
            rule is not None
            and rule["scope"] == "agent"
            and not any(r["scope"] == "agent" for r in host.state.permissions.values())
        ):
            await asyncio.to_thread(
                host.inbox_log.accept, "update", data={"labels": {PERMISSIONS_LABEL: None}}
            )

    async def feedback(self, command: Command) -> None:
        """Record a rating of a turn (``feedback/added``) or its retraction
        (``feedback/removed``), as ``session.feedback`` / ``retract_feedback`` accepted it."""
        w = self.host.writer
        data = command.data
        turn_id = data.get("turn_id")
        w.add(
            "inbox/started",
            {"command_id": command.command_id, "kind": "feedback"},
            turn_id=turn_id,
        )
        if data.get("action") == "removed":
            w.add(
                "feedback/removed",
                {"feedback_id": data["feedback_id"], "command_id": command.command_id},
                turn_id=turn_id,
            )
        else:
            fields = {k: data.get(k) for k in ("score", "label", "comment", "by")}
            w.add(
                "feedback/added",
                {"feedback_id": data["feedback_id"], **fields, "command_id": command.command_id},
                turn_id=turn_id,
            )
        await w.flush()

    async def cancel(self, command: Command) -> None:
        """Cancel a turn that waits (parked, suspended, queued behind others)."""
        host = self.host
        state, inbox = host.state, host.inbox
        turn_id = command.turn_id or ""
        how = check_cancel(state, inbox, turn_id, executing=False)
        w = host.writer
        if how != "parked":
            await asyncio.to_thread(
                host.inbox_log.record,
                "inbox/handled",
                {"command_id": command.command_id},
                turn_id=turn_id,
            )
            w.add("inbox/applied", {"command_ids": [command.command_id]}, turn_id=turn_id)
            await w.flush()
            return
        w.add(
            "inbox/started", {"command_id": command.command_id, "kind": "cancel"}, turn_id=turn_id
        )
        for request in state.pending_of(turn_id):
            w.add(
                "interaction/resolved",
                {
                    "request_id": request["request_id"],
                    "kind": request["kind"],
                    "status": "cancelled",
                    "command_id": command.command_id,
                },
                turn_id=turn_id,
            )
        for call in state.open_calls(turn_id):
            status = "unknown" if call.dispatched else "cancelled"
            self.add_result(
                call.call_id,
                call.name,
                status,
                "The task was cancelled before this call "
                + ("finished." if call.dispatched else "ran."),
                turn_id=turn_id,
                synthetic=True,
            )
        unapplied = [
            c.command_id
            for c in inbox.steers_for(turn_id)
            if c.command_id not in state.received_inputs
        ]
        if unapplied:
            w.add(
                "input/discarded",
                {"input_ids": unapplied, "reason": "turn cancelled"},
                turn_id=turn_id,
            )
        w.add("turn/cancelled", {"reason": "cancelled by the user"}, turn_id=turn_id)
        await w.flush()

    async def reconcile(self, command: Command) -> None:
        """Record what uncertain calls did, as a person said."""
        host = self.host
        outcomes = command.data.get("outcomes", {})
        reason = command.data.get("reason", "")
        current = {c.call_id for c in host.state.uncertain_calls()}
        if set(outcomes) != current:
            raise InvalidInput(
                f"the uncertain calls changed to {sorted(current)}; "
                "reconcile again with exactly those"
            )
        w = host.writer
        w.add(
            "inbox/started",
            {"command_id": command.command_id, "kind": "reconcile"},
            turn_id=command.turn_id,
        )
        for call_id, outcome in outcomes.items():
            self.add_result(
                call_id,
                outcome["name"],
                outcome["status"],
                outcome["output"],
                turn_id=outcome.get("turn_id"),
                reconciled=True,
            )
        w.add(
            "recovery/applied",
            {"reason": reason, "resolved_call_ids": list(outcomes), "outcomes": outcomes},
            turn_id=command.turn_id,
        )
        await w.flush()
