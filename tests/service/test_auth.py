"""The browser's sign-in (an HttpOnly, SameSite=Strict cookie) and its CSRF header, signing
out, revoking a token's sign-ins, CORS, and the token commands of the command line."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import agentnb as nb
from agentnb.cli import main
from tests.service.conftest import Service
from tests.service.helpers import REPO, ServerThread, issue
from tests.service.test_api import problem


@contextlib.contextmanager
def sign_in(service: Service, token: str) -> Iterator[tuple[httpx.Client, str]]:
    """A browser-like client signed in with ``token``; and its CSRF value."""
    with httpx.Client(base_url=service.url, timeout=30) as client:
        response = client.post("/v1/auth/sign-in", json={"token": token})
        assert response.status_code == 200, response.text
        yield client, response.json()["csrf"]


class TestSignIn:
    def test_sign_in_sets_a_strict_http_only_cookie(self, service: Service) -> None:
        """Signing in answers the user and a CSRF value and sets an HttpOnly, SameSite=Strict
        cookie that is not the token."""
        token = issue(service.store_url, "dana")
        with httpx.Client(base_url=service.url) as client:
            response = client.post("/v1/auth/sign-in", json={"token": token})
        assert response.json()["user_id"] == "dana"
        assert response.json()["auth"] == "sign-in"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert token not in cookie
        assert "Secure" not in cookie  # plain http on loopback

    def test_cookie_reads_but_changes_need_the_csrf_header(self, service: Service) -> None:
        """With the cookie alone a GET works and a POST is a 403; with the header it works."""
        with sign_in(service, issue(service.store_url, "erin")) as (client, csrf):
            assert client.get("/v1/sessions").status_code == 200
            problem(client.post("/v1/sessions", json={}), 403, "Forbidden")
            wrong = client.post("/v1/sessions", json={}, headers={"X-CSRF-Token": "nope"})
            problem(wrong, 403, "Forbidden")
            made = client.post("/v1/sessions", json={}, headers={"X-CSRF-Token": csrf})
            assert made.status_code == 201

    def test_sign_out_ends_the_cookie_even_if_copied(self, service: Service) -> None:
        """After sign-out the cookie's value is refused, even sent by someone who kept it."""
        with sign_in(service, issue(service.store_url, "finn")) as (client, csrf):
            kept = dict(client.cookies)
            assert (
                client.post("/v1/auth/sign-out", headers={"X-CSRF-Token": csrf}).status_code == 204
            )
        with httpx.Client(base_url=service.url, cookies=kept) as thief:
            problem(thief.get("/v1/sessions"), 401, "Unauthorized")

    def test_revoking_the_token_ends_its_sign_ins(self, service: Service) -> None:
        """Revoking a token (agentnb token revoke) signs out the pages signed in with it."""
        token = issue(service.store_url, "gail")
        with sign_in(service, token) as (client, _):
            assert client.get("/v1/auth/me").json()["user_id"] == "gail"
            assert main(["token", "revoke", token.split(".")[0], "--store", service.store_url]) == 0
            problem(client.get("/v1/sessions"), 401, "Unauthorized")

    def test_a_sign_in_cannot_sign_in_again(self, service: Service) -> None:
        """Only a token from agentnb token add signs a browser in, not a sign-in cookie."""
        with sign_in(service, issue(service.store_url, "hugo")) as (client, _):
            (cookie,) = client.cookies.values()
            problem(client.post("/v1/auth/sign-in", json={"token": cookie}), 401, "Unauthorized")

    def test_bad_token_does_not_sign_in(self, service: Service) -> None:
        """A wrong token gets no cookie."""
        with httpx.Client(base_url=service.url) as client:
            response = client.post("/v1/auth/sign-in", json={"token": "tok_x.y"})
        problem(response, 401, "Unauthorized")
        assert "set-cookie" not in response.headers


class TestCors:
    def test_cors_is_an_allow_list(self, tmp_path: Path) -> None:
        """An allowed origin gets CORS headers on a preflight; another origin does not."""
        from tests.service._agent import agent

        runtime = nb.Runtime(agent, store=f"sqlite:///{tmp_path / 'c.sqlite'}")
        try:
            with ServerThread(runtime, cors_origins=["https://app.example"]) as server:
                ask = {
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "authorization,content-type",
                }
                ok = httpx.options(
                    f"{server.url}/v1/sessions", headers={"Origin": "https://app.example", **ask}
                )
                assert ok.headers["access-control-allow-origin"] == "https://app.example"
                no = httpx.options(
                    f"{server.url}/v1/sessions", headers={"Origin": "https://evil.example", **ask}
                )
                assert "access-control-allow-origin" not in no.headers
        finally:
            runtime.close()


class TestCommandLine:
    def test_token_add_list_revoke(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """token add prints a token once; list shows its id and never the secret; revoke
        marks it revoked."""
        store = f"sqlite:///{tmp_path / 't.sqlite'}"
        assert main(["token", "add", "alice", "--label", "laptop", "--store", store]) == 0
        token = capsys.readouterr().out.strip()
        token_id, secret = token.split(".")
        assert main(["token", "list", "--store", store]) == 0
        listed = capsys.readouterr().out
        assert token_id in listed
        assert "laptop" in listed
        assert secret not in listed
        assert main(["token", "revoke", token_id, "--store", store]) == 0
        capsys.readouterr()
        assert main(["token", "list", "--json", "--store", store]) == 0
        (record,) = json.loads(capsys.readouterr().out)
        assert record["revoked_at"] is not None
        assert "digest" not in record

    def test_revoking_an_unknown_token_is_not_found(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """token revoke of an id never issued exits 3 (not found) saying so."""
        store = f"sqlite:///{tmp_path / 't.sqlite'}"
        assert main(["token", "revoke", "tok_0000000000000000", "--store", store]) == 3
        assert "no token" in capsys.readouterr().err

    def test_auth_none_is_refused_off_loopback(self, tmp_path: Path) -> None:
        """serve --auth none on a non-loopback host exits 2 before listening."""
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "agentnb.cli",
                "serve",
                "--agent",
                "tests.service._agent:agent",
                "--store",
                f"sqlite:///{tmp_path / 'n.sqlite'}",
                "--host",
                "0.0.0.0",
                "--auth",
                "none",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2
        assert "loopback" in done.stderr
