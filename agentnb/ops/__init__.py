"""Operating agentnb: backup, verify and restore (``backup``), moving sessions between
stores (``migrate``). See docs/operations.md.

Above the runtime in the layers: these read and write stores through the store port only.
"""

from __future__ import annotations

from agentnb.ops.backup import BackupReport, RestoreReport, VerifyReport, backup, restore, verify
from agentnb.ops.migrate import MigrationReport, migrate

__all__ = [
    "BackupReport",
    "MigrationReport",
    "RestoreReport",
    "VerifyReport",
    "backup",
    "migrate",
    "restore",
    "verify",
]
