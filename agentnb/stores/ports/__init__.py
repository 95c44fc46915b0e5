"""The roles of the store port; ``SessionStore`` (``agentnb.stores.base``) composes them."""

from agentnb.stores.core import StoreCore
from agentnb.stores.ports.blobs import Blobs
from agentnb.stores.ports.catalogue import Catalogue
from agentnb.stores.ports.claims import WorkClaims
from agentnb.stores.ports.inbox import Inbox
from agentnb.stores.ports.leases import Leases
from agentnb.stores.ports.log import EventLog
from agentnb.stores.ports.tokens import Tokens
from agentnb.stores.ports.watermarks import Watermarks

__all__ = [
    "Blobs",
    "Catalogue",
    "EventLog",
    "Inbox",
    "Leases",
    "StoreCore",
    "Tokens",
    "Watermarks",
    "WorkClaims",
]
