"""``/v1/auth`` and ``/v1/tokens``: the chat page's sign-in, and a user's own tokens.

``POST /v1/auth/sign-in`` takes a token (in the JSON body, never in a URL) and answers with
the user and the CSRF value, setting the sign-in cookie: HttpOnly, ``SameSite=Strict``, on
``/``, ``Secure`` when the request came over https, for ``SIGN_IN_SECONDS``.
``POST /v1/auth/sign-out`` revokes that sign-in (a copied cookie stops working too) and
clears the cookie. ``GET /v1/auth/me`` says who the request acts for. ``GET /v1/tokens``
lists the caller's tokens (never a secret), ``DELETE /v1/tokens/{id}`` revokes one of them
(and the sign-ins made with it). New tokens are issued by ``agentnb token add`` only.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from agentnb import tokens
from agentnb.errors import InvalidInput, Unauthorized
from agentnb.server.auth import COOKIE, NO_AUTH, Auth, Principal, current_user
from agentnb.server.problems import PROBLEM_RESPONSES

__all__ = ["router"]

router = APIRouter(tags=["tokens"], responses=PROBLEM_RESPONSES)
User = Annotated[Principal, Depends(current_user)]


class SignIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(description="a token from `agentnb token add USER`")


class Me(BaseModel):
    """Who the request acts for."""

    user_id: str
    auth: str = Field(description="token, sign-in or none (the service runs without auth)")
    csrf: str | None = Field(
        default=None, description="the X-CSRF-Token value a signed-in page sends with changes"
    )


class TokenInfo(BaseModel):
    """A token as the store keeps it (never the token itself)."""

    token_id: str
    user_id: str
    label: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None
    expires_at: float | None
    parent: str | None


def _auth(request: Request) -> Auth:
    auth: Auth = request.app.state.auth
    return auth


def _me(auth: Auth, principal: Principal) -> dict[str, Any]:
    if principal.token_id is None:
        return {"user_id": principal.user_id, "auth": "none", "csrf": auth.csrf_of(NO_AUTH)}
    if principal.signed_in:
        return {
            "user_id": principal.user_id,
            "auth": "sign-in",
            "csrf": auth.csrf_of(principal.token_id),
        }
    return {"user_id": principal.user_id, "auth": "token", "csrf": None}


def _token_info(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in TokenInfo.model_fields}


@router.post("/auth/sign-in", response_model=Me, summary="Sign a browser in with a token")
def sign_in(request: Request, response: Response, body: SignIn) -> dict[str, Any]:
    auth = _auth(request)
    if not auth.enabled:
        return {"user_id": "default", "auth": "none", "csrf": None}
    record = tokens.verify(auth.store, body.token)
    if record.parent is not None:
        raise Unauthorized("sign in with a token from `agentnb token add`, not a sign-in")
    now = auth.store.clock.now()
    cookie, sign_in = tokens.issue(
        auth.store,
        record.user_id,
        label=f"browser sign-in ({record.label or record.token_id})",
        expires_at=now + tokens.SIGN_IN_SECONDS,
        parent=record.token_id,
    )
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=int(tokens.SIGN_IN_SECONDS),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return _me(auth, Principal(record.user_id, sign_in.token_id, True))


@router.post("/auth/sign-out", status_code=204, response_class=Response, summary="Sign out")
def sign_out(request: Request, principal: User) -> Response:
    auth = _auth(request)
    if principal.signed_in and principal.token_id is not None:
        tokens.revoke(auth.store, principal.token_id)
        request.app.state.token_watch.check_now()  # its streams end now
    response = Response(status_code=204)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


@router.get("/auth/me", response_model=Me, summary="Who the request acts for")
def me(request: Request, principal: User) -> dict[str, Any]:
    return _me(_auth(request), principal)


@router.get("/tokens", response_model=list[TokenInfo], summary="The caller's tokens")
def list_tokens(request: Request, principal: User) -> list[dict[str, Any]]:
    return [_token_info(t) for t in _auth(request).store.list_tokens(principal.user_id)]


@router.delete("/tokens/{token_id}", response_model=TokenInfo, summary="Revoke one's token")
def revoke_token(request: Request, token_id: str, principal: User) -> dict[str, Any]:
    store = _auth(request).store
    record = store.get_token(token_id)
    if record is None or record.user_id != principal.user_id:
        raise InvalidInput(f"you have no token {token_id!r}; see GET /v1/tokens")
    revoked = tokens.revoke(store, token_id)
    request.app.state.token_watch.check_now()  # its streams (and its sign-ins') end now
    return _token_info(revoked)
