"""The service: ``serve`` (the HTTP API and chat page) and ``token``; the operations
(``backup``, ``verify``, ``restore``, ``migrate``, ``schedule``) come from ``agentnb.ops.cli``."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import agentnb as nb
from agentnb.cli.args import _STORE_HELP, store_url
from agentnb.cli.format import EXIT_OK, NULL, _not_found, cut, print_json, table_lines
from agentnb.cli.running import _load_agent, _worker_store
from agentnb.errors import (
    AgentnbError,
)
from agentnb.ops.cli import add_commands as ops_commands
from agentnb.ops.cli import add_schedule_option, add_webhook_options, webhooks_of
from agentnb.stores import default_store_url, split_url


def _serve(args: argparse.Namespace) -> int:
    """Serve the agent's sessions over HTTP: the /v1 API, its stream and the chat page.

    SIGTERM and SIGINT stop it: streams end, runs in flight are interrupted and recorded
    (as ``Runtime.close`` does), then it exits 0.
    """
    from agentnb.server import serve  # the server extra

    agent = _load_agent(args.agent, "serve")
    store = _worker_store(args.store, args.concurrency)
    try:
        runtime = nb.Runtime(
            agent,
            store=store,
            execute=not args.no_execute,
            auto_resume=args.auto_resume,
            accept_agent_change=args.accept_agent_change,
            webhooks=webhooks_of(args),
            schedules=args.schedules,
        )
    except BaseException:
        if isinstance(store, nb.SessionStore):
            store.close()
        raise
    auth = args.auth == "token"
    where = "localhost" if args.host in {"127.0.0.1", "::1"} else args.host
    sign_in = None
    if auth and args.token_for is not None:
        from agentnb import tokens

        sign_in = tokens.issue(
            runtime.store,
            args.token_for,
            label="agentnb serve --token-for",
            expires_at=runtime.store.clock.now() + _TOKEN_FOR_SECONDS,
        )

    def ready(port: int) -> None:
        mode = "API only; workers execute" if args.no_execute else "executing"
        print(
            f"agentnb serving {agent.agent_id!r} on {runtime.store.url} ({mode}): "
            f"http://{where}:{port}/ (API /v1, docs /docs); Ctrl-C to stop",
            flush=True,
        )
        if sign_in is not None:
            print(
                f"sign in on the page as {args.token_for!r} with this token (it is revoked "
                f"when this server stops): {sign_in[0]}",
                flush=True,
            )
        elif auth and not runtime.store.list_tokens():
            print("no tokens yet: agentnb token add USER --store ...", flush=True)

    try:
        serve(
            runtime,
            host=args.host,
            port=args.port,
            auth=auth,
            cors_origins=args.cors_origin or (),
            max_body=args.max_body,
            allowed_hosts=args.allowed_host or (),
            ready=ready,
            log_level=args.log_level,
            proxy_headers=True,
            forwarded_allow_ips=args.forwarded_allow_ips,
        )
    finally:
        runtime.close()
        if isinstance(store, nb.SessionStore):
            store.close()
        if sign_in is not None:
            _revoke_quietly(args.store, sign_in[1].token_id)
    return EXIT_OK


_TOKEN_FOR_SECONDS = 24 * 3600.0
"""How long a ``serve --token-for`` token lasts if its server dies before revoking it."""


def _revoke_quietly(url: str | None, token_id: str) -> None:
    """Revoke the token ``serve --token-for`` issued (a memory store went with its server)."""
    url = url or default_store_url()
    if split_url(url).scheme.lower() == "memory":
        return
    try:
        with contextlib.closing(nb.open_store(url)) as store:
            store.revoke_token(token_id)
    except AgentnbError as exc:
        print(f"warning: the sign-in token {token_id} was not revoked: {exc}", file=sys.stderr)


def _token(args: argparse.Namespace) -> int:
    """``agentnb token add|list|revoke``: the service's bearer tokens in a store."""
    from agentnb import tokens

    store = nb.open_store(args.store or default_store_url())
    try:
        if args.action == "add":
            token, record = tokens.issue(store, args.user, label=args.label)
            if args.json:
                print_json({"token": token, **tokens.record_fields(record)})
            else:
                print(token)
                print(
                    f"(token {record.token_id} for user {record.user_id!r}: shown once, "
                    "the store keeps only its digest)",
                    file=sys.stderr,
                )
            return EXIT_OK
        if args.action == "revoke":
            if all(t.token_id != args.token_id for t in store.list_tokens()):
                return _not_found(
                    f"no token {args.token_id!r} in {store.url}; agentnb token list shows them"
                )
            record = tokens.revoke(store, args.token_id)
            if args.json:
                print_json(tokens.record_fields(record))
            else:
                print(f"revoked {record.token_id} (user {record.user_id!r}) and its sign-ins")
            return EXIT_OK
        records = [t for t in store.list_tokens(args.user) if args.all or t.parent is None]
    finally:
        store.close()
    rows = [tokens.record_fields(t) for t in records]
    if args.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("(no tokens)")
        return EXIT_OK

    def when(seconds: float | None) -> str:
        if seconds is None:
            return NULL
        return datetime.fromtimestamp(seconds, UTC).isoformat(sep=" ", timespec="seconds")

    table = [
        [
            r["token_id"],
            r["user_id"],
            cut(r["label"], 32) or NULL,
            when(r["created_at"]),
            when(r["last_used_at"]),
            "revoked " + when(r["revoked_at"]) if r["revoked_at"] else "active",
        ]
        for r in rows
    ]
    print(
        "\n".join(table_lines(["token", "user", "label", "created", "last used", "state"], table))
    )
    return EXIT_OK


