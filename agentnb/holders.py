"""Who holds a session's lease, and whether that holder still lives.

A runtime's owner id names its host and process: ``host:pid:rt_...``, followed on Linux by
``:ns<pid namespace>.<process start time>``. From that, any process on the same host can
tell a holder that died (``kill -9``) from one that is only slow: a dead holder's lease is
taken over at once instead of after its expiry, and its cut-off run shows as interrupted
right away. Holders on other hosts (or in another PID namespace) cannot be checked; for
them the lease's expiry is the only signal, as before.
"""

from __future__ import annotations

import os
import socket
from functools import cache

from agentnb.ids import SessionKey, new_id
from agentnb.records import Holder
from agentnb.stores.base import SessionStore

__all__ = ["holder_alive", "holder_of", "lease_alive", "new_owner"]


def _host() -> str:
    return socket.gethostname() or "localhost"


@cache
def _pid_namespace() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid").removeprefix("pid:[").removesuffix("]")
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22);
    None when there is no such process, or only its exit status is left (a zombie, killed
    and not yet reaped by its parent: it executes nothing any more)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat.rsplit(")", 1)[-1].split()
    if fields and fields[0] in ("Z", "X"):  # field 3: the state
        return None
    return fields[19] if len(fields) > 19 else None


def new_owner() -> str:
    """An owner id for a new runtime of this process."""
    pid = os.getpid()
    owner = f"{_host()}:{pid}:{new_id('rt')}"
    namespace, started = _pid_namespace(), _start_time(pid)
    if namespace is not None and started is not None:
        owner += f":ns{namespace}.{started}"
    return owner


def holder_alive(owner: str) -> bool | None:
    """True or False for a holder on this host that can be checked, None when it cannot."""
    parts = owner.split(":")
    if len(parts) < 3 or parts[0] != _host() or not parts[1].isdigit():
        return None
    pid = int(parts[1])
    if pid == os.getpid():
        return True
    proof = parts[3] if len(parts) > 3 and parts[3].startswith("ns") else None
    if proof is not None:
        namespace, _, started = proof[2:].partition(".")
        if namespace != _pid_namespace():
            return None  # same host name, another PID namespace (a container): cannot tell
        now_started = _start_time(pid)
        if now_started is None:
            return False if os.path.isdir("/proc/self") else _signal_alive(pid)
        return now_started == started  # a reused pid has another start time
    return _signal_alive(pid)


def _signal_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def holder_of(owner: str, epoch: int, expires_in: float, *, local: bool) -> Holder:
    """The ``Holder`` record ``inspect()`` shows for a live lease."""
    return Holder(
        owner=owner,
        epoch=epoch,
        expires_in=round(max(0.0, expires_in), 3),
        alive=True if local else holder_alive(owner),
        local=local,
    )


def lease_alive(store: SessionStore, key: SessionKey) -> bool:
    """Whether some runtime holds ``key``'s lease now and executes it: a live lease whose
    holder is not known dead (one of this host that is gone does not count)."""
    lease = store.current_lease(key)
    return lease is not None and holder_alive(lease.owner) is not False
