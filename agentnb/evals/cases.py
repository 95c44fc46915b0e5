"""Datasets of evaluation cases, built from the turns sessions recorded.

``dataset(source, ...)`` reads the committed events of a ``Runtime``'s store, a store URL or
an export folder (through ``agentnb.analysis.connection``, so every source is read by the
same SQL and gives the same cases) and makes one ``EvalCase`` per turn: its input and the
steering and material it was given, the recorded output, the recorded tool calls with their
arguments and results, the answers people gave, usage, latency, the agent fingerprint and
model, and the ratings it holds (``session.feedback``). A ``Dataset`` saves to and loads from
Parquet and becomes a ``pydantic_evals.Dataset``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from agentnb.errors import InvalidInput
from agentnb.events import canonical_json, decode_json
from agentnb.permissions import agent_digest

if TYPE_CHECKING:
    import pandas as pd
    import pydantic_evals

__all__ = ["Dataset", "EvalCase", "case_metadata", "cases_of", "dataset", "load_dataset"]

_TURN_END = frozenset(
    {"turn/completed", "turn/failed", "turn/suspended", "turn/interrupted", "turn/cancelled"}
)
_TYPES = (
    "agent/bound",
    "agent/changed",
    "turn/start",
    "turn/output",
    *sorted(_TURN_END),
    "input/received",
    "tool/requested",
    "tool/result",
    "interaction/requested",
    "interaction/resolved",
    "model/end",
    "feedback/added",
    "feedback/removed",
)
"""The event types a case is made of (the query reads no others)."""

Row = tuple[str, int, int, str | None, Mapping[str, Any]]
"""(type, seq, occurred_at in microseconds since the epoch, turn_id, payload)."""


@dataclass(frozen=True)
class EvalCase:
    """One recorded turn, as an evaluation case (``name`` is its turn id)."""

    name: str
    namespace: str
    user_id: str
    agent_id: str
    session_id: str
    turn_id: str
    input: str
    output: str | None
    """The recorded final answer (None when the turn ended without one)."""
    expected_output: str | None
    """What a replay should answer: the recorded output unless one was given."""
    status: str
    inputs: tuple[Mapping[str, Any], ...] = ()
    """Steering and material the turn was given, in order: ``{"kind", "text"}``."""
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    """``{"call_id", "name", "arguments", "status", "output"}`` in the order requested."""
    answers: tuple[Mapping[str, Any], ...] = ()
    """The requests people answered: ``{"kind", "tool_name", "arguments", "prompt",
    "answer"}`` (``answer`` as ``interaction/resolved`` recorded it)."""
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    latency_ms: float | None = None
    """Turn start to its last status, people's waits included."""
    agent_fingerprint: str | None = None
    """``agentnb.permissions.agent_digest`` of the agent the turn ran under."""
    model: str | None = None
    started_at: datetime | None = None
    feedback: tuple[Mapping[str, Any], ...] = ()
    """The ratings in force: ``{"feedback_id", "score", "label", "comment", "by"}``."""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tool_names(self) -> list[str]:
        """The tools called, in order (the trajectory)."""
        return [c["name"] for c in self.tool_calls]

    @property
    def negative(self) -> bool:
        """Whether a person marked it bad (a score of 0 or below, or the label ``negative``)."""
        return any(_negative(f) for f in self.feedback)


def _negative(f: Mapping[str, Any]) -> bool:
    score = f.get("score")
    return (score is not None and score <= 0) or f.get("label") == "negative"


@dataclass
class _Draft:
    turn_id: str
    input: str
    started_us: int
    inputs: list[dict[str, Any]] = field(default_factory=list)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    answers: list[dict[str, Any]] = field(default_factory=list)
    output: str | None = None
    status: str = "running"
    ended_us: int | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    binding: Mapping[str, Any] | None = None