def service_commands(
    command: Callable[[str, Callable[[argparse.Namespace], int], str, str], Any],
) -> None:
    """``serve`` and ``token``; the operations (``backup``, ``verify``, ``restore``,
    ``migrate``) from ``agentnb.ops.cli``."""
    ops_commands(command, store_url, _STORE_HELP)
    serve = command(
        "serve",
        _serve,
        "serve an agent's sessions over HTTP: the /v1 API, its stream and a chat page",
        "Serve the sessions of an agent: a JSON API under /v1 with Server-Sent Events, a "
        "browser chat at /, OpenAPI docs at /docs. Every request needs a token (agentnb "
        "token add). With --no-execute this server only accepts and reads, while agentnb "
        "worker processes on PostgreSQL execute. Example: agentnb serve --agent "
        "myproject.agents:cost_agent --store sqlite:///.agentnb/agentnb.sqlite --port 8000",
    )
    serve.add_argument("--agent", required=True, help="module:attribute of an nb.Agent")
    serve.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on")
    serve.add_argument("--port", type=int, default=8000, help="port (0: a free one)")
    serve.add_argument(
        "--no-execute",
        action="store_true",
        help="accept and read only; agentnb worker processes execute (PostgreSQL)",
    )
    serve.add_argument(
        "--auth",
        choices=["token", "none"],
        default="token",
        help="token (default): bearer tokens and the page's sign-in; none: every request "
        "acts for user 'default' (loopback hosts only)",
    )
    serve.add_argument(
        "--allowed-host",
        action="append",
        metavar="NAME",
        help="with --auth none, a host name the service answers to besides localhost, "
        "127.0.0.1 and [::1] (repeat)",
    )
    serve.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help="an origin other pages may call the API from, e.g. https://app.example.com "
        "(repeat; default none)",
    )
    serve.add_argument(
        "--max-body", type=int, default=1 << 20, help="largest request body in bytes (1 MiB)"
    )
    serve.add_argument(
        "--auto-resume",
        action="store_true",
        help="resume turns a crash cut off when nothing uncertain blocks them",
    )
    serve.add_argument(
        "--concurrency", type=int, default=16, help="PostgreSQL connections for sessions"
    )
    serve.add_argument(
        "--accept-agent-change",
        action="store_true",
        help="take over sessions bound to another version of the agent",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        default="127.0.0.1",
        help="proxies whose X-Forwarded-* headers are trusted (https behind a proxy)",
    )
    add_webhook_options(serve)
    add_schedule_option(serve)
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument(
        "--token-for",
        metavar="USER",
        default=None,
        help="issue a token for USER as the server starts, print it, and revoke it when the "
        "server stops (for trying the page: make serve; agentnb token add for lasting ones)",
    )

    token = command(
        "token",
        _token,
        "add, list or revoke the service's bearer tokens",
        "Manage the tokens agentnb serve accepts. The store keeps only a digest: a token is "
        "printed once, by add. Examples: agentnb token add alice --label laptop; agentnb "
        "token list; agentnb token revoke tok_0123456789abcdef",
    )
    actions = token.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="issue a token for a user (printed once)",
        description="Issue a token for USER and print it once. "
        "Example: agentnb token add alice --label laptop",
    )
    add.add_argument("user", help="the user the token acts for")
    add.add_argument("--label", default="", help="what the token is for")
    listing = actions.add_parser(
        "list",
        help="list tokens (never the tokens themselves)",
        description="List the tokens (ids, users, labels, last use). "
        "Example: agentnb token list --user alice",
    )
    listing.add_argument("--user", default=None, help="only this user's tokens")
    listing.add_argument("--all", action="store_true", help="also the browser sign-ins")
    revoke = actions.add_parser(
        "revoke",
        help="revoke a token and its browser sign-ins",
        description="Revoke a token; the pages signed in with it are signed out. "
        "Example: agentnb token revoke tok_0123456789abcdef",
    )
    revoke.add_argument("token_id", help="the token's id (tok_...), from agentnb token list")
    for p in (add, listing, revoke):
        p.add_argument("--store", default=None, help="store URL (default: SQLite in ./.agentnb/)")
        p.add_argument("--json", action="store_true", help="print JSON instead of text")
