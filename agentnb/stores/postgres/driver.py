"""The postgres extra, imported once for every module of the backend (a missing driver says
how to install it)."""

from __future__ import annotations

from agentnb.errors import install_hint

try:  # the postgres extra
    import psycopg
    from psycopg import errors as pg_errors
    from psycopg.conninfo import conninfo_to_dict
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"PostgresStore needs psycopg 3 and psycopg_pool ({exc}): {install_hint('postgres')}"
    ) from exc

__all__ = ["ConnectionPool", "PoolTimeout", "conninfo_to_dict", "pg_errors", "psycopg"]
