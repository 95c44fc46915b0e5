"""``POST /v1/sessions/{id}/turns`` with ``if_busy`` against ``agentnb serve`` (a subprocess
on SQLite): each policy does what ``submit(..., if_busy=)`` does, and the refusals are the
documented problems with nothing written."""

from __future__ import annotations

import httpx

from tests.service.conftest import Service
from tests.service.test_api import problem, submit, wait


def _turns(client: httpx.Client, sid: str, body: dict[str, object]) -> httpx.Response:
    return client.post(f"/v1/sessions/{sid}/turns", json=body)


class TestIfBusyOverHttp:
    def test_reject_while_a_turn_waits_is_a_409_session_busy(
        self, service: Service, alice: httpx.Client, sid: str
    ) -> None:
        """if_busy=reject behind a suspended turn answers 409 SessionBusy naming the turn;
        the store's heads do not move."""
        first = submit(alice, sid, "ask which plan?")
        assert wait(alice, sid, first)["status"] == "suspended"
        heads = service.heads(sid)
        body = problem(
            _turns(alice, sid, {"input": "two", "if_busy": "reject"}), 409, "SessionBusy"
        )
        assert body["turn_id"] == first["turn_id"]
        assert body["busy_status"] == "suspended"
        assert service.heads(sid) == heads

    def test_a_bad_policy_is_a_400_naming_the_four(
        self, service: Service, alice: httpx.Client, sid: str
    ) -> None:
        """An unknown if_busy is a 400 InvalidInput naming the four policies; nothing written."""
        heads = service.heads(sid)
        body = problem(_turns(alice, sid, {"input": "x", "if_busy": "later"}), 400, "InvalidInput")
        for policy in ("queue", "reject", "interrupt", "steer"):
            assert policy in body["detail"]
        assert service.heads(sid) == heads

    def test_steer_on_an_idle_session_starts_the_task(self, alice: httpx.Client, sid: str) -> None:
        """if_busy=steer with nothing to steer answers 202 with disposition started."""
        response = _turns(alice, sid, {"input": "hello", "if_busy": "steer"})
        assert response.status_code == 202, response.text
        receipt = response.json()
        assert receipt["disposition"] == "started"
        assert wait(alice, sid, receipt)["output"] == "You said: hello"
