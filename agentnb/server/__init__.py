"""The agentnb service: sessions over HTTP and Server-Sent Events, and a chat page.

``create_app(runtime, *, auth=True, cors_origins=(), max_body=1 << 20)`` is the ASGI app
(FastAPI) for embedding; ``agentnb serve`` runs it with uvicorn (``serve`` below). The parts:

- ``auth``: who a request acts for (bearer tokens, the page's sign-in cookie and CSRF), and
  which session a route names (a sub-agent's child through its parent:
  ``/v1/sessions/<id>/children/<call id>``);
- ``problems``: the one mapping of agentnb errors to HTTP statuses and RFC 9457 bodies;
- ``sessions``, ``turns``, ``stream``, ``tokens``: the routers, by resource;
- ``guard``: bounds on a request's head (request line, header size and count, time),
  refused with 414/431/408 before the parser buffers them;
- ``render``: what the chat page shows (items with server-rendered Markdown, the panel);
- ``static/``: the chat page itself (HTML, CSS and JavaScript; no build step, no CDN); the
  API docs' assets come from the ``fastapi-offline`` package, so ``/docs`` needs no CDN
  either.

Needs the ``server`` extra: ``pip install -e ".[server]"``.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterable
from typing import Any

from agentnb.errors import install_hint

try:
    import fastapi  # noqa: F401 - the extra's presence is checked here, once
    import uvicorn
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the agentnb service needs FastAPI and uvicorn: " + install_hint("server")
    ) from exc

from agentnb.errors import InvalidInput
from agentnb.runtime.runtime import Runtime
from agentnb.server import guard
from agentnb.server.app import create_app

__all__ = ["bind", "create_app", "is_loopback", "serve"]

log = logging.getLogger("agentnb.server")

WORKER_POLL = 2.0
"""Seconds between a serving runtime's looks for queued work it was not told of."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only reaches this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


class _Server(uvicorn.Server):
    """uvicorn, ending the app's streams as soon as shutdown begins (not after the grace
    period): a stream would otherwise hold the shutdown open."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets)


def serve(
    runtime: Runtime,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    auth: bool = True,
    cors_origins: Iterable[str] = (),
    max_body: int = 1 << 20,
    allowed_hosts: Iterable[str] = (),
    ready: Callable[[int], None] | None = None,
    **uvicorn_options: Any,
) -> None:
    """Serve ``runtime`` until SIGINT/SIGTERM: the app on uvicorn and, when the runtime
    executes, its worker loop (``Runtime.serve``: queued work the API was not the one to
    accept, e.g. after a restart). On the way out, streams end, the worker loop lets its
    runs go, and the runtime is closed (runs in flight stop and are recorded as interrupted).

    ``auth=False`` is refused unless ``host`` is loopback; such a service answers only to
    loopback host names and ``allowed_hosts`` (``create_app``). ``ready`` is called with the
    port once the server listens (port 0 picks a free one).
    """
    if not auth and not is_loopback(host):
        raise InvalidInput(
            f"--auth none serves every request as one user: only on a loopback host "
            f"(127.0.0.1, ::1, localhost), not {host!r}; issue tokens with agentnb token add"
        )
    app = create_app(
        runtime,
        auth=auth,
        cors_origins=cors_origins,
        max_body=max_body,
        allowed_hosts=allowed_hosts,
    )
    if "http" not in uvicorn_options:  # bounded request heads (agentnb.server.guard)
        http, http_options = guard.protocol()
        uvicorn_options = {"http": http, **http_options, **uvicorn_options}
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=uvicorn_options.pop("log_level", "info"),
        timeout_graceful_shutdown=uvicorn_options.pop("timeout_graceful_shutdown", 5),
        **uvicorn_options,
    )
    server = _Server(config, app.state.feeds.close)
    sock = bind(config)  # before the worker starts: a port in use fails at once
    stop = threading.Event()
    worker = None
    if runtime.execute:
        worker = threading.Thread(
            target=runtime.serve,
            kwargs={"poll": WORKER_POLL, "stop": stop},
            name="agentnb-serve-worker",
            daemon=True,
        )
        worker.start()
    if ready is not None:
        ready(sock.getsockname()[1])
    restore = _quiet_signals()
    try:
        server.run(sockets=[sock])
    finally:
        restore()
        stop.set()
        if worker is not None:
            worker.join(timeout=15)
        runtime.close()


def bind(config: uvicorn.Config) -> socket.socket:
    """The listening socket of ``config``, with Nagle's algorithm off for the connections
    it accepts. uvicorn binds its own sockets so; one handed to it must say it, or every
    response written in two parts waits ~40 ms for the client's delayed ACK."""
    if config.uds or config.fd is not None:
        sock = config.bind_socket()
    else:
        sock = _bind_tcp(config.host, config.port)
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _bind_tcp(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port``, as uvicorn binds one, except that a port in use
    (or an address this machine does not have) is an ``OSError`` saying what to do, where
    uvicorn would log the errno and exit the process."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise OSError(
                f"port {port} on {host} is in use (another agentnb serve?): stop what listens "
                f"there, or pick another port with --port (--port 0 takes a free one)"
            ) from None
        raise OSError(f"cannot listen on {host}:{port} ({exc.strerror}); check --host") from None
    sock.set_inheritable(True)
    return sock


def _quiet_signals() -> Callable[[], None]:
    """Make SIGINT/SIGTERM harmless around ``server.run`` (main thread only): uvicorn shuts
    down gracefully on them and then raises the signal again, which would end the process
    before the runtime records its runs as stopped. Returns what restores the handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    saved = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}

    def restore() -> None:
        for sig, handler in saved.items():
            signal.signal(sig, handler)

    return restore
