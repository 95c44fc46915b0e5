"""The analyst SQL shipped with agentnb: ``exporters/schema.sql`` and ``exporters/queries/*.sql``.

Found in a source checkout (``exporters/`` at the repository root) or in an installed wheel
(``agentnb/_exporters``). Each query file opens with a header comment::

    -- Question: which tool calls did people approve or reject, and how long did they wait?
    -- Parameters:
    --   since       optional  TIMESTAMPTZ  only requests made at or after this time
    --   session_id  optional  VARCHAR      only this session

Parameters are DuckDB variables read with ``getvariable('name')``, so a file runs unchanged
from the DuckDB CLI after ``SET VARIABLE name = value;``, and ``agentnb.analysis.query`` binds
them as values (never formatted into the SQL text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from agentnb.errors import InvalidInput

__all__ = ["Param", "Query", "exporters_dir", "list_queries", "load_query", "schema_sql"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@cache
def exporters_dir() -> Path:
    """The folder holding ``schema.sql`` and ``queries/``."""
    here = Path(__file__).resolve()
    candidates = [
        here.parents[1] / "_exporters",  # installed wheel: agentnb/_exporters
        here.parents[2] / "exporters",  # source checkout: <repo>/exporters
    ]
    for folder in candidates:
        if (folder / "schema.sql").is_file():
            return folder
    raise FileNotFoundError(
        "agentnb's exporters/schema.sql is missing from this installation; reinstall agentnb"
    )


def schema_sql() -> str:
    """The text of ``schema.sql`` (views over a relation named ``raw_events``)."""
    return (exporters_dir() / "schema.sql").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Param:
    """One parameter of a query file."""

    name: str
    required: bool
    type: str
    description: str


@dataclass(frozen=True)
class Query:
    """One audit query: its name (file stem), question, parameters and SQL text."""

    name: str
    question: str
    params: tuple[Param, ...]
    sql: str


def list_queries() -> list[str]:
    """Names of the shipped queries, sorted."""
    return sorted(p.stem for p in (exporters_dir() / "queries").glob("*.sql"))


def load_query(name: str) -> Query:
    """The query named ``name``; ``InvalidInput`` listing the known names if there is none."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidInput(f"query name must look like 'slowest_tools', got {name!r}")
    path = exporters_dir() / "queries" / f"{name}.sql"
    if not path.is_file():
        raise InvalidInput(f"unknown query {name!r}; known queries: {', '.join(list_queries())}")
    return parse_query(name, path.read_text(encoding="utf-8"))


def parse_query(name: str, text: str) -> Query:
    """Read the header comment of a query file."""
    question = ""
    params: list[Param] = []
    in_params = False
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        if body.lower().startswith("question:"):
            question = body.split(":", 1)[1].strip()
            in_params = False
        elif body.lower().startswith("parameters:"):
            in_params = body.split(":", 1)[1].strip().lower() not in {"none", "none."}
        elif in_params and body and line.startswith("--   "):
            parts = body.split(None, 3)
            if len(parts) >= 3 and parts[1] in {"required", "optional"}:
                params.append(
                    Param(parts[0], parts[1] == "required", parts[2], (parts[3:] or [""])[0])
                )
        elif in_params and not body:
            in_params = False
    if not question:
        raise InvalidInput(f"query {name!r} has no '-- Question:' header line")
    return Query(name, question, tuple(params), text)