def cases_of(key: tuple[str, str, str, str], rows: Iterable[Row]) -> list[EvalCase]:
    """The cases of one session's events (``rows`` in seq order), one per turn, in order.

    A pure fold: the dataset builder and the replay read sessions through it, so a replay's
    turn and the recorded one are described the same way.
    """
    namespace, user_id, agent_id, session_id = key
    binding: Mapping[str, Any] | None = None
    drafts: dict[str, _Draft] = {}
    ratings: dict[str, dict[str, Any]] = {}
    for type_, _seq, at_us, turn_id, p in rows:
        if type_ == "agent/bound":
            binding = p
        elif type_ == "agent/changed":
            binding = p["current"]
        elif type_ == "turn/start" and turn_id is not None:
            drafts[turn_id] = _Draft(turn_id, p["input"], at_us, binding=binding)
        elif type_ == "feedback/added":
            ratings[p["feedback_id"]] = {
                "feedback_id": p["feedback_id"],
                "turn_id": turn_id,
                "score": p.get("score"),
                "label": p.get("label"),
                "comment": p.get("comment"),
                "by": p.get("by"),
            }
        elif type_ == "feedback/removed":
            ratings.pop(p["feedback_id"], None)
        elif turn_id in drafts:
            _fold_turn(drafts[turn_id], type_, at_us, p, binding)
    by_turn: dict[str, list[dict[str, Any]]] = {}
    for rating in ratings.values():
        by_turn.setdefault(rating.pop("turn_id") or "", []).append(rating)
    return [
        _case(namespace, user_id, agent_id, session_id, d, by_turn.get(d.turn_id, ()))
        for d in drafts.values()
    ]


def _fold_turn(
    d: _Draft, type_: str, at_us: int, p: Mapping[str, Any], binding: Mapping[str, Any] | None
) -> None:
    d.binding = binding if binding is not None else d.binding
    if type_ == "input/received" and p["kind"] in ("steer", "inject"):
        d.inputs.append({"kind": p["kind"], "text": p["text"]})
    elif type_ == "tool/requested":
        d.calls[p["call_id"]] = {
            "call_id": p["call_id"],
            "name": p["name"],
            "arguments": _plain(p.get("arguments") or {}),
            "status": None,
            "output": None,
        }
    elif type_ == "tool/result":
        call = d.calls.get(p["call_id"])
        if call is not None:
            call["status"] = p["status"]
            call["output"] = p.get("output", "")
    elif type_ == "interaction/requested":
        d.requests[p["request_id"]] = {
            "kind": p["kind"],
            "tool_name": p.get("tool_name"),
            "arguments": _plain(p.get("arguments") or {}),
            "prompt": p.get("prompt"),
        }
    elif type_ == "interaction/resolved":
        asked = d.requests.get(p["request_id"])
        if asked is not None and p.get("status", "answered") == "answered":
            d.answers.append({**asked, "answer": _plain(p.get("answer") or {})})
    elif type_ == "model/end":
        d.model_calls += 1
        d.input_tokens += p.get("input_tokens") or 0
        d.output_tokens += p.get("output_tokens") or 0
    elif type_ == "turn/output":
        d.output = p["message"]["text"]
    elif type_ in _TURN_END:
        d.status = type_.split("/", 1)[1]
        d.ended_us = at_us


def _case(
    namespace: str,
    user_id: str,
    agent_id: str,
    session_id: str,
    d: _Draft,
    ratings: Sequence[Mapping[str, Any]],
) -> EvalCase:
    latency = None if d.ended_us is None else (d.ended_us - d.started_us) / 1000
    return EvalCase(
        name=d.turn_id,
        namespace=namespace,
        user_id=user_id,
        agent_id=agent_id,
        session_id=session_id,
        turn_id=d.turn_id,
        input=d.input,
        output=d.output,
        expected_output=d.output,
        status=d.status,
        inputs=tuple(d.inputs),
        tool_calls=tuple(d.calls.values()),
        answers=tuple(d.answers),
        input_tokens=d.input_tokens,
        output_tokens=d.output_tokens,
        model_calls=d.model_calls,
        latency_ms=latency,
        agent_fingerprint=None if d.binding is None else agent_digest(d.binding),
        model=None if d.binding is None else d.binding.get("model"),
        started_at=datetime.fromtimestamp(d.started_us / 1e6, UTC),
        feedback=tuple(ratings),
    )


def _plain(value: Any) -> Any:
    """Frozen payload JSON (FrozenDict, tuples) as plain dicts and lists."""
    result: Any = decode_json(canonical_json(value))
    return result


# --------------------------------------------------------------------------------------------


