"""PostgreSQL passwords never reach an error text: URLs are read the way libpq reads them,
masked where they are shown, and every password-shaped part is scrubbed from the command
line's errors, ``Runtime``'s message and repr, and the log."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import pytest

import agentnb as nb
from agentnb.cli import main
from agentnb.stores import pgurl

PASSWORDS = [
    "p@ss@w0rd",
    "pa:ss:w0rd",
    "pa/ss/w0rd",
    "pa%ss%zzw0rd",
    "pa ss w0rd",
    "pa#ss#w0rd",
    "pa?ss?w0rd",
    "pässwörd-ü",
    "sëcret@/%: #?",
]
"""Each written raw into the URL, and once percent-encoded (what libpq needs)."""


def _pieces(password: str) -> list[str]:
    """The password and its runs of four or more characters between delimiters."""
    import re

    return [password, *(p for p in re.split(r"[@/?:#%& ]", password) if len(p) >= 4)]


def _leaks(text: str, password: str) -> list[str]:
    return [piece for piece in _pieces(password) if piece in text]


agent = nb.Agent(name="PG URLs", agent_id="pg-url-agent", model=nb.ScriptedModel([]))


class TestReadLikeLibpq:
    @pytest.mark.parametrize("password", PASSWORDS)
    def test_a_raw_password_is_refused_or_masked(self, password: str) -> None:
        """A raw password libpq would misread or quote is refused naming none of it;
        otherwise the shown URL masks exactly what libpq takes as the password."""
        from psycopg.conninfo import conninfo_to_dict

        url = f"postgresql://agent:{password}@db.example:5432/app?sslmode=disable"
        refused = None
        try:
            pgurl.check(url)
        except nb.InvalidInput as exc:
            refused = str(exc)
        if refused is not None:
            assert not _leaks(refused, password), refused
            return
        assert conninfo_to_dict(url)["password"] == password
        shown = pgurl.redact(url)
        assert not _leaks(shown, password), shown
        assert shown == "postgresql://agent:***@db.example:5432/app?sslmode=disable"

    @pytest.mark.parametrize("password", PASSWORDS)
    def test_an_encoded_password_is_accepted_and_masked(self, password: str) -> None:
        """The percent-encoded password passes the check and is masked."""
        url = f"postgresql://agent:{quote(password, safe='')}@db.example/app"
        pgurl.check(url)
        assert pgurl.redact(url) == "postgresql://agent:***@db.example/app"
        assert pgurl.scrub(f"failed for {password!r} ({url})", url).count("***") >= 2

    def test_a_query_password_is_masked(self) -> None:
        """``?password=`` is masked as the authority's is."""
        url = "postgresql://agent@db.example/app?password=hunter2hunter&sslmode=require"
        assert pgurl.redact(url) == "postgresql://agent@db.example/app?password=***&sslmode=require"


@pytest.fixture
def pg_with_passwords(pg_cluster: Any) -> Any:
    """URLs of the test cluster (trust auth: any password is let in) with each password."""
    base = pg_cluster.url("postgres")  # postgresql://postgres@/postgres?host=DIR
    return lambda password, db="postgres": base.replace(
        "postgres@/postgres", f"postgres:{password}@/{db}", 1
    )


class TestNoPasswordInErrors:
    @pytest.mark.parametrize("encode", [False, True], ids=["raw", "encoded"])
    @pytest.mark.parametrize("password", PASSWORDS)
    def test_the_command_line_shows_no_password(
        self,
        pg_with_passwords: Any,
        password: str,
        encode: bool,
        capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """``agentnb sessions`` on a database that does not exist fails, and neither its
        output nor the log holds any part of the password."""
        written = quote(password, safe="") if encode else password
        url = pg_with_passwords(written, "no_such_db")
        with caplog.at_level(logging.DEBUG):
            code = main(["sessions", "--store", url])
        out = capsys.readouterr()
        assert code != 0
        text = out.out + out.err + caplog.text
        assert not _leaks(text, password), text
        assert not _leaks(text, written), text

    @pytest.mark.parametrize("encode", [False, True], ids=["raw", "encoded"])
    @pytest.mark.parametrize("password", PASSWORDS)
    def test_runtime_message_repr_and_log_show_no_password(
        self,
        pg_with_passwords: Any,
        password: str,
        encode: bool,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        """``Runtime(store=url)``: its error (str and repr) on a missing database, or its
        repr and its store's URL when it opens, and the log hold no part of the password."""
        written = quote(password, safe="") if encode else password
        texts = []
        with caplog.at_level(logging.DEBUG):
            for db in ("no_such_db", "postgres"):
                url = pg_with_passwords(written, db)
                try:
                    runtime = nb.Runtime(agent, store=url, execute=False)
                except nb.AgentnbError as exc:
                    texts += [str(exc), repr(exc)]
                else:
                    texts += [repr(runtime), runtime.store.url]
                    runtime.close()
        texts.append(caplog.text)
        for text in texts:
            assert not _leaks(text, password), text
            assert not _leaks(text, written), text
