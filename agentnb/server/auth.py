"""Who a request acts for: the one dependency every route of the service takes.

A request carries a bearer token (``Authorization: Bearer tok_...``, from ``agentnb token
add``) or, from the chat page, the HttpOnly sign-in cookie the page got by signing in once
with a token (``POST /v1/auth/sign-in``): an ``EventSource`` cannot send headers, and a token
in a URL would end up in logs. A request authenticated by the cookie that changes anything
(every method but GET and HEAD) must also carry ``X-CSRF-Token`` with the value the sign-in
answered; the cookie is ``SameSite=Strict`` as well. Tokens are checked by
``agentnb.tokens.verify`` (digests only, constant-time comparison) on every request, so a
revoked token, or a signed-out page, is refused at once. ``create_app(auth=False)`` makes
every request act for the user ``default`` (``agentnb serve`` allows that on loopback only);
such a service answers only to loopback host names (``LOOPBACK_HOSTS`` and the
``allowed_hosts`` given: a foreign ``Host`` is DNS rebinding) with a 421, and refuses a
change with another site's ``Origin`` or a body that is not JSON unless it carries the
page's CSRF header (``GET /v1/auth/me`` answers it).

``open_session`` resolves the session a route names, for the principal's user. A route's
``{session_id}`` is a session id or, for a sub-agent's child session (whose own id is
``<parent id>/<call id>``), the parent's followed by ``/children/<call id>``, nested for
grandchildren: ``/v1/sessions/s1/children/call_a/stream`` is the stream of the child of
``s1``'s call ``call_a``. The child is found through its parent's ``child(call_id)``, so it
is scoped as its root is: a child of another user's session is a 404, as that session is.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

from fastapi import Path, Request, Security
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from agentnb import tokens
from agentnb.errors import InvalidInput, SessionNotFound, Unauthorized
from agentnb.ids import check_id
from agentnb.server.problems import Problem
from agentnb.session import Session
from agentnb.stores.base import SessionStore, TokenRecord

__all__ = [
    "CHILDREN",
    "COOKIE",
    "CSRF_HEADER",
    "LOOPBACK_HOSTS",
    "NO_AUTH",
    "SESSION",
    "Auth",
    "Principal",
    "SessionId",
    "current_user",
    "open_session",
    "short_call",
]

T = TypeVar("T")

COOKIE = "agentnb_session"
CSRF_HEADER = "X-CSRF-Token"
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_USER = "default"
CHILDREN = "/children/"
"""What joins a parent's session id and a call id in a child session's address."""


LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
"""The host names a service without auth answers to (besides ``--allowed-host`` values)."""
NO_AUTH = "agentnb/no-auth"
"""What a service without auth derives its page's CSRF value from."""
_JSON_TYPES = frozenset({"application/json", "application/problem+json"})


def _host_of(netloc: str) -> str:
    """The host name of a ``Host`` header or an origin's authority, without its port."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc[: netloc.find("]") + 1] if "]" in netloc else netloc
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


class _SessionRef(Convertor[str]):
    """A route's ``{session_id:session}``: a session id, then ``/children/<call id>`` for
    each sub-agent level (a grammar without ambiguity: no route name follows a bare
    ``/children/``)."""

    regex = "[^/]+(?:/children/[^/]+)*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("session", _SessionRef())
SESSION = "/sessions/{session_id:session}"
"""The path of a session (or a child session) that every per-session route starts with."""
SessionId = Annotated[
    str,
    Path(
        description=(
            "a session id; a sub-agent's child session is its parent's followed by "
            "`/children/<call id>` (nested for grandchildren)"
        )
    ),
]

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token from `agentnb token add USER`: `Authorization: Bearer tok_...`.",
)
_cookie = APIKeyCookie(
    name=COOKIE,
    auto_error=False,
    scheme_name="signIn",
    description="The chat page's sign-in (POST /v1/auth/sign-in); changes need X-CSRF-Token.",
)


@dataclass(frozen=True, slots=True)
class Principal:
    """The user a request acts for, and how it proved it."""

    user_id: str
    token_id: str | None = None
    """The token (or sign-in) used; None when the service runs without auth."""
    signed_in: bool = False
    """Authenticated by the page's sign-in cookie (changes need the CSRF header)."""


