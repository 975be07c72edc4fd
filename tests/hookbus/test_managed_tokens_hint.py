"""A managed token (``hookbus tokens create``) against a gateway started without ``HOOKBUS_MANAGED_TOKENS=1``.

The gateway's 401 names the missing setting, and says the same of a token that exists in the
store as of one made up (it never reads the store then). ``/readyz`` announces whether managed
tokens are on, and ``hookbus tokens create`` warns in one line when no gateway it can find does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bus.redis.tokens import TokenStore
from bus.runtime.settings import Tokens
from tests.conftest import BusProbe, pre_tool_use, run_hookbus

TOKENS = Tokens.parse("acme:tok-a")
PLAIN = "missing or wrong bearer token"
HINT = "HOOKBUS_MANAGED_TOKENS=1"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_the_401_names_the_setting_for_a_managed_token_and_nothing_else(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    real, _ = await TokenStore(bus.redis, bus.keys).create("alpha")
    async with platform(tokens=TOKENS) as p:
        answers = {}
        for name, token in [("real", real), ("made up", "hb_" + "x" * 43)]:
            for path in ("/v1/hooks", "/v1/whoami"):
                if path == "/v1/hooks":
                    response = await p.post(pre_tool_use("ls"), headers=bearer(token))
                else:
                    response = await p.client.get(f"{p.url}{path}", headers=bearer(token))
                assert response.status_code == 401, (name, path)
                answers[(name, path)] = response.json()["detail"]
        assert len(set(answers.values())) == 1  # an existing token is told exactly what a made-up one is
        detail = answers[("real", "/v1/hooks")]
        assert detail.startswith(PLAIN) and HINT in detail and "\n" not in detail
        assert "valid" not in detail and "alpha" not in detail
        for headers in (bearer("tok-wrong"), {}):
            refused = await p.post(pre_tool_use("ls"), headers=headers)
            assert refused.status_code == 401 and refused.json()["detail"] == PLAIN
        assert (await p.client.get(f"{p.url}/readyz")).json()["managed_tokens"] is False


async def test_readyz_announces_managed_tokens(platform: Callable[..., Any]) -> None:
    async with platform(managed_tokens=True) as p:
        assert (await p.client.get(f"{p.url}/readyz")).json()["managed_tokens"] is True


def create(tmp_path: Path, redis_url: str, hook_url: str | None = None) -> list[str]:
    result = run_hookbus(
        "tokens",
        "create",
        "--tenant",
        "alpha",
        "--state-dir",
        str(tmp_path),
        HOOKBUS_REDIS_URL=redis_url,
        HOOKBUS_URL=hook_url or "",  # empty: no gateway named
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("hb_")
    return [line for line in result.stderr.splitlines() if "warning" in line]


async def test_tokens_create_warns_when_no_gateway_accepts_managed_tokens(
    platform: Callable[..., Any], redis_url: str, tmp_path: Path
) -> None:
    async with platform(tokens=TOKENS) as p:
        # The command runs beside the gateway's loop, which must keep answering /readyz.
        warnings = await asyncio.to_thread(create, tmp_path, redis_url, f"{p.url}/v1/hooks")
    assert warnings == [
        f"hookbus: warning: the gateway at {p.url} does not accept managed tokens; "
        f"gateways accept them only with {HINT}"
    ]
    async with platform(managed_tokens=True) as p:
        assert await asyncio.to_thread(create, tmp_path, redis_url, p.url) == []
    (nothing,) = await asyncio.to_thread(create, tmp_path, redis_url)
    assert (
        nothing.startswith("hookbus: warning: found no running gateway that accepts managed tokens") and HINT in nothing
    )
