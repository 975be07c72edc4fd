"""Tenants end to end: managed tokens, pushed layers, isolation, a push under load, the org lock."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import yaml

from bus.policy.store import PolicyStore
from bus.redis.tokens import TokenStore
from bus.runtime.settings import Tokens
from gateway.limits import Scope
from tests.conftest import BusProbe, Platform, async_wait_for, logged, pre_tool_use

TOKENS = Tokens.parse("acme:tok-a,beta:tok-b")
ACME = {"Authorization": "Bearer tok-a"}
BETA = {"Authorization": "Bearer tok-b"}
ORG = yaml.safe_dump(
    {
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"], "reason": "org: no rm -rf"}]}
            ]
        }
    }
)


def layer(rule: str, **extra: Any) -> list[tuple[str, str]]:
    return [
        (
            "team.yaml",
            yaml.safe_dump(
                {
                    "hooks": {
                        "PreToolUse": [
                            {"matcher": "Bash", "hooks": [{"type": "rule", "deny": [rule], "reason": f"team: {rule}"}]}
                        ]
                    },
                    **extra,
                }
            ),
        )
    ]


def decision(response: httpx.Response) -> str:
    return str(response.json().get("hookSpecificOutput", {}).get("permissionDecision", "none"))


async def denies(p: Platform, command: str, headers: dict[str, str]) -> bool:
    return decision(await p.post(pre_tool_use(command), headers=headers)) == "deny"


async def test_each_tenant_runs_the_org_layer_and_only_its_own(platform: Callable[..., Any], bus: BusProbe) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    async with platform(ORG, tokens=TOKENS) as p:
        version, _ = await store.push(layer("Bash(curl *)"), tenant="acme")
        await async_wait_for(lambda: denies(p, "curl x", ACME), timeout_s=3)
        assert not await denies(p, "curl x", BETA)  # beta is not decided by acme's layer
        assert await denies(p, "rm -rf /", ACME) and await denies(p, "rm -rf /", BETA)  # the org's, for both
        answer = await p.post(pre_tool_use("curl x"), headers=ACME)
        assert answer.headers["X-Hookbus-Policy-Version"].endswith(f"|{version.id}")
        assert (await logged(bus, answer)).revision == answer.headers["X-Hookbus-Policy-Version"]
        other = await p.post(pre_tool_use("ls"), headers=BETA)
        assert other.headers["X-Hookbus-Policy-Version"].endswith("|")  # beta has no layer of its own
        # The Stop guard, once-markers and async context are keyed by tenant: the same session id
        # in two tenants shares nothing.
        assert bus.keys.stop_guard("acme", "s") != bus.keys.stop_guard("beta", "s")


async def test_a_push_under_load_fails_nothing_and_switches_cleanly(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    async with platform(ORG, tokens=TOKENS, dispatchers=2) as p:
        v1, _ = await store.push(layer("Bash(curl *)"), tenant="acme")
        await async_wait_for(lambda: denies(p, "curl x", ACME), timeout_s=3)
        answers: list[tuple[float, httpx.Response]] = []
        stop = asyncio.Event()

        async def load() -> None:  # a steady loopback load, about 200 requests/s
            while not stop.is_set():
                sent = time.monotonic()
                answers.append((sent, await p.post(pre_tool_use("wget x"), headers=ACME)))
                await asyncio.sleep(0.005)

        workers = [asyncio.create_task(load()) for _ in range(2)]
        await async_wait_for(lambda: len(answers) > 50, timeout_s=10)
        v2, _ = await store.push(layer("Bash(wget *)"), tenant="acme", message="block wget")
        pushed = time.monotonic()
        await async_wait_for(lambda: len([a for t, a in answers if t > pushed + 1.0]) > 50, timeout_s=15)
        back = await store.rollback("acme")
        rolled = time.monotonic()
        await async_wait_for(lambda: len([a for t, a in answers if t > rolled + 1.0]) > 50, timeout_s=15)
        stop.set()
        await asyncio.gather(*workers)
    assert back.id == v1.id
    assert all(a.status_code == 200 and a.headers["X-Hookbus-Outcome"] == "decided" for _, a in answers)
    for sent, answer in answers:
        version = answer.headers["X-Hookbus-Policy-Version"].rpartition("|")[2]
        # Every answer is decided by the version it names (never a mix of two) ...
        assert (decision(answer) == "deny") == (version == v2.id)
        # ... none before the push names the new version, and every one a second after it does.
        if sent < pushed:
            assert version == v1.id
        elif pushed + 1.0 < sent < rolled:
            assert version == v2.id
        elif sent > rolled + 1.0:
            assert version == v1.id


async def test_managed_tokens_are_refused_everywhere_within_a_second_of_revoke(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    tokens = TokenStore(bus.redis, bus.keys)
    token, info = await tokens.create("gamma", name="ci")
    short, _ = await tokens.create("gamma", expires_s=1.0)
    async with platform(ORG, managed_tokens=True) as p:
        headers = {"Authorization": f"Bearer {token}"}
        answer = await p.post(pre_tool_use("rm -rf /"), headers=headers)
        assert decision(answer) == "deny" and (await logged(bus, answer)).tenant == "gamma"
        assert (await p.post(pre_tool_use("ls"))).status_code == 401
        await tokens.revoke(info.id)
        revoked = time.monotonic()

        async def refused(with_token: str) -> bool:
            response = await p.post(pre_tool_use("ls"), headers={"Authorization": f"Bearer {with_token}"})
            return bool(response.status_code == 401)

        await async_wait_for(lambda: refused(token), timeout_s=3)
        assert time.monotonic() - revoked <= 1.0 + 0.5  # the cache lives 0.5 s; margin for this loaded box
        await async_wait_for(lambda: refused(short), timeout_s=5)  # expired


async def test_a_locked_org_cannot_be_switched_off_by_a_tenant(platform: Callable[..., Any], bus: BusProbe) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    async with platform("hooks: {}\n", tokens=TOKENS) as p:
        await store.push([("org.yaml", ORG.replace("hooks:", "hookbus: {orgLocked: true}\nhooks:", 1))])
        await async_wait_for(lambda: denies(p, "rm -rf /", ACME), timeout_s=3)
        await store.push(layer("Bash(curl *)", disableAllHooks=True, hookbus={"shadow": True}), tenant="acme")
        await async_wait_for(lambda: denies(p, "curl x", ACME), timeout_s=3)
        assert await denies(p, "rm -rf /", ACME)  # the org's hook still decides


@pytest.mark.timeout(30)
async def test_a_bad_push_is_refused_and_nothing_changes(platform: Callable[..., Any], bus: BusProbe) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    async with platform(ORG, tokens=TOKENS) as p:
        with pytest.raises(Exception, match="nope"):
            await store.push([("bad.yaml", "hooks: {PreToolUse: [{hooks: [{type: nope}]}]}\n")], tenant="acme")
        answer = await p.post(pre_tool_use("ls"), headers=ACME)
        assert answer.headers["X-Hookbus-Policy-Version"].endswith("|")


async def test_once_markers_and_stop_guard_counts_are_per_tenant(platform: Callable[..., Any]) -> None:
    text = yaml.safe_dump(
        {
            "hookbus": {"stopBlockLimit": 1},
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(echo *)"], "once": True}]}
                ],
                "Stop": [{"hooks": [{"type": "command", "command": "echo keep going >&2; exit 2"}]}],
            },
        }
    )
    async with platform(text, tokens=TOKENS) as p:
        # The same session id in two tenants: acme's once-marker does not switch beta's hook off.
        assert await denies(p, "echo 1", ACME)
        assert not await denies(p, "echo 2", ACME)
        assert await denies(p, "echo 1", BETA)
        stop = {"hook_event_name": "Stop", "session_id": "s-1", "stop_hook_active": False}

        async def blocked(headers: dict[str, str]) -> bool:
            return bool((await p.post(stop, headers=headers)).json().get("decision") == "block")

        assert await blocked(ACME)
        assert not await blocked(ACME)  # acme reached its limit: the guard lets it stop
        assert await blocked(BETA)  # beta's count is its own


async def test_a_tenant_past_its_in_flight_byte_budget_is_limited_and_others_are_not(
    platform: Callable[..., Any],
) -> None:
    slow = yaml.safe_dump(
        {
            "hookbus": {"deadlineSeconds": 3, "whenLimited": "closed"},
            "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "sleep 0.5"}]}]},
        }
    )
    big = pre_tool_use("echo " + "x" * 2_000)
    async with platform(slow, tokens=TOKENS, tenant_inflight_bytes=3_000) as p:
        first = asyncio.create_task(p.post(big, headers=ACME))
        await async_wait_for(lambda: p.app.hooks.inflight.held_bytes(Scope.TENANT, "acme"), timeout_s=5)
        over = await p.post(pre_tool_use("echo " + "x" * 2_000, "s-2"), headers=ACME)
        assert over.status_code == 200 and over.headers["X-Hookbus-Limited"] == "tenant inflight"
        assert over.json()["hookSpecificOutput"]["permissionDecision"] == "deny"  # whenLimited: closed
        assert over.headers["Retry-After"] == "1"
        note = await p.post({"hook_event_name": "Notification", "session_id": "s-3", "pad": "x" * 2_000}, headers=ACME)
        assert note.status_code == 429 and note.json()["error"] == "over_budget"
        assert (await p.post(big, headers=BETA)).status_code == 200  # another tenant's budget is its own
        assert (await first).status_code == 200
        freed = await p.post(big, headers=ACME)
        assert freed.status_code == 200 and "X-Hookbus-Limited" not in freed.headers  # freed once answered
        assert p.app.hooks.inflight.held == {scope: {} for scope in Scope}


async def test_a_session_flooding_in_flight_leaves_its_teammates_their_decisions(
    platform: Callable[..., Any],
) -> None:
    slow = yaml.safe_dump(
        {
            "hookbus": {"deadlineSeconds": 5},
            "hooks": {
                "PreToolUse": [
                    {"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"]}]},
                    {"matcher": "Bash", "hooks": [{"type": "command", "command": "sleep 2", "if": "Bash(sleep *)"}]},
                ]
            },
        }
    )
    # The tenant may hold 8 KiB and a session a quarter of that: one of these 1.5 KB events.
    held = pre_tool_use("sleep 1 #" + "x" * 1_400, "noisy")
    async with platform(slow, tokens=TOKENS, tenant_inflight_bytes=8_192) as p:
        first = asyncio.create_task(p.post(held, headers=ACME))
        await async_wait_for(lambda: p.app.hooks.inflight.held_bytes(Scope.SESSION, ("acme", "noisy")), timeout_s=5)
        flood = await asyncio.gather(*(p.post(held, headers=ACME) for _ in range(20)))
        assert {(r.status_code, r.headers.get("X-Hookbus-Limited")) for r in flood} == {(200, "session inflight")}
        assert p.app.hooks.inflight.held_bytes(Scope.TENANT, "acme") < 2_048  # the flood holds nothing
        denied = await p.post(pre_tool_use("rm -rf /", "teammate"), headers=ACME)
        assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        assert (await first).status_code == 200


async def test_managed_tokens_guard_every_endpoint_not_only_hooks(platform: Callable[..., Any], bus: BusProbe) -> None:
    token, _ = await TokenStore(bus.redis, bus.keys).create("gamma")
    headers = {"Authorization": f"Bearer {token}"}
    async with platform(ORG, managed_tokens=True) as p:
        # With only managed tokens configured, nothing is open to a caller without one.
        for path in ("/v1/whoami", "/v1/audit/events"):
            assert (await p.client.get(f"{p.url}{path}")).status_code == 401
        assert (await p.client.get(f"{p.url}/v1/whoami", headers=headers)).json() == {"tenant": "gamma", "tokens": True}
        answer = await p.post(pre_tool_use("rm -rf /"), headers=headers)
        await logged(bus, answer)
        listed = await p.client.get(f"{p.url}/v1/audit/events", headers=headers)
        assert listed.status_code == 200
        assert {json.loads(line)["tenant"] for line in listed.text.splitlines() if line} == {"gamma"}
