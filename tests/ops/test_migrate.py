"""Moving sessions between backends (issue 36, item 2): whole logs with every seq, event id
and digest, SQLite -> PostgreSQL -> SQLite, resumable after ``kill -9``, refusing a
session that runs at the source; the migrated session continues at the target."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import agentnb as nb
from agentnb.errors import Corrupt, InvalidInput, LeaseHeld, SessionNotFound
from agentnb.ops._format import log_digests

ROOT = Path(nb.__file__).parent.parent
WAIT = 60.0


@nb.tool(confirm=True)
def send_mail(to: str) -> str:
    """Send a mail (a person approves)."""
    return f"sent to {to}"


@nb.tool
def slow(seconds: float) -> str:
    """Sleep, then say so."""
    threading.Event().wait(seconds)
    return "slept"


HELPER = nb.Agent(name="Helper", agent_id="mig-helper", model=nb.ScriptedModel(lambda m: "helped"))


def _reply(messages: list[nb.Message]) -> str | nb.ToolCall:
    last = messages[-1]
    if last.role == "tool":
        return f"finished: {last.text}"
    words = last.text.split()
    if "delegate" in words:
        return nb.ToolCall("mig-helper", {"task": "help"})
    if "mail" in words:
        return nb.ToolCall("send_mail", {"to": "ops@example.com"})
    if "slow" in words:
        return nb.ToolCall("slow", {"seconds": 3.0})
    return f"answer to {last.text}"


AGENT = nb.Agent(
    name="Migrating",
    agent_id="mig-agent",
    model=nb.ScriptedModel(_reply),
    tools=[nb.subagent(HELPER), send_mail, slow],
)

BIG = "big"
BIG_EVENTS = 12_000

# Migrate in a child process that kills itself (SIGKILL: nothing cleaned up, its source
# leases left held) once the big session is half copied.
_KILLED = """
import os, signal, sys
import agentnb as nb

def progress(key, events):
    if key.endswith("/big") and 0 < events < {big}:
        os.kill(os.getpid(), signal.SIGKILL)

