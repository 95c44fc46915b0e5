"""How the command line prints: exit codes, safe text, cut lines, tables and JSON."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

from agentnb.errors import (
    AgentnbError,
    AppendConflict,
    Fenced,
    LeaseHeld,
    SessionNotFound,
    StorageError,
)

EXIT_OK = 0
EXIT_FAILED = 1
"""Refused or failed for another reason (the message says which), e.g. a lease is held."""
EXIT_USAGE = 2
"""A bad option or argument value (argparse's own code); nothing was read or written."""
EXIT_NOT_FOUND = 3
"""No such session, task, token, store or export."""
EXIT_DATA = 4
"""The store or export cannot be read, or holds data agentnb did not write (corrupt)."""
EXIT_CODES = f"""\
exit codes:
  {EXIT_OK}  success
  {EXIT_FAILED}  refused or failed for another reason (the message says which)
  {EXIT_USAGE}  usage error: a bad option or argument value; nothing was read or written
  {EXIT_NOT_FOUND}  not found: no such session, task, token, store or export
  {EXIT_DATA}  data error: the store or export cannot be read, or is corrupt
Errors print one line on stderr ("error: ..."), never a traceback.
"""


NULL = "-"
"""How every command's text output shows a missing value (JSON output uses null)."""
_CUT = "…"


def _not_found(message: str) -> int:
    """Print the ``error:`` line of something named that does not exist; its exit code."""
    print(f"error: {visible(message)}", file=sys.stderr)
    return EXIT_NOT_FOUND


def exit_code(exc: AgentnbError) -> int:
    """The exit code of a command that stopped with ``exc`` (see ``agentnb --help``)."""
    if isinstance(exc, SessionNotFound):
        return EXIT_NOT_FOUND
    if isinstance(exc, ValueError):  # InvalidInput, InvalidLimit, InvalidCursor, ...
        return EXIT_USAGE
    if isinstance(exc, StorageError) and not isinstance(exc, LeaseHeld | Fenced | AppendConflict):
        return EXIT_DATA  # Corrupt, RecoveryLimitExceeded, a file that cannot be opened
    return EXIT_FAILED


_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on instead of showing (C0 and C1 controls: escape sequences
that set window titles, clear the screen, colour text; bidirectional overrides)."""
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Bidirectional controls, escaped in ``--json`` output."""


def visible(text: str) -> str:
    """``text`` with every character a terminal would act on shown escaped (``\x1b``)."""
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def fit(text: str, width: int) -> tuple[str, bool]:
    """``text`` on one line, its control characters escaped (untrusted text never reaches
    the terminal raw), at most ``width`` characters (0: no limit), ending in … if cut; and
    whether it was cut."""
    text = " ".join(text.split()) if "\n" in text or "\r" in text else text
    text = visible(text)
    if width <= 0 or len(text) <= width:
        return text, False
    return text[: width - 1] + _CUT, True


def cut(text: str, width: int) -> str:
    return fit(text, width)[0]


def is_null(value: Any) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    # pandas' NaT and NA, without importing pandas here (it is an optional dependency).
    return type(value).__name__ in {"NaTType", "NAType"}


def jsonable(value: Any) -> Any:
    """``value`` as JSON-native data: nulls as None, times as ISO text, records as objects."""
    if is_null(value):
        return None
    if isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return _rounded(value) if math.isfinite(value) else str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "model_dump"):  # pydantic records (Message, Event)
        return jsonable(value.model_dump(mode="json"))
    if hasattr(value, "tolist"):  # numpy scalars and arrays in dataframes
        return jsonable(value.tolist())
    if isinstance(value, Iterable) and not isinstance(value, bytes):
        return [jsonable(v) for v in value]
    return str(value)


def _rounded(value: float) -> float:
    """A float for JSON output: three decimals (a millisecond of a duration in seconds, a
    microsecond of one in ms), or three significant digits when it is smaller than that."""
    if value == 0:
        return 0.0
    return round(value, max(3, 2 - math.floor(math.log10(abs(value)))))


def cell_text(value: Any, width: int = 0) -> str:
    """One cell of text output: nulls as ``NULL``, structures as compact JSON, cut to width."""
    if is_null(value):
        return NULL
    if isinstance(value, str):
        shown = value
    elif isinstance(value, datetime):
        shown = value.isoformat(sep=" ", timespec="milliseconds")
    elif isinstance(value, bool | int | float | date):
        shown = str(value)
    else:
        shown = json.dumps(
            _without_nulls(jsonable(value)), ensure_ascii=False, separators=(",", ":")
        )
    return cut(shown, width)


def _without_nulls(value: Any) -> Any:
    """JSON data with null fields left out, so text output spells a null only as ``NULL``."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [NULL if v is None else _without_nulls(v) for v in value]
    return value


def print_json(value: Any) -> None:
    # Bidirectional controls as \\u escapes (the same JSON value): raw, they would show a
    # terminal's neighbouring text reversed.
    text = json.dumps(jsonable(value), ensure_ascii=False, indent=2)
    print(_BIDI.sub(lambda m: f"\\u{ord(m.group()):04x}", text))


def table_lines(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart."""
    rows = [list(r) for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    lines = [list(columns), *rows]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in lines
    ]
