"""A throwaway PostgreSQL cluster for tests and benchmarks: ``initdb`` + ``pg_ctl`` in a temp dir.

The cluster listens only on a unix socket in its own folder (no TCP port to collide with), as
the ``postgres`` user when this process runs as root (PostgreSQL refuses to run as root).
``Cluster.database()`` clones a template database, so each test gets a fresh database in
tens of milliseconds. Nothing here is agentnb-specific except the names.

The same steps by hand (README, "Moving to PostgreSQL")::

    initdb -D DIR/data -U postgres -A trust
    pg_ctl -D DIR/data -l DIR/log -o "-k DIR -c listen_addresses=''" -w start
    # postgresql://postgres@/postgres?host=DIR
    pg_ctl -D DIR/data -m fast stop
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import queue
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["Cluster", "ClusterUnavailable", "find_bindir", "statement_counts"]

_SERVICE_USER = "postgres"


class ClusterUnavailable(RuntimeError):
    """No PostgreSQL server binaries here (or they cannot run); the message says how to get them."""


def find_bindir() -> Path:
    """The folder holding ``initdb``, ``pg_ctl`` and ``postgres``.

    ``pg_config --bindir`` first (it may be the client's only), then Debian's
    ``/usr/lib/postgresql/<major>/bin`` (newest first), then ``initdb`` on the PATH.
    """
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(Path(out))
    debian = Path("/usr/lib/postgresql")
    if debian.is_dir():
        majors = sorted(
            (p for p in debian.iterdir() if p.name.isdigit()),
            key=lambda p: int(p.name),
            reverse=True,
        )
        candidates += [p / "bin" for p in majors]
    initdb = shutil.which("initdb")
    if initdb:
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if all((bindir / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise ClusterUnavailable(
        "no PostgreSQL server found (initdb, pg_ctl, postgres); install it, e.g. "
        "`apt-get install postgresql-15`, or put its bin folder on the PATH"
    )


class Cluster:
    """One throwaway PostgreSQL cluster; ``start()`` it, ``stop()`` it, ``remove()`` it."""

    def __init__(
        self, root: Path | None = None, *, fsync: bool = False, preload: tuple[str, ...] = ()
    ) -> None:
        """``preload``: server libraries loaded at start (``shared_preload_libraries``), e.g.
        ``pg_stat_statements``, which ``statement_counts`` reads."""
        self.bindir = find_bindir()
        # Short path: a unix socket path must stay under ~100 bytes.
        self.root = Path(root or tempfile.mkdtemp(prefix="agentnb-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.fsync = fsync
        self.preload = preload
        self._as_user: list[str] = []
        self._names = itertools.count(1)
        self._makers: dict[str, _Maker] = {}
        self._makers_lock = threading.Lock()
        self._stopping = threading.Event()
        if os.geteuid() == 0:
            # PostgreSQL refuses root: run it as the service user, which owns the folder.
            try:
                user = pwd.getpwnam(_SERVICE_USER)
            except KeyError:
                raise ClusterUnavailable(
                    f"running as root and there is no {_SERVICE_USER!r} user to run "
                    "PostgreSQL as; install the server package (it creates the user)"
                ) from None
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", _SERVICE_USER, "--"]
        os.chmod(self.root, 0o700)

    # -- process control ----------------------------------------------------------------------

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self._as_user, str(self.bindir / tool), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if check and done.returncode:
            tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise ClusterUnavailable(
                f"{tool} {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}\n{tail}"
            )
        return done

    def start(self) -> Cluster:
        """initdb (once) and start the server; returns self."""
        if not self.data.exists():
            self._run(
                "initdb",
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            )
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        options = f"-k {self.root} -c listen_addresses='' -c max_connections=300"
        if not self.fsync:
            options += " -F"
        if self.preload:
            options += f" -c shared_preload_libraries={','.join(self.preload)}"
        args = ["-D", str(self.data), "-l", str(self.log), "-w", "-t", "60"]
        if action in ("start", "restart"):
            args += ["-o", options]
        self._run("pg_ctl", *args, *extra, action)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` is a crash: no shutdown checkpoint)."""
        self._pg_ctl("stop", "-m", mode)

    def restart(self, mode: str = "fast") -> None:
        self._pg_ctl("restart", "-m", mode)

    def remove(self) -> None:
        """Stop the server if it runs and delete the folder."""
        self._stopping.set()
        for maker in self._makers.values():
            maker.stop()
        with contextlib.suppress(ClusterUnavailable, subprocess.SubprocessError, OSError):
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases ----------------------------------------------------------------------------

    def url(self, dbname: str = "postgres", *, user: str = "postgres") -> str:
        """A libpq URL that reaches ``dbname`` through the unix socket."""
        return f"postgresql://{user}@/{dbname}?host={self.root}"

    def sql(self, statement: str, *, dbname: str = "postgres") -> list[tuple[object, ...]]:
        """Run one statement in autocommit as the superuser; its rows (if it returns any)."""
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    def database(self, *, template: str = "template0") -> str:
        """A new database cloned from ``template`` (default: an empty one); its URL.

        CREATE DATABASE copies the template (a few hundred ms on a slow disk), so a thread
        per template keeps a couple made ahead while tests run.
        """
        with self._makers_lock:
            maker = self._makers.get(template)
            if maker is None:
                maker = self._makers[template] = _Maker(self, template)
        return self.url(maker.take())

    def template(self, name: str, fill: Callable[[str], None]) -> str:
        """Create database ``name`` and let ``fill(url)`` put in it what every clone holds;
        ``name``, for ``database(template=name)``. ``fill`` closes its connections (a
        template is copied only while nobody is connected to it)."""
        self.sql(f'CREATE DATABASE "{name}" TEMPLATE template0')
        fill(self.url(name))
        return name

    def drop(self, url: str) -> None:
        """Drop the database of ``url`` (made by ``database``), connections and all."""
        name = url.rpartition("/")[2].partition("?")[0]
        with contextlib.suppress(Exception):  # cleanup only: the cluster goes at the end
            self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _new_name(self) -> str:
        return f"t_{os.getpid()}_{next(self._names)}"


def statement_counts(url: str, user: str | None = None) -> dict[str, int]:
    """Statements the server ran so far in the database of ``url`` (by ``user`` only, if
    given), per normalized statement text, from ``pg_stat_statements`` (the cluster must
    preload it): utility statements such as ``BEGIN`` and ``COMMIT`` too, the reads of the
    statistics themselves left out."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = conn.execute(
            "SELECT s.query, sum(s.calls)::bigint FROM pg_stat_statements s "
            "JOIN pg_roles r ON r.oid = s.userid "
            "WHERE s.dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND (%s::text IS NULL OR r.rolname = %s) "
            "AND s.query NOT LIKE '%%pg_stat_statements%%' GROUP BY s.query",
            (user, user),
        ).fetchall()
    return {str(query): int(calls) for query, calls in rows}


class _Maker(threading.Thread):
    """Creates databases from one template ahead of need, two at a time."""

    def __init__(self, cluster: Cluster, template: str) -> None:
        super().__init__(name=f"pg-make-{template}", daemon=True)
        self._cluster = cluster
        self._template = template
        self._ready: queue.Queue[str | BaseException] = queue.Queue(maxsize=2)
        self.start()

    def take(self) -> str:
        try:
            name = self._ready.get(timeout=60)
        except queue.Empty:
            raise ClusterUnavailable(
                f"no database could be created in 60 s; see {self._cluster.log}"
            ) from None
        if isinstance(name, BaseException):
            raise ClusterUnavailable(f"CREATE DATABASE failed: {name}") from name
        return name

    def run(self) -> None:
        cluster = self._cluster
        while not cluster._stopping.is_set():
            name = cluster._new_name()
            try:
                cluster.sql(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
            except Exception as exc:  # handed to the test that waits for a database
                self._ready.put(exc)
                return
            self._ready.put(name)

    def stop(self) -> None:
        with contextlib.suppress(queue.Empty):
            while True:
                self._ready.get_nowait()  # unblocks the put
        self.join(30)


def cluster_or_skip() -> Cluster:
    """A started cluster, or a skip saying why not; under ``CI=true`` a failure instead.

    CI installs the server (``.ci/run``), so there a missing server or driver is a broken
    environment, never a reason to skip.
    """
    require_server()
    try:
        # pg_stat_statements: tests count the statements a turn costs (a count, not a time).
        return Cluster(preload=("pg_stat_statements",)).start()
    except (ClusterUnavailable, OSError, subprocess.SubprocessError) as exc:
        _skip_or_fail(str(exc))
        raise


def require_server() -> None:
    """Skip (fail under ``CI=true``) unless the server binaries and psycopg are here."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        _skip_or_fail(f'{exc}: pip install -e ".[postgres]"')
    try:
        find_bindir()
    except ClusterUnavailable as exc:
        _skip_or_fail(str(exc))


def _skip_or_fail(reason: str) -> None:
    import pytest

    if os.environ.get("CI") == "true":
        raise pytest.fail.Exception(f"PostgreSQL tests cannot run in CI: {reason}", pytrace=False)
    raise pytest.skip.Exception(f"PostgreSQL tests need a server: {reason}")
