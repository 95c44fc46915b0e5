"""Schedules: ``session.schedule(text, *, cron=None, every=None, at=None, tz="UTC",
overlap="skip", key=None, catch_up="one") -> Schedule``, ``session.schedules()``,
``session.unschedule(id)``; fired by ``Scheduler`` in a runtime made with
``schedules=True`` (``agentnb worker --schedules``), or one that added a schedule.

A schedule is durable state in the session's inbox log (any writer may add one, without
the execution lease): ``schedule/added``, ``schedule/removed`` and, once per due time,
``schedule/fired``. Firing a due time is

1. a claim: ``schedule/fired`` appended under the dedupe key ``sched-fired-<id>-<ms>``;
   the store's dedupe index lets exactly one writer create it, whichever runtime or
   worker process (on PostgreSQL: machine) tries, however often;
2. then, by the one that created it, the action ``overlap`` decides: ``submit(text,
   key="sched-<id>-<ms>")`` (``submitted``; ``queued`` behind a running turn with
   ``overlap="queue"``), ``steer(text)`` into the running turn (``steered``), or nothing
   (``skipped``, ``overlap="skip"`` while a turn runs or waits).

A submit's key is derived from schedule and due time, so the submit is exactly once too: a
runtime restarted between claim and submit submits again under the same key at startup (the
store answers with the first receipt). A steer cut off in that window is lost (steering has
no key): at most once.

Downtime: due times missed while no scheduler ran follow ``catch_up``: ``"one"`` fires the
latest and records how many it left out (``missed``), ``"all"`` fires each in order,
``"none"`` fires only a due time less than ``GRACE`` seconds old.

cron expressions are read by ``croniter`` (the schedules extra) in ``tz`` (an IANA zone,
``zoneinfo``); ``every`` is seconds (or a ``timedelta``) from when the schedule was added;
``at`` one time (a ``datetime``, naive ones read in ``tz``, or ISO 8601 text).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agentnb.errors import AgentnbError, InvalidInput, NotRunning, install_hint
from agentnb.events import SCHEDULE_TYPES, Event, canonical_json
from agentnb.ids import SessionKey, check_id, new_id
from agentnb.stores.base import SessionStore

__all__ = [
    "CATCH_UPS",
    "GRACE",
    "OVERLAPS",
    "Schedule",
    "Scheduler",
    "add_schedule",
    "next_due",
    "remove_schedule",
    "schedules_of",
]

log = logging.getLogger("agentnb.schedules")

OVERLAPS = ("skip", "queue", "steer")
CATCH_UPS = ("one", "all", "none")
GRACE = 2.0
"""Seconds a due time may be late and still fire under ``catch_up="none"``."""
MAX_CATCH_UP = 1_000
"""Most missed due times one schedule fires at once under ``catch_up="all"``."""
MIN_EVERY = 1.0
"""Shortest ``every`` (seconds)."""
CLAIM_BATCH = 500
"""Claims recorded in one ``inbox_append_many`` (on SQLite one transaction: one flush to
disk for them all, where one each would bound a scheduler to a few hundred a second)."""
_PAGE = 1_000


@dataclass
class _Firing:
    """One due time a pass of the scheduler fires: its claim, then its action."""

    key: SessionKey
    schedule: Schedule
    due: float
    disposition: str
    missed: int
    act: bool = True
    """False for the claim that only marks missed due times as passed (catch_up="none")."""

    def claim(self) -> tuple[SessionKey, Event, str, str]:
        """The ``schedule/fired`` record, its dedupe key and fingerprint."""
        sid, ms = self.schedule.schedule_id, round(self.due * 1000)
        event = Event.create(
            "schedule/fired",
            {
                "schedule_id": sid,
                "due": self.due,
                "disposition": self.disposition,
                "key": submit_key(sid, self.due),
                "missed": self.missed,
            },
        )
        return self.key, event, f"sched-fired-{sid}-{ms}", f"{sid}:{ms}"


@dataclass(frozen=True)
class Schedule:
    """A schedule of a session (``session.schedules()``)."""

    schedule_id: str
    text: str
    cron: str | None
    every: float | None
    at: str | None
    tz: str
    overlap: str
    catch_up: str
    key: str | None
    created_at: float
    last_fired: float | None = None
    """The latest due time fired (seconds since the epoch), None before the first."""
    next_due: float | None = None
    """The next due time after ``last_fired`` (or creation), None when there is none."""
    active: bool = True
    """False once removed (``unschedule``) or, for ``at``, once fired."""

    @property
    def next_due_at(self) -> datetime | None:
        """``next_due`` as an aware datetime in the schedule's zone."""
        if self.next_due is None:
            return None
        return datetime.fromtimestamp(self.next_due, ZoneInfo(self.tz))


