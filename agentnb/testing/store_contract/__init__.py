"""The store contract suite: the promises of ``SessionStore`` as tests every backend must pass.

Subclass ``StoreContract`` in a test module and implement ``make_store``::

    class TestMyStore(StoreContract):
        def make_store(self, tmp_path: Path, *, clock: Clock | None = None) -> SessionStore:
            return MyStore(..., clock=clock)

The class has no ``Test`` prefix, so pytest collects it only through such subclasses. Each
test's docstring names the promise it proves (see the roles in ``agentnb.stores.ports``);
the stores are built with a ``FakeClock`` so lease expiry is exact, and wait-based tests use
generous timeouts only as failure guards, never as speed thresholds.

``StoreContract`` is the composition of one contract per role of the port, each in its
module (``CatalogueContract`` and ``DeletionContract``, ``EventLogContract``,
``InboxContract``, ``LeasesContract``, ``WorkClaimsContract``, ``WatermarksContract``,
``BlobsContract``, ``TokensContract``), with ``WaitingContract`` and ``DurabilityContract``
(a store reopened on its data): a new backend subclasses the one suite and cannot miss a
part of it.
"""

from __future__ import annotations

from agentnb.testing.store_contract.blobs import BlobsContract
from agentnb.testing.store_contract.catalogue import CatalogueContract
from agentnb.testing.store_contract.claims import WorkClaimsContract
from agentnb.testing.store_contract.deletion import DeletionContract
from agentnb.testing.store_contract.durability import DurabilityContract
from agentnb.testing.store_contract.inbox import InboxContract
from agentnb.testing.store_contract.leases import LeasesContract
from agentnb.testing.store_contract.log import EventLogContract
from agentnb.testing.store_contract.support import (
    ContractBase,
    command,
    run_threads,
    session_key,
    step,
)
from agentnb.testing.store_contract.tokens import TokensContract
from agentnb.testing.store_contract.waiting import WaitingContract
from agentnb.testing.store_contract.watermarks import WatermarksContract

__all__ = [
    "BlobsContract",
    "CatalogueContract",
    "ContractBase",
    "DeletionContract",
    "DurabilityContract",
    "EventLogContract",
    "InboxContract",
    "LeasesContract",
    "StoreContract",
    "TokensContract",
    "WaitingContract",
    "WatermarksContract",
    "WorkClaimsContract",
    "command",
    "run_threads",
    "session_key",
    "step",
]


class StoreContract(
    CatalogueContract,
    DeletionContract,
    DurabilityContract,
    EventLogContract,
    InboxContract,
    LeasesContract,
    WorkClaimsContract,
    WatermarksContract,
    BlobsContract,
    TokensContract,
    WaitingContract,
):
    """Tests every ``SessionStore`` backend must pass; subclasses provide ``make_store``."""