nb.migrate(sys.argv[1], sys.argv[2], progress=progress)
raise SystemExit("not killed")
""".replace("{big}", str(BIG_EVENTS))


def _fill(url: str) -> list[nb.SessionKey]:
    """50 sessions with sub-agents, approvals remembered as permission rules, a token,
    export watermarks and one big session of application events."""
    with nb.Runtime(AGENT, store=url) as runtime:
        keys = []
        for i in range(49):
            session = runtime.session(f"s{i:02}", user_id="alice")
            text = "delegate" if i % 5 == 0 else "mail" if i % 7 == 0 else "plain"
            receipt = session.submit(f"task {i} {text}", key=f"key-{i}")
            outcome = receipt.wait(timeout=WAIT)
            if outcome.status == "suspended":
                (request,) = session.pending()
                answered = session.respond(request, nb.Answer.approve(remember="session"))
                outcome = answered.wait(timeout=WAIT)
            assert outcome.status == "completed", outcome
            session.update(labels={"batch": "even" if i % 2 == 0 else "odd"})
            keys.append(session.key)
        big = runtime.session(BIG, user_id="alice")
        assert big.run("plain start", timeout=WAIT).status == "completed"
    store = nb.open_store(url)  # the runtime's leases are released once it is closed
    try:
        for start in range(0, BIG_EVENTS, 500):
            head = store.head(big.key)
            store.append(
                big.key,
                [
                    nb.Event.create(
                        "acme/note",
                        {"n": start + n, "text": "x" * 200},
                        required=False,
                        event_id=f"ev_big_{start + n:06}",
                    )
                    for n in range(500)
                ],
                expected_seq=head,
                batch_id=f"big-{start}",
            )
        keys.append(big.key)
        store.advance_watermark(keys[0], "parquet-exports", store.head(keys[0]))
        store.add_token("tok_migrate", "alice", "a" * 64, label="ci")
        every = [r.key for r in store.list_sessions()]
    finally:
        store.close()
    assert len(every) > 50  # the sub-agents' children are sessions too
    return every


def _same(a_url: str, b_url: str, keys: list[nb.SessionKey]) -> None:
    a, b = nb.open_store(a_url), nb.open_store(b_url)
    try:
        for key in keys:
            assert log_digests(a, key) == log_digests(b, key), key
            assert a.watermarks(key) == b.watermarks(key)
            ra, rb = a.get_session(key), b.get_session(key)
            assert ra is not None
            assert rb is not None
            assert (rb.created_at, rb.labels, rb.events, rb.submits) == (
                ra.created_at,
                ra.labels,
                ra.events,
                ra.submits,
            )
        token = b.get_token("tok_migrate")
        assert token is not None
        assert token.user_id == "alice"
    finally:
        a.close()
        b.close()


class TestMigrationAcrossBackends:
    def test_sqlite_to_postgres_to_sqlite_after_a_kill(
        self, tmp_path: Path, pg_store_url: str
    ) -> None:
        """50 sessions go SQLite -> PostgreSQL (the first run killed -9 in the middle of the
        big session, the second finishing it) -> SQLite with the same seqs, event ids and
        digests; permission rules come along and a turn continues at the end."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        keys = _fill(src)
        killed = subprocess.run(
            [sys.executable, "-c", _KILLED, src, pg_store_url],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert killed.returncode == -9, killed.stderr
        pg = nb.open_store(pg_store_url)
        big = next(k for k in keys if k.session_id == BIG)
        assert 0 < pg.head(big) < nb.open_store(src).head(big)  # cut off mid-session
        pg.close()
        report = nb.migrate(src, pg_store_url)
        assert report.sessions == len(keys)
        _same(src, pg_store_url, keys)
        again = nb.migrate(src, pg_store_url)
        assert (again.events, again.inbox) == (0, 0)  # nothing twice
        back = f"sqlite:///{tmp_path / 'back.db'}"
        nb.migrate(pg_store_url, back)
        _same(src, back, keys)
        with nb.Runtime(AGENT, store=back) as runtime:
            mailed = runtime.open("s07", user_id="alice")
            assert [r.tool_name for r in mailed.permissions()] == ["send_mail"]
            outcome = mailed.run("task again mail", timeout=WAIT)
            assert outcome.status == "completed"  # the rule approves it: no question
            assert mailed.submit("task 7 mail", key="key-7").turn_id == mailed.tasks()[0].turn_id


class TestRowsIntoSQLite:
    """SQLite to SQLite: the rows are appended as stored (``agentnb.ops._sqlite``)."""

    def test_a_killed_copy_finishes_with_the_same_rows_and_catalogue(self, tmp_path: Path) -> None:
        """A migration killed -9 halfway through a big session finishes on the next run with
        every row, digest and catalogue count the source has, nothing twice."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        dst = f"sqlite:///{tmp_path / 'dst.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            small = runtime.session("small")
            assert small.run("plain start", timeout=WAIT).status == "completed"
            big = runtime.session(BIG)
            assert big.run("plain start", timeout=WAIT).status == "completed"
        store = nb.open_store(src)
        for start in range(0, BIG_EVENTS, 1000):
            store.append(
                big.key,
                [
                    nb.Event.create("acme/note", {"n": start + n, "text": "é\n" * 50})
                    for n in range(1000)
                ],
                expected_seq=store.head(big.key),
                batch_id=f"big-{start}",
            )
        store.close()
        killed = subprocess.run(
            [sys.executable, "-c", _KILLED, src, dst],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert killed.returncode == -9, killed.stderr
        report = nb.migrate(src, dst)
        assert 0 < report.events < BIG_EVENTS
        assert nb.migrate(src, dst).events == 0
        a, b = nb.open_store(src), nb.open_store(dst)
        try:
            for key in (small.key, big.key):
                assert log_digests(a, key) == log_digests(b, key)
                ra, rb = a.get_session(key), b.get_session(key)
                assert ra is not None
                assert rb is not None
                assert (rb.events, rb.turns, rb.bytes, rb.turn_status, rb.submits) == (
                    ra.events,
                    ra.turns,
                    ra.bytes,
                    ra.turn_status,
                    ra.submits,
                )
        finally:
            a.close()
            b.close()
        with nb.Runtime(AGENT, store=dst) as runtime:
            assert runtime.open(BIG).run("plain again", timeout=WAIT).status == "completed"

    def test_a_damaged_source_row_is_refused(self, tmp_path: Path) -> None:
        """A source row whose payload no longer matches its checksum stops the copy with
        Corrupt naming the session and seq."""
        src = tmp_path / "src.db"
        with nb.Runtime(AGENT, store=f"sqlite:///{src}") as runtime:
            assert runtime.session("hurt").run("plain", timeout=WAIT).status == "completed"
        with sqlite3.connect(src) as conn:
            conn.execute("UPDATE events SET payload = payload || ' ' WHERE seq = 2")
        with pytest.raises(Corrupt, match=r"hurt seq 2"):
            nb.migrate(f"sqlite:///{src}", f"sqlite:///{tmp_path / 'dst.db'}")


class TestMigrationChoices:
    def test_a_session_running_at_the_source_is_refused(self, tmp_path: Path) -> None:
        """A session whose turn runs at the source (a live lease) is refused with LeaseHeld
        naming it; the target gets none of it."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        dst = f"sqlite:///{tmp_path / 'dst.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            session = runtime.session("busy")
            session.submit("task slow")
            deadline = time.monotonic() + WAIT
            while not any(e.type == "action/start" for e in session.log.scan()):
                assert time.monotonic() < deadline, "the slow call never started"
                time.sleep(0.05)
            with pytest.raises(LeaseHeld, match=r"busy.*running at the source"):
                nb.migrate(src, dst, sessions=["busy"])
            session.interrupt()
        target = nb.open_store(dst)
        assert target.get_session(session.key) is None or target.head(session.key) == 0
        target.close()

    def test_sessions_and_labels_choose_what_moves(self, tmp_path: Path) -> None:
        """--session and --labels copy only the sessions they name (no tokens then); an
        unknown session is SessionNotFound, malformed labels InvalidInput."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            for name, team in (("a", "red"), ("b", "blue"), ("c", "red")):
                session = runtime.session(name)
                session.run("plain", timeout=WAIT)
                session.update(labels={"team": team})
        one = f"sqlite:///{tmp_path / 'one.db'}"
        assert nb.migrate(src, one, sessions=["b"]).sessions == 1
        red = f"sqlite:///{tmp_path / 'red.db'}"
        report = nb.migrate(src, red, labels={"team": "red"})
        assert sorted(k.session_id for k in report.keys) == ["a", "c"]
        with pytest.raises(SessionNotFound, match="nope"):
            nb.migrate(src, one, sessions=["nope"])
        with pytest.raises(InvalidInput, match="labels"):
            nb.migrate(src, one, labels=["team"])  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="same store"):
            nb.migrate(src, src)

    def test_the_migrate_command(self, tmp_path: Path) -> None:
        """agentnb migrate --from --to --labels copies and reports what it wrote."""
        src = f"sqlite:///{tmp_path / 'src.db'}"
        with nb.Runtime(AGENT, store=src) as runtime:
            session = runtime.session("cli")
            session.run("plain", timeout=WAIT)
            session.update(labels={"team": "red"})
        dst = f"sqlite:///{tmp_path / 'dst.db'}"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentnb.cli",
                "migrate",
                "--from",
                src,
                "--to",
                dst,
                "--labels",
                "team=red",
            ],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "migrated 1 sessions" in done.stdout
        bad = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentnb.cli",
                "migrate",
                "--from",
                src,
                "--to",
                dst,
                "--labels",
                "team",
            ],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert bad.returncode == 2
        assert "KEY=VALUE" in bad.stderr
