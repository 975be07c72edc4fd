"""``/v1/whoami`` for every kind of token, two ``Authorization`` headers refused on the read
endpoints, and ``/ui``'s redirect naming no host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from bus.runtime.settings import Tokens
from tests.conftest import assert_error

TOKENS = {"tokens": Tokens.parse("acme:tok-acme"), "admin_tokens": Tokens.parse_admin("tok-admin")}


async def test_whoami_answers_an_org_admin_token(platform: Callable[..., Any]) -> None:
    async with platform(**TOKENS) as p:
        admin = await p.client.get(f"{p.url}/v1/whoami", headers={"Authorization": "Bearer tok-admin"})
        assert admin.status_code == 200 and admin.json() == {"tenant": None, "admin": True, "tokens": True}
        tenant = await p.client.get(f"{p.url}/v1/whoami", headers={"Authorization": "Bearer tok-acme"})
        assert tenant.json() == {"tenant": "acme", "tokens": True}
        assert_error(await p.client.get(f"{p.url}/v1/whoami", headers={"Authorization": "Bearer nope"}), 401)


async def test_two_authorization_headers_are_refused(platform: Callable[..., Any]) -> None:
    async with platform(**TOKENS) as p:
        for path in ("/v1/whoami", "/v1/audit/events"):
            headers = httpx.Headers([("Authorization", "Bearer nope"), ("Authorization", "Bearer tok-admin")])
            body = assert_error(await p.client.get(f"{p.url}{path}", headers=headers), 401, "unauthorized")
            assert "more than one Authorization header" in body["detail"]


async def test_ui_redirects_relatively(platform: Callable[..., Any]) -> None:
    async with platform() as p:
        response = await p.client.get(f"{p.url}/ui", headers={"Host": "evil.example"}, follow_redirects=False)
        assert response.status_code in (307, 308) and response.headers["location"] == "/ui/"
        page = await p.client.get(f"{p.url}/ui", follow_redirects=True)
        assert page.status_code == 200 and "<html" in page.text.lower()