# -- checks and due times ------------------------------------------------------------------


def _zone(tz: object) -> ZoneInfo:
    if not isinstance(tz, str) or not tz:
        raise InvalidInput(f"tz must be an IANA time zone name such as 'Europe/Paris', got {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"tz {tz!r} is not a time zone this machine knows; use an IANA name such as "
            "'UTC' or 'America/New_York'"
        ) from None


def _croniter() -> Any:
    try:
        import croniter  # type: ignore[import-untyped]
    except ImportError:
        raise ImportError("cron schedules need croniter: " + install_hint("schedules")) from None
    return croniter


def _check_cron(cron: object, zone: ZoneInfo) -> str:
    if not isinstance(cron, str) or not cron.strip():
        raise InvalidInput(f"cron must be a cron expression such as '0 9 * * 1-5', got {cron!r}")
    croniter = _croniter()
    if not croniter.croniter.is_valid(cron.strip()):
        raise InvalidInput(
            f"cron {cron!r} is not a valid cron expression (five fields: minute hour "
            "day-of-month month day-of-week, e.g. '*/15 * * * *')"
        )
    return cron.strip()


def _check_every(every: object) -> float:
    if isinstance(every, timedelta):
        every = every.total_seconds()
    if (
        not isinstance(every, int | float)
        or isinstance(every, bool)
        or not math.isfinite(every)
        or every < MIN_EVERY
    ):
        raise InvalidInput(
            f"every must be seconds (or a timedelta) of at least {MIN_EVERY:g}, got {every!r}"
        )
    return float(every)


def _check_at(at: object, zone: ZoneInfo) -> str:
    when = at
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when)
        except ValueError:
            raise InvalidInput(
                f"at {at!r} is not an ISO 8601 time such as '2026-12-24T18:00:00+01:00'"
            ) from None
    if not isinstance(when, datetime):
        raise InvalidInput(f"at must be a datetime or ISO 8601 text, got {at!r}")
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return when.isoformat()


def next_due(schedule: Schedule, after: float) -> float | None:
    """The first due time of ``schedule`` strictly after ``after`` (None: no more)."""
    if schedule.every is not None:
        n = math.floor((after - schedule.created_at) / schedule.every) + 1
        due = schedule.created_at + max(n, 1) * schedule.every
        while due <= after:  # float rounding
            due += schedule.every
        return due
    if schedule.at is not None:
        due = datetime.fromisoformat(schedule.at).timestamp()
        return due if due > after else None
    if schedule.cron is not None:
        zone = ZoneInfo(schedule.tz)
        start = datetime.fromtimestamp(after, zone)
        value: float = _croniter().croniter(schedule.cron, start).get_next(float)
        return value
    return None


# -- writing and reading -------------------------------------------------------------------


