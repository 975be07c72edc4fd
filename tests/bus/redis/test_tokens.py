"""Tokens in Redis, pushed policy versions, org and tenant layers, and the node registry."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import yaml

from bus.errors import ConfigError, PolicyError
from bus.policy.layers import compose
from bus.policy.loading import parse_policy_text, policy_from_text
from bus.policy.registry import PolicyRegistry
from bus.policy.store import ORG, PolicyStore, diff
from bus.redis.keys import Keyspace
from bus.redis.tokens import TokenStore, parse_duration_s
from tests.conftest import BusProbe, async_wait_for

KEYS = Keyspace()


def text(hooks: dict[str, object], **platform: object) -> str:
    return yaml.safe_dump({"hooks": hooks, **({"hookbus": platform} if platform else {})})


def deny(rule: str) -> dict[str, object]:
    return {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": [rule]}]}]}


@pytest_asyncio.fixture
async def store(bus: BusProbe) -> AsyncIterator[PolicyStore]:
    yield PolicyStore(bus.redis, KEYS)


# --- tokens -----------------------------------------------------------------------------------


async def test_tokens_are_stored_hashed_and_listed_without_the_secret(bus: BusProbe) -> None:
    tokens = TokenStore(bus.redis, KEYS)
    token, info = await tokens.create("acme", name="ci")
    assert token.startswith("hb_") and len(token) > 40
    dump = b"".join([k + v for k, v in (await bus.redis.hgetall(KEYS.tokens)).items()])  # type: ignore[misc]
    assert token.encode() not in dump and info.hash.encode() in dump
    assert (await tokens.verify(token)) == info
    assert await tokens.verify(token + "x") is None
    listed = await tokens.list("acme")
    assert [t.id for t in listed] == [info.id] and "hash" not in listed[0].public()
    assert await tokens.list("other") == []
    assert "hb_" not in repr(info)


async def test_revoked_and_expired_tokens_stop_working(bus: BusProbe) -> None:
    tokens, elsewhere = TokenStore(bus.redis, KEYS), TokenStore(bus.redis, KEYS)  # two gateways
    token, info = await tokens.create("acme")
    assert await elsewhere.verify(token) is not None
    assert await tokens.revoke(info.id) == info
    # Every gateway refuses it within its cache time.
    assert await async_wait_for(lambda: _refused(elsewhere, token), timeout_s=2)
    short, _ = await tokens.create("acme", expires_s=0.2)
    assert await tokens.verify(short) is not None
    assert await async_wait_for(lambda: _refused(tokens, short), timeout_s=2)
    assert await tokens.revoke("nope") is None


async def _refused(tokens: TokenStore, token: str) -> bool:
    return await tokens.verify(token) is None


def test_durations_and_bad_tenants() -> None:
    assert parse_duration_s("30d") == 30 * 86400 and parse_duration_s("90m") == 5400
    with pytest.raises(ConfigError):
        parse_duration_s("soon")


async def test_a_bad_tenant_name_is_refused(bus: BusProbe) -> None:
    with pytest.raises(ConfigError):
        await TokenStore(bus.redis, KEYS).create("a b")


# --- versions ---------------------------------------------------------------------------------


async def test_push_versions_show_diff_and_rollback(store: PolicyStore) -> None:
    v1, changed = await store.push([("base.yaml", text(deny("Bash(rm *)")))], message="first", author="sec")
    assert changed and v1.scope == ORG and v1.author == "sec"
    again, changed = await store.push([("base.yaml", text(deny("Bash(rm *)")))])
    assert (again.id, changed) == (v1.id, False)  # same content, same version: nothing to do
    v2, _ = await store.push([("base.yaml", text(deny("Bash(curl *)")))], message="second")
    assert [v.id for v in await store.versions(ORG)] == [v1.id, v2.id]
    assert "-      - Bash(rm *)" in diff(v1, v2) and "+      - Bash(curl *)" in diff(v1, v2)
    assert (await store.current(ORG)) == v2
    back = await store.rollback()
    assert back.id == v1.id and (await store.current(ORG)) == v1
    with pytest.raises(ConfigError):
        await store.rollback(to="0000")


async def test_a_bad_push_is_refused_before_anything_is_stored(store: PolicyStore, bus: BusProbe) -> None:
    with pytest.raises(PolicyError):
        await store.push([("bad.yaml", text({"PreToolUse": [{"hooks": [{"type": "nope"}]}]}))], tenant="acme")
    assert await bus.redis.keys(f"{KEYS.prefix}policy:*") == []


# --- layers -----------------------------------------------------------------------------------


def test_hooks_add_up_and_a_locked_org_cannot_be_weakened() -> None:
    org = [parse_policy_text(text(deny("Bash(rm *)"), orgLocked=True, tenantOverrides=["stopBlockLimit"]), "org")]
    tenant = [
        parse_policy_text(
            yaml.safe_dump(
                {
                    "disableAllHooks": True,
                    "hooks": deny("Bash(curl *)"),
                    "hookbus": {"shadow": True, "deadlineSeconds": 9, "stopBlockLimit": 3, "orgLocked": False},
                }
            ),
            "acme",
        )
    ]
    policy = compose(org, tenant)
    assert len(policy.entries("PreToolUse")) == 2  # both layers' hooks run
    assert not policy.disable_all_hooks and not policy.settings.shadow  # could switch the org's hooks off
    assert policy.settings.deadline_seconds == 2.0 and policy.settings.stop_block_limit == 3
    assert policy.settings.org_locked  # a tenant cannot unlock
    assert any("locked" in note for note in policy.notes)
    unlocked = compose([parse_policy_text(text(deny("Bash(rm *)")), "org")], tenant)
    assert unlocked.settings.shadow and unlocked.disable_all_hooks


# --- the registry -----------------------------------------------------------------------------


async def test_the_registry_follows_pushes_and_keeps_the_last_good_version(store: PolicyStore, bus: BusProbe) -> None:
    base_text = text(deny("Bash(rm *)"))
    base = policy_from_text(base_text, "base.yaml")
    registry = PolicyRegistry(base, bus.redis, KEYS)
    await registry.start()
    try:
        policy, label = registry.for_tenant("acme")
        assert policy is base and label == f"file:{base.revision}|"
        v1, _ = await store.push([("acme.yaml", text(deny("Bash(curl *)")))], tenant="acme")
        await async_wait_for(lambda: registry.versions("acme")[1] == v1.id, timeout_s=2)
        acme, label = registry.for_tenant("acme")
        assert len(acme.entries("PreToolUse")) == 2 and label.endswith(f"|{v1.id}")
        assert registry.for_tenant("beta")[0] is base  # another tenant is not touched
        # A version that does not load here (written past the push check) leaves the last good one.
        await bus.redis.hset(
            KEYS.policy_version("broken"),
            mapping={  # type: ignore[misc]
                "scope": "tenant:acme",
                "files": '[["x.yaml", "hooks: [1"]]',
                "author": "x",
                "created_ms": "0",
            },
        )
        await bus.redis.hset(KEYS.policy_current, "tenant:acme", "broken")  # type: ignore[misc]
        await async_wait_for(lambda: "tenant:acme" in registry.errors, timeout_s=2)
        assert registry.versions("acme")[1] == v1.id
        # Requests keep the versions their gateway chose, even after a switch.
        assert await registry.resolve("acme", label) is acme
    finally:
        await registry.stop()
