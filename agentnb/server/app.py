"""``create_app``: the service as an ASGI app (FastAPI) around one ``Runtime``.

The app holds no state of its own beyond the feeds of open streams: every route reads or
writes through the runtime's sessions and store, so several API servers can share one
PostgreSQL store (each with ``Runtime(..., execute=False)``, next to ``agentnb worker``
processes) and a restarted server carries on from the store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from agentnb import __version__
from agentnb.errors import AgentnbError, InvalidInput, StorageError
from agentnb.runtime.runtime import Runtime
from agentnb.server import (
    agui,
    aisdk,
    feedback,
    openai_api,
    schedules,
    sessions,
    stream,
    tokens,
    turns,
)
from agentnb.server.auth import Auth
from agentnb.server.problems import (
    HTTP_PROBLEMS,
    PROBLEM_JSON,
    RETRY_AFTER,
    Problem,
    problem_body,
    problem_of,
)
from agentnb.server.revocations import TokenWatch
from agentnb.server.stream import Feeds

__all__ = ["create_app"]

log = logging.getLogger("agentnb.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_STATIC = {
    "app.js": "text/javascript",
    "app.css": "text/css",
    "index.html": "text/html",
    "favicon.svg": "image/svg+xml",
}
_DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
"""The API docs' assets, served from the ``fastapi-offline`` package (Swagger UI, ReDoc)."""


def _docs_assets() -> Any:
    """The folder holding ``_DOCS_ASSETS`` (None without the package: FastAPI's docs pages,
    which load them from a CDN, are served instead)."""
    try:
        folder = resources.files("fastapi_offline") / "static"
    except ModuleNotFoundError:
        return None
    return folder if all((folder / name).is_file() for name in _DOCS_ASSETS) else None