def add_schedule(
    store: SessionStore,
    key: SessionKey,
    text: str,
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    at: datetime | str | None = None,
    tz: str = "UTC",
    overlap: str = "skip",
    catch_up: str = "one",
    idempotency_key: str | None = None,
    now: float | None = None,
) -> Schedule:
    """Record a new schedule (checked first: ``InvalidInput`` naming the field)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("text must be the task to submit at each due time (non-empty)")
    zone = _zone(tz)
    given = [name for name, v in (("cron", cron), ("every", every), ("at", at)) if v is not None]
    if len(given) != 1:
        raise InvalidInput(
            "give exactly one of cron=, every= or at= (got "
            f"{', '.join(given) if given else 'none'})"
        )
    if overlap not in OVERLAPS:
        raise InvalidInput(f"overlap must be one of {', '.join(OVERLAPS)}, got {overlap!r}")
    if catch_up not in CATCH_UPS:
        raise InvalidInput(f"catch_up must be one of {', '.join(CATCH_UPS)}, got {catch_up!r}")
    if idempotency_key is not None:
        check_id(idempotency_key, "key")
    payload: dict[str, Any] = {
        "text": text,
        "cron": None if cron is None else _check_cron(cron, zone),
        "every": None if every is None else _check_every(every),
        "at": None if at is None else _check_at(at, zone),
        "tz": tz,
        "overlap": overlap,
        "catch_up": catch_up,
        "key": idempotency_key,
    }
    meaning = canonical_json(payload)
    schedule_id = (
        "sch_" + hashlib.sha256(f"{key}\x1f{idempotency_key}".encode()).hexdigest()[:24]
        if idempotency_key is not None
        else new_id("sch")
    )
    event = Event.create(
        "schedule/added",
        {**payload, "schedule_id": schedule_id, "anchor": time.time() if now is None else now},
    )
    record, _ = store.inbox_append(
        key,
        event,
        dedupe_key=None if idempotency_key is None else f"schedule-{idempotency_key}",
        fingerprint=meaning,
    )
    (found,) = [
        s for s in _fold(store, key).all() if s.schedule_id == record.payload["schedule_id"]
    ]
    return found


def remove_schedule(store: SessionStore, key: SessionKey, schedule_id: str) -> None:
    """Remove an active schedule; ``InvalidInput`` for one that is not (unknown or removed)."""
    check_id(schedule_id, "schedule_id")
    live = {s.schedule_id for s in _fold(store, key).all() if s.active}
    if schedule_id not in live:
        raise InvalidInput(
            f"session {key} has no active schedule {schedule_id!r}; see session.schedules()"
        )
    store.inbox_append(
        key,
        Event.create("schedule/removed", {"schedule_id": schedule_id}),
        dedupe_key=f"unschedule-{schedule_id}",
        fingerprint=schedule_id,
    )


def schedules_of(store: SessionStore, key: SessionKey, *, removed: bool = False) -> list[Schedule]:
    """The session's schedules (active ones; with ``removed=True`` every one), oldest first."""
    return [s for s in _fold(store, key).all() if removed or s.active]


class _Fold:
    """The schedules a session's inbox holds, folded from its ``schedule/*`` records."""

    def __init__(self) -> None:
        self.seq = 0
        self.schedules: dict[str, Schedule] = {}
        self.fired: dict[str, Event] = {}
        """The latest ``schedule/fired`` record of each schedule."""

    def apply(self, event: Event) -> None:
        self.seq = event.seq
        if event.type not in SCHEDULE_TYPES:
            return
        p = event.payload
        sid = p["schedule_id"]
        if event.type == "schedule/added":
            if sid in self.schedules:
                return
            self.schedules[sid] = Schedule(
                sid,
                p["text"],
                p.get("cron"),
                p.get("every"),
                p.get("at"),
                p.get("tz", "UTC"),
                p.get("overlap", "skip"),
                p.get("catch_up", "one"),
                p.get("key"),
                float(p["anchor"]),
            )
        elif event.type == "schedule/removed" and sid in self.schedules:
            self.schedules[sid] = replace(self.schedules[sid], active=False, next_due=None)
        elif event.type == "schedule/fired" and sid in self.schedules:
            old = self.fired.get(sid)
            if old is None or float(p["due"]) > float(old.payload["due"]):
                self.fired[sid] = event

    def all(self) -> list[Schedule]:
        return [self.view(sid) for sid in self.schedules]

    def view(self, sid: str) -> Schedule:
        """The schedule ``sid`` with its last and next due times."""
        s = self.schedules[sid]
        fired = self.fired.get(sid)
        last = None if fired is None else float(fired.payload["due"])
        due = next_due(s, s.created_at if last is None else last) if s.active else None
        return replace(s, last_fired=last, next_due=due, active=s.active and due is not None)

    def read(self, store: SessionStore, key: SessionKey) -> None:
        head = store.inbox_head(key)
        while self.seq < head:
            page = store.inbox_read_after(key, self.seq, min(_PAGE, head - self.seq))
            if not page:
                break
            for event in page:
                self.apply(event)


def _fold(store: SessionStore, key: SessionKey) -> _Fold:
    fold = _Fold()
    fold.read(store, key)
    return fold


# -- firing --------------------------------------------------------------------------------


class ScheduledSession(Protocol):
    """What the scheduler calls on a session (``Session`` satisfies it)."""

    def submit(self, input: str, key: str | None = None) -> Any: ...

    def steer(self, input: str) -> Any: ...

    def tasks(self) -> list[Any]: ...


