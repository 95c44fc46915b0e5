"""The service's bearer token records in a PostgreSQL store."""

from __future__ import annotations

import logging
from typing import Any

from agentnb.errors import (
    InvalidInput,
)
from agentnb.stores.base import (
    TokenRecord,
)
from agentnb.stores.postgres.core import PostgresCore
from agentnb.stores.postgres.driver import (
    psycopg,
)

__all__ = ["PostgresTokens"]

log = logging.getLogger("agentnb.stores.postgres")


_ACCESS_COLUMNS = (
    "token_id, user_id, label, digest, created_at, last_used_at, revoked_at, expires_at, parent"
)


def _token_row(row: Any) -> TokenRecord:
    token_id, user_id, label, digest, created, used, revoked, expires, parent = row
    return TokenRecord(
        token_id, user_id, label, created, used, revoked, expires, parent, digest=digest
    )


class PostgresTokens(PostgresCore):
    """``Tokens``'s hooks."""

    def _add_token(self, record: TokenRecord) -> TokenRecord:
        def add(c: psycopg.Connection[Any]) -> Any:
            return c.execute(
                f"INSERT INTO agentnb.tokens ({_ACCESS_COLUMNS}) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (token_id) DO NOTHING "
                "RETURNING token_id",
                (
                    record.token_id,
                    record.user_id,
                    record.label,
                    record.digest,
                    record.created_at,
                    record.last_used_at,
                    record.revoked_at,
                    record.expires_at,
                    record.parent,
                ),
            ).fetchone()

        if self._write(add, f"adding token {record.token_id}") is None:
            raise InvalidInput(f"token id {record.token_id!r} is in use; pick another")
        return record

    def _get_token(self, token_id: str) -> TokenRecord | None:
        row = self._query(
            lambda c: c.execute(
                f"SELECT {_ACCESS_COLUMNS} FROM agentnb.tokens WHERE token_id = %s", (token_id,)
            ).fetchone()
        )
        return None if row is None else _token_row(row)

    def _list_tokens(self, user_id: str | None) -> list[TokenRecord]:
        rows = self._query(
            lambda c: c.execute(
                f"SELECT {_ACCESS_COLUMNS} FROM agentnb.tokens WHERE %(u)s::text IS NULL "
                "OR user_id = %(u)s ORDER BY created_at, token_id",
                {"u": user_id},
            ).fetchall()
        )
        return [_token_row(r) for r in rows]

    def _touch_token(self, token_id: str, now: float) -> None:
        self._write(
            lambda c: c.execute(
                "UPDATE agentnb.tokens SET last_used_at = %(now)s WHERE token_id = %(t)s "
                "AND (last_used_at IS NULL OR last_used_at < %(now)s)",
                {"now": now, "t": token_id},
            ),
            f"recording the use of token {token_id}",
        )

    def _revoke_token(self, token_id: str, now: float) -> TokenRecord:
        def revoke(c: psycopg.Connection[Any]) -> Any:
            with c.transaction():
                c.execute(
                    "UPDATE agentnb.tokens SET revoked_at = %(now)s WHERE (token_id = %(t)s "
                    "OR parent = %(t)s) AND revoked_at IS NULL",
                    {"now": now, "t": token_id},
                )
                return c.execute(
                    f"SELECT {_ACCESS_COLUMNS} FROM agentnb.tokens WHERE token_id = %s",
                    (token_id,),
                ).fetchone()

        row = self._write(revoke, f"revoking token {token_id}")
        if row is None:
            raise InvalidInput(f"there is no token {token_id!r}; see agentnb token list")
        return _token_row(row)