def _serve_docs(app: FastAPI, assets: Any) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` with their scripts and styles served here, so
    the docs work offline (as the chat page does)."""

    @app.get("/docs", include_in_schema=False)
    def swagger() -> Response:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="agentnb API",
            swagger_js_url="/docs/assets/swagger-ui-bundle.js",
            swagger_css_url="/docs/assets/swagger-ui.css",
            swagger_favicon_url="/docs/assets/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> Response:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title="agentnb API",
            redoc_js_url="/docs/assets/redoc.standalone.js",
            redoc_favicon_url="/docs/assets/favicon.png",
            with_google_fonts=False,
        )

    @app.get("/docs/assets/{name}", include_in_schema=False)
    def docs_asset(name: str) -> Response:
        if name not in _DOCS_ASSETS:
            raise StarletteHTTPException(404)
        return FileResponse(
            str(assets / name),
            media_type=_DOCS_ASSETS[name],
            headers={"Cache-Control": "public, max-age=86400"},
        )


def _serve_health(app: FastAPI, runtime: Runtime) -> None:
    """``/healthz`` (the process is up) and ``/readyz`` (its store answers). Neither needs
    a token, so neither names the store (a file path, a user and host): ready or not."""

    @app.get("/healthz", tags=["health"], summary="The process is up")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="The store is reachable")
    def readyz() -> Response:
        try:
            runtime.check_open()
            runtime.store.get_token("tok_readyz")  # one indexed read of the store
        except StorageError as exc:
            log.warning("/readyz: the store is not ready: %s", exc)
            detail = "the store cannot be reached; the service's log says why"
            return _problem_response(503, problem_body(503, "StorageError", detail, "/readyz"))
        return JSONResponse({"status": "ready"})


def _problem_response(status: int, body: dict[str, Any]) -> JSONResponse:
    headers = {}
    if status in RETRY_AFTER:
        headers["Retry-After"] = str(RETRY_AFTER[status])
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="agentnb"'
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


class _BodyLimit:
    """Refuses request bodies over ``limit`` bytes (declared or streamed) with a 413 problem,
    before a route reads them."""

    def __init__(self, app: ASGIApp, limit: int, skip: tuple[str, ...] = ()) -> None:
        self.app = app
        self.limit = limit
        self.skip = skip
        """Paths of mounted doors that limit bodies themselves (in their own error shape)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path", "").startswith(self.skip):
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise StarletteHTTPException(413, self._detail())
            return message

        await self.app(scope, limited, send)

    def _detail(self) -> str:
        return (
            f"the request body is larger than this service accepts ({self.limit} bytes); "
            "send less (hand large material over in parts)"
        )

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = problem_body(413, HTTP_PROBLEMS[413][0], self._detail(), scope.get("path"))
        await _problem_response(413, body)(scope, receive, send)


def _mount_doors(app: FastAPI, max_body: int) -> None:
    """The doors of standard protocols (``agentnb.server.doors``): the same tokens, users
    and feeds as ``/v1``."""
    app.include_router(agui.router)
    app.include_router(aisdk.router)
    app.mount(openai_api.PREFIX, openai_api.create_door(app, max_body))


def _serve_page(app: FastAPI) -> None:
    """The chat page at ``/``, its favicon and its static files."""
    static = resources.files("agentnb.server") / "static"

    @app.get("/", include_in_schema=False)
    def page() -> Response:
        return FileResponse(str(static / "index.html"), headers=_PAGE_HEADERS)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:
        # Browsers ask for /favicon.ico on every load; an SVG answers it (and the page's
        # <link rel="icon">).
        return FileResponse(str(static / "favicon.svg"), media_type="image/svg+xml")

    @app.get("/static/{name}", include_in_schema=False)
    def static_file(name: str) -> Response:
        if name not in _STATIC:
            raise StarletteHTTPException(404)
        return FileResponse(str(static / name), media_type=_STATIC[name], headers=_PAGE_HEADERS)


class _RelativeRedirects:
    """Redirects of this app (a path's trailing slash) name a path, never a host: the
    router builds an absolute URL from the request's ``Host``, which a client chooses."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def relative(message: Message) -> None:
            if message["type"] == "http.response.start" and 300 <= message["status"] < 400:
                message["headers"] = [
                    (name, _path_of(value) if name.lower() == b"location" else value)
                    for name, value in message.get("headers", ())
                ]
            await send(message)

        await self.app(scope, receive, relative)


def _path_of(location: bytes) -> bytes:
    """``location``'s path and query (``/`` for none)."""
    if b"://" not in location[:16]:
        return location
    rest = location.split(b"://", 1)[1]
    slash = rest.find(b"/")
    return b"/" if slash < 0 else rest[slash:]


def create_app(
    runtime: Runtime,
    *,
    auth: bool = True,
    cors_origins: Iterable[str] = (),
    max_body: int = 1 << 20,
    allowed_hosts: Iterable[str] = (),
) -> FastAPI:
    """The service of ``runtime`` as an ASGI app: the ``/v1`` API, the chat page at ``/``,
    ``/healthz``, ``/readyz``, the OpenAPI schema at ``/openapi.json`` and docs at ``/docs``
    (Swagger UI) and ``/redoc``, whose assets it serves itself (offline, like the page).

    ``auth``: every request needs a bearer token or the page's sign-in (``agentnb token
    add``); False lets every request act for the user ``default`` (keep such an app on
    loopback; it answers only to loopback host names and ``allowed_hosts``, see
    ``agentnb.server.auth``). ``cors_origins``: origins other pages may call the API from (none by
    default). ``max_body``: the largest request body, in bytes. The runtime stays the
    caller's: close it after the server stops (``Runtime.close`` stops and records the runs
    in flight); streams end when the app shuts down.
    """
    if not isinstance(runtime, Runtime):
        raise InvalidInput(f"create_app needs an nb.Runtime, got {type(runtime).__name__}")
    if not isinstance(max_body, int) or isinstance(max_body, bool) or max_body < 1024:
        raise InvalidInput(f"max_body must be bytes (an int of at least 1024), got {max_body!r}")
    origins = [cors_origins] if isinstance(cors_origins, str) else list(cors_origins)
    feeds = Feeds(runtime)
    hosts = [allowed_hosts] if isinstance(allowed_hosts, str) else list(allowed_hosts)
    watch = TokenWatch(Auth(runtime.store, enabled=auth, allowed_hosts=hosts))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            watch.close()
            feeds.close()

    docs_assets = _docs_assets()
    offline_docs = docs_assets is not None
    app = FastAPI(
        title="agentnb",
        version=__version__,
        docs_url=None if offline_docs else "/docs",
        redoc_url=None if offline_docs else "/redoc",
        description=(
            "Durable, steerable agent sessions over HTTP. Every route acts for the user of "
            "its token; errors are RFC 9457 problems whose `type` is agentnb's error name."
        ),
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.auth = watch.auth
    app.state.feeds, app.state.token_watch = feeds, watch

    @app.exception_handler(AgentnbError)
    @app.exception_handler(TimeoutError)
    @app.exception_handler(Problem)
    async def _agentnb_error(request: Request, exc: Exception) -> Response:
        status, body = problem_of(exc, request.url.path)
        return _problem_response(status, body)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        parts = []
        for error in exc.errors()[:5]:
            where = ".".join(str(p) for p in error.get("loc", ()))
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
        detail = "the request is not valid: " + "; ".join(parts) + " (see /docs)"
        return _problem_response(400, problem_body(400, "InvalidInput", detail, request.url.path))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        type_, title = HTTP_PROBLEMS.get(exc.status_code, ("Problem", "the request failed"))
        detail = exc.detail if isinstance(exc.detail, str) and exc.status_code != 404 else title
        return _problem_response(
            exc.status_code, problem_body(exc.status_code, type_, detail, request.url.path)
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        status, body = problem_of(exc, request.url.path)
        return _problem_response(status, body)

    for router in (
        sessions.router,
        turns.router,
        feedback.router,
        stream.router,
        tokens.router,
        schedules.router,
    ):
        app.include_router(router, prefix="/v1")
    _mount_doors(app, max_body)

    _serve_health(app, runtime)

    if docs_assets is not None:
        _serve_docs(app, docs_assets)

    _serve_page(app)

    if origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "Last-Event-ID"],
            expose_headers=["Retry-After", "Location"],
        )
    app.add_middleware(_BodyLimit, limit=max_body, skip=(openai_api.PREFIX + "/",))
    app.add_middleware(_RelativeRedirects)
    return app