class Dataset(Sequence[EvalCase]):
    """Evaluation cases (recorded turns), in the order their sessions and turns were read.

    A sequence (``len``, indexing, iteration); ``frame()`` shows it as a dataframe,
    ``to_parquet(path)`` / ``load_dataset(path)`` keep it, ``to_pydantic_evals()`` hands it to
    pydantic-evals, ``with_expected({turn_id: text})`` sets what replays should answer.
    """

    def __init__(self, cases: Iterable[EvalCase], *, name: str = "agentnb") -> None:
        self.cases: tuple[EvalCase, ...] = tuple(cases)
        self.name = name
        names = [c.name for c in self.cases]
        if len(set(names)) != len(names):
            raise InvalidInput("a dataset's cases need distinct names (turn ids)")
        self._by_name = {c.name: c for c in self.cases}

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):
            try:
                return self._by_name[index]
            except KeyError:
                raise InvalidInput(f"no case {index!r} in this dataset") from None
        if isinstance(index, slice):
            return Dataset(self.cases[index], name=self.name)
        return self.cases[index]

    def __iter__(self) -> Iterator[EvalCase]:
        return iter(self.cases)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Dataset) and self.cases == other.cases

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {len(self)} cases)"

    def with_expected(self, expected: Mapping[str, str | None]) -> Dataset:
        """This dataset with the expected outputs of the cases named (turn ids) replaced."""
        unknown = set(expected) - set(self._by_name)
        if unknown:
            raise InvalidInput(f"no cases {sorted(unknown)} in this dataset")
        return Dataset(
            (
                dataclasses.replace(c, expected_output=expected[c.name])
                if c.name in expected
                else c
                for c in self.cases
            ),
            name=self.name,
        )

    def frame(self) -> pd.DataFrame:
        """One row per case; lists and mappings as JSON text (the Parquet columns)."""
        import pandas as pd

        return pd.DataFrame([_row(c) for c in self.cases], columns=_COLUMNS)

    def to_parquet(self, path: str | Path) -> Path:
        """Write the cases to one Parquet file (``load_dataset`` reads it back equal)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist([_row(c) for c in self.cases], schema=_schema())
        table = table.replace_schema_metadata({b"agentnb.dataset": self.name.encode()})
        pq.write_table(table, target)
        return target

    def to_pydantic_evals(self) -> pydantic_evals.Dataset[str, str, dict[str, Any]]:
        """A ``pydantic_evals.Dataset``: each case's input as ``inputs``, its expected output
        as ``expected_output``, the rest (tool calls, answers, usage, ids) as ``metadata``."""
        from agentnb.evals._deps import pydantic_evals

        cases = [
            pydantic_evals.Case(
                name=c.name,
                inputs=c.input,
                expected_output=c.expected_output,
                metadata=case_metadata(c),
            )
            for c in self.cases
        ]
        return pydantic_evals.Dataset(cases=cases, name=self.name)


def case_metadata(c: EvalCase) -> dict[str, Any]:
    """The case as plain JSON values, less its input and expected output (``Case.metadata``
    and the ``metadata`` evaluators see)."""
    row = _row(c)
    for k in ("inputs", "tool_calls", "answers", "feedback", "metadata"):
        row[k] = decode_json(row[k])
    del row["input"], row["expected_output"], row["name"]
    row["started_at"] = None if c.started_at is None else c.started_at.isoformat()
    return row


_JSON = ("inputs", "tool_calls", "answers", "feedback", "metadata")
_COLUMNS = [f.name for f in dataclasses.fields(EvalCase)]


def _row(c: EvalCase) -> dict[str, Any]:
    row = {f: getattr(c, f) for f in _COLUMNS}
    for k in _JSON:
        row[k] = canonical_json(row[k])
    return row


def _schema() -> Any:
    import pyarrow as pa

    types = {
        "output": pa.string(),
        "expected_output": pa.string(),
        "input_tokens": pa.int64(),
        "output_tokens": pa.int64(),
        "model_calls": pa.int64(),
        "latency_ms": pa.float64(),
        "agent_fingerprint": pa.string(),
        "model": pa.string(),
        "started_at": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([(n, types.get(n, pa.string())) for n in _COLUMNS])


def load_dataset(path: str | Path) -> Dataset:
    """The dataset ``Dataset.to_parquet`` wrote."""
    import pyarrow.parquet as pq

    target = Path(path)
    if not target.is_file():
        raise InvalidInput(f"no dataset file at {str(target)!r} (Dataset.to_parquet writes one)")
    table = pq.read_table(target)
    missing = set(_COLUMNS) - set(table.column_names)
    if missing:
        raise InvalidInput(f"{str(target)!r} is not an agentnb dataset: no {sorted(missing)}")
    cases = []
    for row in table.to_pylist():
        for k in _JSON:
            row[k] = _tuples(k, decode_json(row[k]))
        cases.append(EvalCase(**{k: row[k] for k in _COLUMNS}))
    meta = table.schema.metadata or {}
    return Dataset(cases, name=meta.get(b"agentnb.dataset", b"agentnb").decode())


def _tuples(column: str, value: Any) -> Any:
    return dict(value) if column == "metadata" else tuple(value)


# --------------------------------------------------------------------------------------------

TurnsFilter = Literal["completed", "finished", "all"] | Collection[str]
_FINISHED = frozenset({"completed", "failed", "cancelled"})


def dataset(
    source: Any,
    *,
    sessions: Collection[str] | None = None,
    labels: Mapping[str, str] | None = None,
    agent_id: str | None = None,
    turns: TurnsFilter = "completed",
    feedback: Literal["negative", "positive", "any"] | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    expected: Mapping[str, str | None] | None = None,
    name: str | None = None,
) -> Dataset:
    """The turns ``source`` recorded, as a ``Dataset`` (one case per turn).

    ``source``: a ``Runtime`` (its store, every namespace), a store URL or ``SessionStore``,
    or an export folder or DuckDB file (what ``agentnb.analysis`` reads). ``sessions``: only
    these session ids; ``labels``: only sessions with these labels (a live store only: the
    exports hold no labels); ``agent_id``; ``turns``: ``"completed"`` (the default),
    ``"finished"`` (completed, failed, cancelled), ``"all"``, or a set of statuses;
    ``feedback``: ``"negative"`` keeps the turns people marked bad (a score of 0 or below, or
    the label ``negative``) — a regression set —, ``"positive"`` those rated above 0, ``"any"``
    those rated at all; ``since`` / ``until``: bounds on the turn's start (inclusive /
    exclusive); ``expected``: expected outputs by turn id (else the recorded output).
    """
    wanted = _statuses(turns)
    if feedback not in (None, "negative", "positive", "any"):
        raise InvalidInput(
            f"feedback must be None, 'negative', 'positive' or 'any', got {feedback!r}"
        )
    for bound, what in ((since, "since"), (until, "until")):
        if bound is not None and (not isinstance(bound, datetime) or bound.tzinfo is None):
            raise InvalidInput(f"{what} must be a timezone-aware datetime")
    if sessions is not None and (isinstance(sessions, str) or not sessions):
        raise InvalidInput("sessions must be a non-empty collection of session ids")
    store, label, opened = _store_of(source)
    try:
        keep = None if labels is None else _labelled(store, source, labels)
        if store is not None:
            groups = _live_groups(store, sessions, agent_id)
        else:
            groups = _export_groups(source, sessions, agent_id)
        found: list[EvalCase] = []
        for key, group in groups:
            if keep is not None and key not in keep:
                continue
            found += (c for c in cases_of(key, group) if _wanted(c, wanted, feedback, since, until))
    finally:
        if opened:
            store.close()
    built = Dataset(found, name=name or label)
    return built.with_expected(expected) if expected else built


def _statuses(turns: object) -> frozenset[str] | None:
    if turns == "completed":
        return frozenset({"completed"})
    if turns == "finished":
        return _FINISHED
    if turns == "all":
        return None
    if isinstance(turns, str) or not isinstance(turns, Collection):
        raise InvalidInput(
            f"turns must be 'completed', 'finished', 'all' or a set of statuses, got {turns!r}"
        )
    return frozenset(str(t) for t in turns)


def _store_of(source: Any) -> tuple[Any, str, bool]:
    """(the live store to read, or None to let ``analysis`` read ``source``; a name for the
    dataset; whether the store was opened here and is closed after)."""
    from agentnb.stores import open_store
    from agentnb.stores.base import SessionStore

    store = getattr(source, "store", None)
    if isinstance(store, SessionStore) and hasattr(source, "agent"):
        return store, source.agent.agent_id, False
    if isinstance(source, SessionStore):
        return source, "agentnb", False
    if isinstance(source, str) and source.startswith(_STORE_URLS):
        return open_store(source, create=False), Path(source).name or "agentnb", True
    return None, Path(str(source)).name or "agentnb", False


def _labelled(store: Any, source: Any, labels: Mapping[str, str]) -> set[tuple[str, ...]]:
    """The keys of the sessions with ``labels`` (from the catalogue of a live store)."""
    if store is None:
        raise InvalidInput(
            "labels= needs a live store (a Runtime or a store URL): exports hold no labels"
        )
    found: set[tuple[str, ...]] = set()
    before = None
    while True:
        page = store.find_sessions(labels=dict(labels), limit=1000, before=before)
        found |= {(r.key.namespace, r.key.user_id, r.key.agent_id, r.key.session_id) for r in page}
        if len(page) < 1000:
            return found
        before = page[-1].cursor


_STORE_URLS = ("sqlite:", "memory:", "postgresql:", "postgres:")


def _live_groups(
    store: Any, sessions: Collection[str] | None, agent_id: str | None
) -> Iterator[tuple[tuple[str, str, str, str], list[Row]]]:
    """Each session's rows of the case types, read from a live store in their stored form
    (``read_raw``: no payload is decoded unless a case needs it), sessions in key order."""
    from agentnb.stores.base import MAX_READ_LIMIT

    wanted = frozenset(_TYPES)
    keys = sorted(
        (r.key for r in store.list_sessions()),
        key=lambda k: (k.namespace, k.user_id, k.agent_id, k.session_id),
    )
    for k in keys:
        if (sessions is not None and k.session_id not in sessions) or (
            agent_id is not None and k.agent_id != agent_id
        ):
            continue
        rows: list[Row] = []
        pos = 0
        while batch := store.read_raw(k, pos, MAX_READ_LIMIT):
            rows += [
                (e.type, e.seq, e.occurred_us, e.turn_id, decode_json(e.payload_json))
                for e in batch
                if e.type in wanted
            ]
            if len(batch) < MAX_READ_LIMIT:
                break
            pos = batch[-1].seq
        yield (k.namespace, k.user_id, k.agent_id, k.session_id), rows


def _export_groups(
    source: Any, sessions: Collection[str] | None, agent_id: str | None
) -> Iterator[tuple[tuple[str, str, str, str], list[Row]]]:
    """The same rows from an export (or anything else ``agentnb.analysis`` reads), by SQL."""
    from agentnb import analysis

    where, params = ["type IN (" + ", ".join("?" * len(_TYPES)) + ")"], list(_TYPES)
    if sessions is not None:
        where.append("session_id IN (" + ", ".join("?" * len(sessions)) + ")")
        params += list(sessions)
    if agent_id is not None:
        where.append("agent_id = ?")
        params.append(agent_id)
    sql = (
        "SELECT namespace, user_id, agent_id, session_id, type, seq, epoch_us(occurred_at), "
        "turn_id, payload FROM events WHERE " + " AND ".join(where) + " "
        "ORDER BY namespace, user_id, agent_id, session_id, seq"
    )
    files = _parquet_files(source)
    if files:  # a local Parquet export: its files alone, not every view over them
        from agentnb.export.columns import connect

        con = connect()
        try:
            relation = con.read_parquet(files, hive_partitioning=False, union_by_name=True)
            relation.create_view("events")
            rows = con.execute(sql, params).fetchall()
        finally:
            con.close()
        return _by_session(rows)
    with analysis.connection(source) as con:
        rows = con.execute(sql, params).fetchall()
    return _by_session(rows)


def _parquet_files(source: Any) -> list[str] | None:
    """The files a local Parquet export folder's manifest lists, or None for another source."""
    from agentnb.export.parquet import ParquetSink

    if isinstance(source, ParquetSink):
        sink = source
    elif isinstance(source, str | Path) and not str(source).startswith(("parquet:", "duckdb:")):
        if not Path(source).is_dir():
            return None
        sink = ParquetSink(str(source), read_only=True)
    else:
        return None
    if not sink.local:
        return None
    files: list[str] = sink.files()
    return files


def _by_session(
    rows: Sequence[tuple[Any, ...]],
) -> Iterator[tuple[tuple[str, str, str, str], list[Row]]]:
    key: tuple[str, str, str, str] | None = None
    group: list[Row] = []
    for ns, user, agent, session, type_, seq, at_us, turn_id, payload in rows:
        k = (ns, user, agent, session)
        if k != key:
            if key is not None:
                yield key, group
            key, group = k, []
        group.append((type_, seq, at_us, turn_id, decode_json(payload)))
    if key is not None:
        yield key, group


def _wanted(
    case: EvalCase,
    statuses: frozenset[str] | None,
    feedback: str | None,
    since: datetime | None,
    until: datetime | None,
) -> bool:
    if statuses is not None and case.status not in statuses:
        return False
    at = case.started_at
    if at is not None and ((since and at < since) or (until and at >= until)):
        return False
    if feedback == "negative":
        return case.negative
    if feedback == "positive":
        return any((f.get("score") or 0) > 0 for f in case.feedback) and not case.negative
    if feedback == "any":
        return bool(case.feedback)
    return True
