"""The approvals audit says what was approved as it was approved: the arguments the model
asked for, those the tool ran with after a person edited them, and why a call was rejected;
and interrupted_runs tells a cancelled turn from an interrupt."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

import agentnb as nb
from agentnb.cli import EXIT_OK, main

WAIT = 30.0  # seconds: a failure guard only


@nb.tool(confirm=True)
def create_order(item: str, qty: int) -> str:
    """Create a purchase order.

    Args:
        item: what to buy
        qty: how many
    """
    return f"ordered {qty} x {item}"


def _query(name: str, source: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["query", name, "--source", str(source), "--json"]) == EXIT_OK
    rows: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return rows


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two orders: one approved with qty edited from 2 to 3, one rejected with a reason;
    exported to Parquet."""
    root = tmp_path_factory.mktemp("approvals")
    url = f"sqlite:///{root / 'store.sqlite'}"
    model = nb.ScriptedModel(
        [
            nb.ToolCall("create_order", {"item": "desk", "qty": 2}),
            "Ordered.",
            nb.ToolCall("create_order", {"item": "yacht", "qty": 1}),
            "Not ordered.",
        ]
    )
    agent = nb.Agent(name="Orders", agent_id="orders", model=model, tools=[create_order])
    with nb.Runtime(agent, store=url) as runtime:
        session = runtime.session("audit", user_id="alice")
        for text, answer in [
            ("order desks", nb.Answer.approve(edited_args={"item": "desk", "qty": 3})),
            ("order a yacht", nb.Answer.reject("over budget")),
        ]:
            receipt = session.submit(text)
            assert receipt.wait(timeout=WAIT).status == "suspended"
            ((request_id, _),) = session.pending().items()
            session.respond(request_id, answer).wait(timeout=WAIT)
    out = root / "export"
    assert main(["export", "--to", f"parquet:{out}", "--store", url]) == EXIT_OK
    return out


class TestApprovalsAudit:
    def test_an_edited_approval_shows_both_argument_sets(
        self, exported: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The approved row carries the asked qty 2, the approved qty 3, and edited=true."""
        approved, _ = _query("approvals", exported, capsys)
        assert approved["decision"] == "approved"
        assert json.loads(approved["asked_arguments"]) == {"item": "desk", "qty": 2}
        assert json.loads(approved["approved_arguments"]) == {"item": "desk", "qty": 3}
        assert approved["edited"] is True

    def test_a_rejection_carries_its_reason_and_no_approved_arguments(
        self, exported: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """The rejected row keeps the asked arguments and the person's reason."""
        _, rejected = _query("approvals", exported, capsys)
        assert rejected["decision"] == "rejected"
        assert rejected["reason"] == "over budget"
        assert json.loads(rejected["asked_arguments"]) == {"item": "yacht", "qty": 1}
        assert rejected.get("approved_arguments") is None
        assert rejected["edited"] is False


class TestInterruptedRuns:
    def test_a_cancelled_running_turn_is_not_called_an_interrupt(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A turn cancelled while it runs: its run's end_reason says cancelled."""
        started, release = threading.Event(), threading.Event()

        @nb.tool
        async def slow(what: str) -> str:
            """Work slowly.

            Args:
                what: the work
            """
            import asyncio

            started.set()
            while not release.is_set():
                await asyncio.sleep(0.01)
            return what

        url = f"sqlite:///{tmp_path / 'store.sqlite'}"
        model = nb.ScriptedModel([nb.ToolCall("slow", {"what": "x"}), "done"])
        agent = nb.Agent(name="Slow", agent_id="slow", model=model, tools=[slow])
        try:
            with nb.Runtime(agent, store=url) as runtime:
                session = runtime.session("c1", user_id="alice")
                receipt = session.submit("work")
                assert started.wait(WAIT)
                session.cancel(receipt.turn_id, timeout=WAIT)
                assert session.task(receipt.turn_id).status == "cancelled"
        finally:
            release.set()
        out = tmp_path / "export"
        assert main(["export", "--to", f"parquet:{out}", "--store", url]) == EXIT_OK
        capsys.readouterr()
        (row,) = _query("interrupted_runs", out, capsys)
        assert row["end_reason"] == "cancelled"
