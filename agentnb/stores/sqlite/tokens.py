"""The service's bearer token records in an SQLite store."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from agentnb.errors import InvalidInput
from agentnb.stores.base import (
    TokenRecord,
)
from agentnb.stores.sqlite.core import SQLiteCore

__all__ = ["SQLiteTokens"]


_ACCESS_COLUMNS = (
    "token_id, user_id, label, digest, created_at, last_used_at, revoked_at, expires_at, parent"
)


def _token_row(row: Sequence[Any]) -> TokenRecord:
    token_id, user_id, label, digest, created, used, revoked, expires, parent = row
    return TokenRecord(
        token_id, user_id, label, created, used, revoked, expires, parent, digest=digest
    )


class SQLiteTokens(SQLiteCore):
    """``Tokens``'s hooks."""

    def _add_token(self, record: TokenRecord) -> TokenRecord:
        with self._write() as c:
            try:
                c.execute(
                    f"INSERT INTO tokens ({_ACCESS_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
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
                )
            except sqlite3.IntegrityError:
                raise InvalidInput(
                    f"token id {record.token_id!r} is in use; pick another"
                ) from None
        return record

    def _get_token(self, token_id: str) -> TokenRecord | None:
        row = (
            self._conn()
            .execute(f"SELECT {_ACCESS_COLUMNS} FROM tokens WHERE token_id=?", (token_id,))
            .fetchone()
        )
        return None if row is None else _token_row(row)

    def _list_tokens(self, user_id: str | None) -> list[TokenRecord]:
        rows = (
            self._conn()
            .execute(
                f"SELECT {_ACCESS_COLUMNS} FROM tokens WHERE ?1 IS NULL OR user_id = ?1 "
                "ORDER BY created_at, token_id",
                (user_id,),
            )
            .fetchall()
        )
        return [_token_row(r) for r in rows]

    def _touch_token(self, token_id: str, now: float) -> None:
        with self._write() as c:
            c.execute(
                "UPDATE tokens SET last_used_at=? WHERE token_id=? "
                "AND (last_used_at IS NULL OR last_used_at < ?)",
                (now, token_id, now),
            )

    def _revoke_token(self, token_id: str, now: float) -> TokenRecord:
        with self._write() as c:
            c.execute(
                "UPDATE tokens SET revoked_at=? WHERE (token_id=? OR parent=?) "
                "AND revoked_at IS NULL",
                (now, token_id, token_id),
            )
            row = c.execute(
                f"SELECT {_ACCESS_COLUMNS} FROM tokens WHERE token_id=?", (token_id,)
            ).fetchone()
        if row is None:
            raise InvalidInput(f"there is no token {token_id!r}; see agentnb token list")
        return _token_row(row)