class Auth:
    """Checks credentials against the store's tokens (or lets everyone in as ``default``)."""

    def __init__(
        self, store: SessionStore, *, enabled: bool, allowed_hosts: Iterable[str] = ()
    ) -> None:
        self.store = store
        self.enabled = enabled
        self.allowed_hosts = LOOPBACK_HOSTS | {h.lower() for h in allowed_hosts}
        self._csrf_key = hmac.new(store.secret(), b"agentnb/csrf/v1", hashlib.sha256).digest()

    def csrf_of(self, token_id: str) -> str:
        """The CSRF value of a sign-in (derived from its id with the store's secret)."""
        return hmac.new(self._csrf_key, token_id.encode(), hashlib.sha256).hexdigest()[:40]

    def principal(self, request: Request, bearer: str | None, cookie: str | None) -> Principal:
        """The request's principal; ``Unauthorized`` or a 403 ``Problem`` if it has none."""
        if not self.enabled:
            self._check_unauthenticated(request)
            return Principal(DEFAULT_USER)
        if bearer is not None:
            record = tokens.verify(self.store, bearer)
            return Principal(record.user_id, record.token_id, record.parent is not None)
        if cookie is not None:
            record = tokens.verify(self.store, cookie)
            if record.parent is None:
                raise Unauthorized("the sign-in cookie is not a sign-in; sign in again")
            if request.method not in _SAFE:
                sent = request.headers.get(CSRF_HEADER, "")
                if not hmac.compare_digest(sent.encode(), self.csrf_of(record.token_id).encode()):
                    raise Problem(
                        403,
                        f"a signed-in page must send the {CSRF_HEADER} header its sign-in "
                        "answered with every change; reload the page",
                    )
            return Principal(record.user_id, record.token_id, True)
        raise Unauthorized(
            "no credentials: send 'Authorization: Bearer <token>' (agentnb token add USER), "
            "or sign in on the chat page"
        )

    def _check_unauthenticated(self, request: Request) -> None:
        """Without auth, only this machine's names may be asked for (a page whose name
        rebinds to 127.0.0.1 is same-origin to its browser, but sends its own name as
        ``Host``), and a change must come from this service's own page: with its CSRF
        header, or JSON (or no body) and no ``Origin`` of another site."""
        host = _host_of(request.headers.get("host", ""))
        if host not in self.allowed_hosts:
            raise Problem(
                421,
                f"this service runs without auth and answers only to {sorted(self.allowed_hosts)}"
                f", not to the host name {host[:80]!r}; open it as http://127.0.0.1:<port>/ "
                "(or start it with --allowed-host NAME)",
            )
        if request.method in _SAFE:
            return
        sent = request.headers.get(CSRF_HEADER, "")
        if hmac.compare_digest(sent.encode(), self.csrf_of(NO_AUTH).encode()):
            return
        origin = request.headers.get("origin")
        if origin is not None and _host_of(urlsplit(origin).netloc) not in self.allowed_hosts:
            raise Problem(403, f"a change from another site ({origin[:80]!r}) is refused")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and kind not in _JSON_TYPES:
            raise Problem(
                403,
                f"a change must be JSON (Content-Type: application/json) or carry the page's "
                f"{CSRF_HEADER} header, not {kind[:80]!r}",
            )

    def still_valid(self, principal: Principal) -> bool:
        """Whether the principal's token (and its parent) is still usable (streams recheck)."""
        if principal.token_id is None:
            return True
        record: TokenRecord | None = self.store.get_token(principal.token_id)
        now = self.store.clock.now()
        if record is None or not record.usable(now):
            return False
        if record.parent is not None:
            parent = self.store.get_token(record.parent)
            return parent is not None and parent.usable(now)
        return True


async def short_call(store: SessionStore, fn: Callable[..., T], /, *args: Any) -> T:
    """``fn(*args)``, a short store call (a token check, a command accepted into an inbox):
    inline on the server's loop when the store's I/O is local (no hand-off to a worker
    thread and back), else in the threadpool."""
    if store.local_io:
        return fn(*args)
    return await run_in_threadpool(fn, *args)


async def current_user(
    request: Request,
    bearer: HTTPAuthorizationCredentials | None = Security(_bearer),  # noqa: B008
    cookie: str | None = Security(_cookie),
) -> Principal:
    """The dependency every route takes: the principal of the request (or 401/403)."""
    auth: Auth = request.app.state.auth
    if bearer is not None and bearer.scheme.lower() != "bearer":
        raise Unauthorized("only 'Authorization: Bearer <token>' is accepted")
    credentials = None if bearer is None else bearer.credentials
    return await short_call(auth.store, auth.principal, request, credentials, cookie)


def check_session_id(session_id: str) -> str:
    """A session id the API can address (``InvalidInput`` before any store call)."""
    check_id(session_id, "session_id")
    if "/" in session_id:
        raise InvalidInput(f"session_id must not contain '/', got {session_id!r}")
    return session_id


def open_session(request: Request, session_id: str, principal: Principal) -> Session:
    """The principal's session ``session_id`` (or the child session it addresses, see the
    module): ``SessionNotFound`` (404) if it has none of that id, whether nobody has one or
    another user does, or if the parent has no sub-agent call of that id; ``SessionDeleted``
    (410). Every id is checked before the store is read."""
    root, *calls = session_id.split(CHILDREN)
    check_session_id(root)
    for call_id in calls:
        check_id(call_id, "call_id")
    runtime = request.app.state.runtime
    session: Session = runtime.open(root, user_id=principal.user_id)
    for call_id in calls:
        try:
            session = session.child(call_id)
        except InvalidInput:
            raise SessionNotFound(
                f"session {session.key.session_id!r} has no sub-agent call {call_id!r}; "
                "its children are listed at .../children"
            ) from None
    return session