def submit_key(schedule_id: str, due: float) -> str:
    """The idempotency key of the submit a schedule makes at ``due``."""
    return f"sched-{schedule_id}-{round(due * 1000)}"


class Scheduler:
    """Fires the due schedules of the sessions ``sessions()`` lists, on a thread of its own.

    ``open_session(key)`` gives the session to submit to. Each session's schedule records
    are folded once and then read on from where the fold stopped: on ``notify(key)`` (this
    process added one), and every ``refresh`` seconds for the sessions active since the
    last look (``find`` lists those). Due times wait in a heap, so an idle scheduler sleeps
    until the next one.
    """

    def __init__(
        self,
        store: SessionStore,
        open_session: Callable[[SessionKey], ScheduledSession],
        sessions: Callable[[float | None], Iterable[SessionKey]],
        *,
        refresh: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.open_session = open_session
        self.sessions = sessions
        self.refresh = refresh
        self.clock = clock
        self._folds: dict[SessionKey, _Fold] = {}
        self._heap: list[tuple[float, int, SessionKey, str]] = []
        self._order = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dirty: set[SessionKey] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._last_scan: float | None = None
        self._next_scan = 0.0
        self.fired = 0
        """Due times this scheduler claimed."""
        self.lateness: list[float] = []
        """Seconds each firing came after its due time (the latest 10,000)."""

    def start(self) -> Scheduler:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._loop, daemon=True, name="agentnb-schedules"
            )
            self._thread.start()
        return self

    def notify(self, key: SessionKey) -> None:
        """Read ``key``'s schedule records again soon (one was added or removed here)."""
        with self._lock:
            self._dirty.add(key)
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- the loop ---------------------------------------------------------------------------

    def tick(self) -> float:
        """One pass: read what changed, fire what is due; seconds until the next due time
        or look (the loop sleeps that long unless notified)."""
        now = self.clock()
        if now >= self._next_scan:
            started = now
            last = self._last_scan
            for key in self.sessions(None if last is None else last - 1.0):
                self._load(key, first=last is None)
            self._last_scan, self._next_scan = started, started + self.refresh
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        for key in dirty:
            self._load(key, first=False)
        self._fire_due(self.clock())
        wait = self._next_scan - self.clock()
        if self._heap:
            wait = min(wait, self._heap[0][0] - self.clock())
        return max(0.0, min(wait, self.refresh))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                wait = self.tick()
            except Exception:  # the store may be away or closing: look again later
                log.exception("scheduler pass failed")
                self._next_scan = self.clock() + self.refresh
                wait = self.refresh
            self._wake.wait(wait)
            self._wake.clear()

    def _load(self, key: SessionKey, *, first: bool) -> None:
        fold = self._folds.get(key)
        seen = set() if fold is None else {s.schedule_id for s in fold.all() if s.active}
        if fold is None:
            fold = self._folds[key] = _Fold()
        fold.read(self.store, key)
        for schedule in fold.all():
            if not schedule.active or schedule.schedule_id in seen:
                continue
            if first:
                self._repair(key, fold, schedule)
            self._push(schedule.next_due, key, schedule.schedule_id)

    def _repair(self, key: SessionKey, fold: _Fold, schedule: Schedule) -> None:
        """At startup: a claim whose submit may have been cut off by a crash submits again
        under the same key (the store answers with the first receipt if it was made)."""
        fired = fold.fired.get(schedule.schedule_id)
        if fired is not None and fired.payload["disposition"] in ("submitted", "queued"):
            self.open_session(key).submit(schedule.text, key=str(fired.payload["key"]))

    def _push(self, due: float | None, key: SessionKey, schedule_id: str) -> None:
        if due is None:
            return
        self._order += 1
        heapq.heappush(self._heap, (due, self._order, key, schedule_id))

    def _fire_due(self, now: float) -> None:
        """Fire every due time up to ``now``: the claims of a pass are recorded together
        (``CLAIM_BATCH`` per commit), then each created one's action runs."""
        firings: list[_Firing] = []
        nexts: list[tuple[float | None, SessionKey, str]] = []
        read: set[SessionKey] = set()
        busy: dict[SessionKey, bool] = {}
        while self._heap and self._heap[0][0] <= now and not self._stop.is_set():
            _, _, key, sid = heapq.heappop(self._heap)
            fold = self._folds[key]
            if key not in read:
                fold.read(self.store, key)
                read.add(key)
            if sid not in fold.schedules:
                continue
            schedule = fold.view(sid)
            if not schedule.active or schedule.next_due is None:
                continue
            if schedule.next_due > now:  # another process fired it meanwhile
                self._push(schedule.next_due, key, sid)
                continue
            last = self._plan(key, schedule, now, busy, firings)
            nexts.append((next_due(schedule, last), key, sid))
        for at in range(0, len(firings), CLAIM_BATCH):
            self._fire_batch(firings[at : at + CLAIM_BATCH])
        for due, key, sid in nexts:
            self._push(due, key, sid)

    def _plan(
        self,
        key: SessionKey,
        schedule: Schedule,
        now: float,
        busy: dict[SessionKey, bool],
        firings: list[_Firing],
    ) -> float:
        """Add the firings of ``schedule``'s due times up to ``now`` as ``catch_up`` says;
        the last due time handled (the next comes after it). A session is busy when a turn
        runs or is queued at the pass's start, or once a firing of this pass submitted to it;
        a schedule's own missed due times (``"all"``) queue behind each other."""
        dues: list[float] = []
        due = schedule.next_due
        while due is not None and due <= now and len(dues) < MAX_CATCH_UP:
            dues.append(due)
            due = next_due(schedule, due)
        if schedule.catch_up == "all":
            chosen = dues
        elif schedule.catch_up == "one":
            chosen = dues[-1:]
        else:
            chosen = [d for d in dues if now - d <= GRACE][-1:]
        if not chosen:  # catch_up="none": every one missed; mark the latest as passed
            firings.append(_Firing(key, schedule, dues[-1], "skipped", len(dues) - 1, act=False))
            return dues[-1]
        missed = len(dues) - len(chosen)
        if key not in busy:
            tasks = self.open_session(key).tasks()
            busy[key] = any(t.status in ("running", "queued") for t in tasks)
        own = False  # catch_up="all": each due time fires, queued behind the one before
        for due in chosen:
            disposition = "submitted"
            if own:
                disposition = "queued"
            elif busy[key]:
                disposition = {"skip": "skipped", "queue": "queued", "steer": "steered"}[
                    schedule.overlap
                ]
            firings.append(_Firing(key, schedule, due, disposition, missed))
            missed = 0
            if disposition in ("submitted", "queued"):
                busy[key] = own = True  # the task it submits runs, or waits, from now on
        return dues[-1]

    def _fire_batch(self, firings: list[_Firing]) -> None:
        """Record the claims of ``firings`` (exactly one writer creates each), then run the
        action of each this scheduler created."""
        records: list[tuple[Event, bool] | None]
        try:
            records = list(self.store.inbox_append_many([f.claim() for f in firings]))
        except AgentnbError as exc:  # one of them is refused (a deleted session): one by one
            log.warning(
                "claiming %d firings together failed (%s); one at a time", len(firings), exc
            )
            records = []
            for firing in firings:
                try:
                    records.append(self.store.inbox_append_many([firing.claim()])[0])
                except AgentnbError as one:
                    log.warning(
                        "schedule %s of %s: %s", firing.schedule.schedule_id, firing.key, one
                    )
                    records.append(None)
        claimed = self.clock()
        for firing, result in zip(firings, records, strict=True):
            if result is None:
                continue
            record, created = result
            fold = self._folds.get(firing.key)
            if fold is not None and record.seq == fold.seq + 1:
                fold.apply(record)  # the next look need not read it back
            if not created:
                continue
            self.fired += 1
            if firing.act:
                self.lateness.append(claimed - firing.due)  # when the claim is durable
                del self.lateness[:-10_000]
                self._act(firing)

    def _act(self, firing: _Firing) -> None:
        """What a created claim's disposition says: submit (keyed), steer, or nothing."""
        schedule, due = firing.schedule, firing.due
        session = self.open_session(firing.key)
        try:
            if firing.disposition in ("submitted", "queued"):
                session.submit(schedule.text, key=submit_key(schedule.schedule_id, due))
            elif firing.disposition == "steered":
                try:
                    session.steer(schedule.text)
                except NotRunning:  # the turn ended meanwhile: a task of its own
                    session.submit(schedule.text, key=submit_key(schedule.schedule_id, due))
        except AgentnbError as exc:
            log.warning("schedule %s of %s: %s", schedule.schedule_id, firing.key, exc)
