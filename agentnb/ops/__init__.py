"""Operating agentnb: backup, verify and restore (``backup``), moving sessions between
stores (``migrate``), webhooks (``Webhook``, an export sink). See docs/operations.md.

Above the runtime in the layers: these read and write stores through the store port only.
"""

from __future__ import annotations

from agentnb.ops.backup import BackupReport, RestoreReport, VerifyReport, backup, restore, verify
from agentnb.ops.migrate import MigrationReport, migrate
from agentnb.ops.webhooks import Webhook

__all__ = [
    "BackupReport",
    "MigrationReport",
    "RestoreReport",
    "VerifyReport",
    "Webhook",
    "backup",
    "migrate",
    "restore",
    "verify",
]
