"""Feedback in the log: session.feedback / retract_feedback commit feedback/added and
feedback/removed, refuse what cannot be rated without writing anything, survive a killed
process, reach the exports' feedback view and the service's door."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import agentnb as nb
from agentnb import analysis, tokens
from agentnb.errors import InvalidInput, SessionDeleted, UnknownTurn
from agentnb.export import Exporter
from agentnb.export.parquet import ParquetSink


def agent() -> nb.Agent:
    return nb.Agent(
        name="Rated", agent_id="rated", model=nb.ScriptedModel(lambda messages: "an answer")
    )


@pytest.fixture
def runtime(tmp_path: Path):
    with nb.Runtime(agent(), store=f"sqlite:///{tmp_path / 'db.sqlite'}") as rt:
        yield rt


def heads(session: nb.Session) -> tuple[int, int]:
    return session.log.head(), session.inbox.head()


class TestFeedbackRecorded:
    def test_feedback_commits_feedback_added(self, runtime: nb.Runtime) -> None:
        """feedback() returns an id and the log holds feedback/added with every field."""
        session = runtime.session("s")
        turn = session.run("hello").turn_id
        fid = session.feedback(turn, score=0, label="negative", comment="wrong", by="alice")
        added = [e for e in session.log.scan() if e.type == "feedback/added"]
        assert len(added) == 1
        assert added[0].turn_id == turn
        p = added[0].payload
        assert (p["feedback_id"], p["score"], p["label"], p["comment"], p["by"]) == (
            fid,
            0.0,
            "negative",
            "wrong",
            "alice",
        )

    def test_retract_commits_feedback_removed(self, runtime: nb.Runtime) -> None:
        """retract_feedback() commits feedback/removed naming the rating."""
        session = runtime.session("s")
        turn = session.run("hello").turn_id
        fid = session.feedback(turn, score=1)
        session.retract_feedback(fid)
        removed = [e for e in session.log.scan() if e.type == "feedback/removed"]
        assert [e.payload["feedback_id"] for e in removed] == [fid]

    def test_the_session_works_on_after_feedback(self, runtime: nb.Runtime) -> None:
        """A rated session takes its next task as before."""
        session = runtime.session("s")
        session.feedback(session.run("one").turn_id, score=1)
        assert session.run("two").status == "completed"


class TestFeedbackRefused:
    def test_unknown_turn(self, runtime: nb.Runtime) -> None:
        """A turn id the session never had is UnknownTurn, and nothing is written."""
        session = runtime.session("s")
        session.run("hello")
        before = heads(session)
        with pytest.raises(UnknownTurn, match="not a turn of session"):
            session.feedback("turn_nope", score=1)
        assert heads(session) == before

    def test_turn_of_another_session(self, runtime: nb.Runtime) -> None:
        """Another session's turn is UnknownTurn here; neither session is written."""
        one, other = runtime.session("one"), runtime.session("other")
        foreign = other.run("elsewhere").turn_id
        one.run("here")
        before = heads(one), heads(other)
        with pytest.raises(UnknownTurn):
            one.feedback(foreign, score=0)
        assert (heads(one), heads(other)) == before

    def test_deleted_session(self, runtime: nb.Runtime) -> None:
        """A deleted session's turn cannot be rated: SessionDeleted, nothing written."""
        session = runtime.session("s")
        turn = session.run("hello").turn_id
        tombstone = session.delete()
        with pytest.raises(SessionDeleted):
            session.feedback(turn, score=1)
        assert runtime.store.tombstone(session.key) == tombstone

    @pytest.mark.parametrize(
        "kwargs",
        [
            {},
            {"score": True},
            {"score": float("nan")},
            {"score": "5"},
            {"label": "two\nlines"},
            {"label": "x" * 65},
            {"comment": "   "},
        ],
    )
    def test_bad_ratings(self, runtime: nb.Runtime, kwargs: dict[str, object]) -> None:
        """A rating with nothing in it, or a bad score, label or comment, is InvalidInput."""
        session = runtime.session("s")
        turn = session.run("hello").turn_id
        before = heads(session)
        with pytest.raises(InvalidInput):
            session.feedback(turn, **kwargs)  # type: ignore[arg-type]
        assert heads(session) == before

    def test_retract_unknown_or_twice(self, runtime: nb.Runtime) -> None:
        """Retracting an id not in force (unknown, or retracted already) is InvalidInput."""
        session = runtime.session("s")
        fid = session.feedback(session.run("hello").turn_id, score=1)
        session.retract_feedback(fid)
        before = heads(session)
        for bad in (fid, "fb_unknown"):
            with pytest.raises(InvalidInput, match="no feedback"):
                session.retract_feedback(bad)
        assert heads(session) == before


CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import agentnb as nb
    agent = nb.Agent(name="Rated", agent_id="rated",
                     model=nb.ScriptedModel(lambda messages: "an answer"))
    rt = nb.Runtime(agent, store=sys.argv[1])
    s = rt.session("s")
    turn = s.run("hello").turn_id
    fid = s.feedback(turn, score=0, comment="killed right after")
    print(turn, fid, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


class TestFeedbackDurable:
    def test_survives_a_killed_process(self, tmp_path: Path) -> None:
        """feedback() returned in a process killed at once: a new runtime reads it back."""
        url = f"sqlite:///{tmp_path / 'db.sqlite'}"
        done = subprocess.run(
            [sys.executable, "-c", CHILD, url],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == -signal.SIGKILL, done.stderr
        turn, fid = done.stdout.split()
        with nb.Runtime(agent(), store=url) as rt:
            events = list(rt.open("s").log.scan())
        added = [e for e in events if e.type == "feedback/added"]
        assert [(e.turn_id, e.payload["feedback_id"]) for e in added] == [(turn, fid)]
        assert os.path.exists(tmp_path / "db.sqlite")


class TestFeedbackExports:
    def test_feedback_view(self, runtime: nb.Runtime, tmp_path: Path) -> None:
        """The export's feedback view holds the ratings in force, text as given."""
        session = runtime.session("s")
        turn = session.run("hello").turn_id
        kept = session.feedback(turn, score=0, comment="<script>alert(1)</script>", by="bob")
        gone = session.feedback(turn, score=1)
        session.retract_feedback(gone)
        sink = ParquetSink(tmp_path / "export")
        Exporter(nb.SessionLog(runtime.store, session.key), sink).drain()
        for source in (tmp_path / "export", runtime.store):
            with analysis.connection(source) as con:
                rows = con.sql(
                    "SELECT feedback_id, turn_id, score, comment, given_by, negative FROM feedback"
                ).fetchall()
            assert rows == [(kept, turn, 0.0, "<script>alert(1)</script>", "bob", True)]


class TestFeedbackRemote:
    def test_through_the_service(self, runtime: nb.Runtime) -> None:
        """The remote client rates and retracts; a bad turn is UnknownTurn there too."""
        from tests.service.helpers import ServerThread

        with ServerThread(runtime) as server:
            token, _ = tokens.issue(runtime.store, "alice")
            remote = nb.connect(server.url, token)
            try:
                session = remote.session("r")
                turn = session.run("hello").turn_id
                fid = session.feedback(turn, score=1, comment="good")
                local = runtime.session("r", user_id="alice")
                added = [e for e in local.log.scan() if e.type == "feedback/added"]
                assert [(e.payload["feedback_id"], e.payload["by"]) for e in added] == [
                    (fid, "alice")
                ]
                with pytest.raises(UnknownTurn):
                    session.feedback("turn_nope", score=1)
                session.retract_feedback(fid)
                assert any(e.type == "feedback/removed" for e in local.log.scan())
            finally:
                remote.close()
