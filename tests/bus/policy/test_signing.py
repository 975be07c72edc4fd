"""Signed policy versions on real gateways and dispatchers: unsigned, untrusted, tampered, rotated, rolled back.

Every platform here is a real gateway (uvicorn on 127.0.0.1) and a real dispatcher sharing one
metrics registry, so a version refused by both counts twice in ``hookbus_policy_rejected_total``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bus.errors import POLICY_REJECTED_REASONS, ConfigError, PolicyRejected
from bus.policy.loading import load_policy
from bus.policy.registry import PolicyRegistry
from bus.policy.signing import CONTEXT, Verifier, key_id, public_key_text, raw_public, sign, signed_bytes
from bus.policy.store import PolicyStore, PolicyVersion
from bus.runtime.metrics import Metrics
from bus.runtime.settings import Settings, Tokens
from bus.runtime.trustedkeys import EVERY_LAYER, KeyScope, TrustedKey
from tests.conftest import DENY_RM, BusProbe, Platform, async_wait_for, logged, pre_tool_use

KEY_A, KEY_B, KEY_C = (Ed25519PrivateKey.generate() for _ in range(3))
A_AND_B = (TrustedKey(raw_public(KEY_A), EVERY_LAYER), TrustedKey(raw_public(KEY_B), EVERY_LAYER))
TOKENS = Tokens.parse("acme:tok-a,beta:tok-b")
#: Nodes run one dispatcher and one gateway, each refusing (and counting) a bad version once.
NODES = 2


def denying(*patterns: str, name: str = "org.yaml") -> list[tuple[str, str]]:
    rule = {"type": "rule", "deny": [f"Bash({p})" for p in patterns], "reason": "signed policy"}
    return [(name, yaml.safe_dump({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [rule]}]}}))]


async def decided(p: Platform, command: str, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """(decision, policy version label) of a Bash ``command``."""
    answer = await p.post(pre_tool_use(command), headers=headers or {})
    decision = answer.json().get("hookSpecificOutput", {}).get("permissionDecision", "none")
    return str(decision), answer.headers["X-Hookbus-Policy-Version"]


async def denies(p: Platform, command: str, headers: dict[str, str] | None = None) -> bool:
    return (await decided(p, command, headers))[0] == "deny"


async def signatures(p: Platform) -> dict[str, Any]:
    answer = await p.client.get(f"{p.url}/readyz")
    assert answer.status_code == 200  # a refused version informs; the node keeps serving
    check: dict[str, Any] = answer.json()["checks"]["policy_signatures"]
    return check


def refusals(p: Platform, reason: str) -> float:
    return p.metrics.value("hookbus_policy_rejected_total", reason=reason)


async def refused_by_every_node(p: Platform, reason: str, before: float = 0.0) -> None:
    await async_wait_for(lambda: refusals(p, reason) >= before + NODES, timeout_s=5)
    assert refusals(p, reason) == before + NODES  # once per node, not once per poll


@pytest.mark.timeout(60)
async def test_unsigned_and_untrusted_versions_are_refused_and_the_last_good_one_stays(
    platform: Callable[..., Any], bus: BusProbe, caplog: pytest.LogCaptureFixture
) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    caplog.set_level(logging.INFO, "hookbus.policy")
    async with platform(DENY_RM, policy_trusted_keys=A_AND_B) as p:
        good, _ = await store.push(denying("curl *"), signing_key=KEY_A)
        await async_wait_for(lambda: denies(p, "curl x"), timeout_s=5)
        assert await signatures(p) == {
            "ok": True,
            "verified": True,
            "trusted_keys": [key_id(k.public) for k in A_AND_B],
            "key_scopes": {key_id(k.public): "org+tenant" for k in A_AND_B},
            "refused": {},
        }

        unsigned, _ = await store.push(denying("wget *"), message="straight to Redis, no CI")
        await refused_by_every_node(p, "unsigned")
        assert await decided(p, "wget x") == ("none", f"{good.id}|")
        assert await denies(p, "curl x")
        check = await signatures(p)
        assert not check["ok"] and check["refused"] == {
            "org": f"{unsigned.id}: version {unsigned.id} is not signed (push it with --sign)"
        }
        assert f"policy org version {unsigned.id} refused (unsigned); keeping {good.id}" in caplog.text

        untrusted, _ = await store.push(denying("nc *"), signing_key=KEY_C)
        await refused_by_every_node(p, "untrusted_key")
        assert (await signatures(p))["refused"]["org"] == (
            f"{untrusted.id}: version {untrusted.id} is signed by key {key_id(raw_public(KEY_C))}, which is not trusted"
        )
        assert await decided(p, "nc x") == ("none", f"{good.id}|")

        # Signing the files of the refused version adds the signature to it: now it is taken.
        signed, changed = await store.push(denying("wget *"), signing_key=KEY_A)
        assert changed and signed.id == unsigned.id
        await async_wait_for(lambda: denies(p, "wget x"), timeout_s=5)
        answer = await p.post(pre_tool_use("wget x"))
        assert (await logged(bus, answer)).revision == f"{signed.id}|"
        assert (await signatures(p))["ok"]
        assert refusals(p, "bad_signature") == 0


@pytest.mark.timeout(60)
async def test_a_key_rotation_and_rollbacks(platform: Callable[..., Any], bus: BusProbe) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    async with platform(DENY_RM, policy_trusted_keys=A_AND_B) as p:
        by_a, _ = await store.push(denying("curl *"), signing_key=KEY_A)
        await async_wait_for(lambda: denies(p, "curl x"), timeout_s=5)
        by_b, _ = await store.push(denying("wget *"), signing_key=KEY_B)  # the new key, trusted beside the old
        await async_wait_for(lambda: denies(p, "wget x"), timeout_s=5)
        await store.rollback(to=by_a.id)
        await async_wait_for(lambda: denies(p, "curl x"), timeout_s=5)
        assert await decided(p, "wget x") == ("none", f"{by_a.id}|")

        unsigned, _ = await store.push(denying("nc *"))
        await refused_by_every_node(p, "unsigned")
        await store.push(denying("ssh *"))  # another one: every node's last refusal is of this one
        await refused_by_every_node(p, "unsigned", before=NODES)
        await store.rollback(to=by_b.id)
        await async_wait_for(lambda: denies(p, "wget x"), timeout_s=5)
        assert (await signatures(p))["ok"]
        await store.rollback(to=unsigned.id)  # a rollback onto an unsigned version is refused as well
        await refused_by_every_node(p, "unsigned", before=2 * NODES)
        assert await decided(p, "nc x") == ("none", f"{by_b.id}|")
        await store.rollback(to=by_b.id)

    # The rotation is over: nodes trust only B. A rollback onto a version only A signed is refused.
    async with platform(DENY_RM, policy_trusted_keys=A_AND_B[1:]) as p:
        await async_wait_for(lambda: denies(p, "wget x"), timeout_s=5)
        await store.rollback(to=by_a.id)
        await refused_by_every_node(p, "untrusted_key")
        assert await decided(p, "curl x") == ("none", f"{by_b.id}|")
        assert await denies(p, "wget x")


@pytest.mark.timeout(60)
async def test_a_version_changed_in_redis_or_a_signature_moved_is_refused(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    good, _ = await store.push(denying("curl *"), signing_key=KEY_A)
    async with platform(DENY_RM, policy_trusted_keys=A_AND_B) as p:
        await async_wait_for(lambda: denies(p, "curl x"), timeout_s=5)
        # Another version under good's signature (its hash copied to a new id, one file edited).
        stored = await bus.redis.hgetall(bus.keys.policy_version(good.id))  # type: ignore[misc]
        forged = {**stored, b"files": orjson.dumps(denying("curl *", "wget *"))}
        await bus.redis.hset(bus.keys.policy_version("f0f0f0f0f0f0"), mapping=forged)  # type: ignore[misc]
        await bus.redis.hset(bus.keys.policy_current, "org", "f0f0f0f0f0f0")  # type: ignore[misc]
        await refused_by_every_node(p, "bad_signature")
        assert await decided(p, "wget x") == ("none", f"{good.id}|")
        assert "does not verify" in (await signatures(p))["refused"]["org"]
        # A hash that is no version at all is reported like any version that does not load.
        await bus.redis.hset(bus.keys.policy_version("0badc0ffee00"), mapping={"scope": "org", "files": "{"})  # type: ignore[misc]
        await bus.redis.hset(bus.keys.policy_current, "org", "0badc0ffee00")  # type: ignore[misc]
        await async_wait_for(lambda: p.metrics.value("hookbus_policy_load_failures_total") >= NODES, timeout_s=5)
        assert "is not a version hookbus wrote" in p.app.gateway.registry.errors["org"]
        await bus.redis.hset(bus.keys.policy_current, "org", good.id)  # type: ignore[misc]
        await async_wait_for(lambda: p.app.gateway.registry.errors == {}, timeout_s=5)
        await store.push(denying("ssh *"), signing_key=KEY_B)  # the nodes still follow Redis
        await async_wait_for(lambda: denies(p, "ssh x"), timeout_s=5)
        await store.rollback(to=good.id)

    # The current version itself edited by hand: a node that starts now refuses it and runs its files.
    tampered = orjson.dumps(denying("wget *")).decode()
    await bus.redis.hset(bus.keys.policy_version(good.id), "files", tampered)  # type: ignore[misc]
    async with platform(DENY_RM, policy_trusted_keys=A_AND_B) as p:
        await refused_by_every_node(p, "bad_signature")
        decision, label = await decided(p, "wget x")
        assert decision == "none" and label.startswith("file:")
        assert await denies(p, "rm -rf /")  # the node's own files are its last good policy
        assert (await signatures(p))["refused"]["org"].startswith(f"{good.id}: ")
        # The pipeline pushes its files again: the version is restored, and taken.
        restored, changed = await store.push(denying("curl *"), signing_key=KEY_A)
        assert changed and restored.id == good.id
        await async_wait_for(lambda: denies(p, "curl x"), timeout_s=5)
        assert not await denies(p, "wget x") and (await signatures(p))["ok"]


@pytest.mark.timeout(60)
async def test_a_tenant_cannot_be_given_another_tenants_signed_layer(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    acme, beta = {"Authorization": "Bearer tok-a"}, {"Authorization": "Bearer tok-b"}
    async with platform(DENY_RM, tokens=TOKENS, policy_trusted_keys=A_AND_B) as p:
        acme_v, _ = await store.push(denying("curl *", name="team.yaml"), "acme", signing_key=KEY_A)
        await async_wait_for(lambda: denies(p, "curl x", acme), timeout_s=5)
        await bus.redis.hset(bus.keys.policy_current, "tenant:beta", acme_v.id)  # type: ignore[misc]
        await refused_by_every_node(p, "wrong_scope")
        assert await decided(p, "curl x", beta) == ("none", f"file:{p.policy.revision}|")
        # The same files signed for beta's own layer are beta's version, not acme's.
        beta_v, _ = await store.push(denying("curl *", name="team.yaml"), "beta", signing_key=KEY_A)
        assert beta_v.id != acme_v.id and beta_v.scope == "tenant:beta"
        await async_wait_for(lambda: denies(p, "curl x", beta), timeout_s=5)


KEY_ORG, KEY_ACME, KEY_TEAMS = (Ed25519PrivateKey.generate() for _ in range(3))
#: As a node reads them: the platform's key signs the org layer, one team's its layer, a shared one any tenant's.
SCOPED = Settings.from_env(
    {
        "HOOKBUS_POLICY_TRUSTED_KEYS": f"{public_key_text(raw_public(KEY_ORG))}@org,"
        f"{public_key_text(raw_public(KEY_ACME))}@tenant:acme,{public_key_text(raw_public(KEY_TEAMS))}@tenant"
    }
).policy_trusted_keys
DISABLE_ALL = [("takeover.yaml", "disableAllHooks: true\n")]


@pytest.mark.timeout(60)
async def test_a_key_signs_only_the_layers_its_scope_names(platform: Callable[..., Any], bus: BusProbe) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    acme, beta = {"Authorization": "Bearer tok-a"}, {"Authorization": "Bearer tok-b"}
    acme_key = key_id(raw_public(KEY_ACME))
    async with platform(DENY_RM, tokens=TOKENS, policy_trusted_keys=SCOPED) as p:
        assert (await signatures(p))["key_scopes"] == {
            key_id(raw_public(KEY_ORG)): "org",
            acme_key: "tenant:acme",
            key_id(raw_public(KEY_TEAMS)): "tenant",
        }
        org_v, _ = await store.push(denying("rm -rf *", "curl *"), signing_key=KEY_ORG)  # the org's key: taken
        await async_wait_for(lambda: denies(p, "curl x", beta), timeout_s=5)
        acme_v, _ = await store.push(denying("wget *", name="team.yaml"), "acme", signing_key=KEY_ACME)  # its own
        await async_wait_for(lambda: denies(p, "wget x", acme), timeout_s=5)

        # acme's key signing the org layer, which would switch off every tenant's hooks: refused.
        takeover, _ = await store.push(DISABLE_ALL, signing_key=KEY_ACME)
        await refused_by_every_node(p, "outside_key_scope")
        assert await decided(p, "rm -rf /", beta) == ("deny", f"{org_v.id}|")
        assert await decided(p, "wget x", acme) == ("deny", f"{org_v.id}|{acme_v.id}")
        assert (await signatures(p))["refused"] == {
            "org": f"{takeover.id}: version {takeover.id} of org is signed by key {acme_key}, "
            "which may sign only tenant:acme"
        }

        # acme's key signing beta's layer: refused; beta keeps the org layer alone.
        beta_takeover, _ = await store.push(DISABLE_ALL, "beta", signing_key=KEY_ACME)
        await refused_by_every_node(p, "outside_key_scope", before=NODES)
        assert await decided(p, "rm -rf /", beta) == ("deny", f"{org_v.id}|")
        assert (await signatures(p))["refused"]["tenant:beta"].endswith(
            f"version {beta_takeover.id} of tenant:beta is signed by key {acme_key}, which may sign only tenant:acme"
        )

        # A key scoped to any tenant signs beta's layer, and the org's key the org layer again: taken.
        beta_v, _ = await store.push(denying("nc *", name="team.yaml"), "beta", signing_key=KEY_TEAMS)
        await async_wait_for(lambda: denies(p, "nc x", beta), timeout_s=5)
        again, changed = await store.push(denying("rm -rf *", "curl *"), signing_key=KEY_ORG)
        assert changed and again.id == org_v.id
        await async_wait_for(lambda: signatures_ok(p), timeout_s=5)  # the refusals are over
        assert await decided(p, "curl x", beta) == ("deny", f"{org_v.id}|{beta_v.id}")
        assert await decided(p, "nc x", acme) == ("none", f"{org_v.id}|{acme_v.id}")


async def signatures_ok(p: Platform) -> bool:
    return bool((await signatures(p))["ok"])


async def test_a_request_naming_a_version_signed_outside_its_keys_scope_is_evaluated_under_the_current_one(
    bus: BusProbe, write_policy: Callable[..., Any]
) -> None:
    """A dispatcher verifies the versions a request names: a forged label names acme's takeover of the org."""
    base = load_policy([write_policy(DENY_RM)])
    store = PolicyStore(bus.redis, bus.keys)
    takeover, _ = await store.push(DISABLE_ALL, signing_key=KEY_ACME)
    current, _ = await store.push(denying("rm -rf *"), signing_key=KEY_ORG)
    metrics = Metrics()
    registry = PolicyRegistry(base, bus.redis, bus.keys, metrics=metrics, trusted_keys=SCOPED)
    await registry.start()
    try:
        assert registry.org_version() == current.id
        in_force = registry.for_tenant("beta")[0]
        assert not in_force.disable_all_hooks
        assert await registry.resolve("beta", f"{takeover.id}|") is in_force
        assert metrics.value("hookbus_policy_rejected_total", reason="outside_key_scope") == 1
    finally:
        await registry.stop()


def test_a_verifier_holds_each_key_to_its_scope() -> None:
    files = (("team.yaml", "hooks: {}\n"),)

    def signed(key: Ed25519PrivateKey, scope: str) -> PolicyVersion:
        signature, signer = sign(key, scope, "abc", files)
        return PolicyVersion("abc", scope, files, "ci", 0, "", signature, signer)

    verifier = Verifier(SCOPED)
    allowed = [(KEY_ORG, "org"), (KEY_ACME, "tenant:acme"), (KEY_TEAMS, "tenant:acme"), (KEY_TEAMS, "tenant:x")]
    for key, scope in allowed:
        verifier.verify(signed(key, scope), scope)
    for key, scope in [(KEY_ACME, "org"), (KEY_ACME, "tenant:beta"), (KEY_TEAMS, "org"), (KEY_ORG, "tenant:acme")]:
        with pytest.raises(PolicyRejected) as refused:
            verifier.verify(signed(key, scope), scope)
        assert refused.value.reason == "outside_key_scope"
    # A key listed twice may sign what either entry names.
    twice = Verifier([TrustedKey(raw_public(KEY_ACME), KeyScope(org=True)), *SCOPED])
    twice.verify(signed(KEY_ACME, "org"), "org")
    twice.verify(signed(KEY_ACME, "tenant:acme"), "tenant:acme")
    assert twice.key_scopes[key_id(raw_public(KEY_ACME))] == "org+tenant:acme"


@pytest.mark.timeout(30)
async def test_without_trusted_keys_nothing_is_verified_and_readyz_says_so(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    async with platform(DENY_RM) as p:
        await store.push(denying("curl *"))
        await async_wait_for(lambda: denies(p, "curl x"), timeout_s=5)
        check = await signatures(p)
        assert check == {
            "ok": True,
            "verified": False,
            "warning": "pushed policy versions are not verified (no HOOKBUS_POLICY_TRUSTED_KEYS)",
        }
        assert sum(refusals(p, r) for r in POLICY_REJECTED_REASONS) == 0


async def test_a_request_naming_an_unsigned_version_is_evaluated_under_the_current_one(
    bus: BusProbe, write_policy: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A dispatcher resolves the version label a request carries: a forged one names an unsigned version."""
    base = load_policy([write_policy(DENY_RM)])
    store = PolicyStore(bus.redis, bus.keys)
    unsigned, _ = await store.push(denying("curl *"))
    current, _ = await store.push(denying("wget *"), signing_key=KEY_A)
    metrics = Metrics()
    registry = PolicyRegistry(base, bus.redis, bus.keys, metrics=metrics, trusted_keys=A_AND_B)
    await registry.start()
    try:
        assert registry.org_version() == current.id
        in_force = registry.for_tenant("acme")[0]
        for _ in range(3):  # read and logged once, then known
            assert await registry.resolve("acme", f"{unsigned.id}|") is in_force
        assert metrics.value("hookbus_policy_rejected_total", reason="unsigned") == 1
        assert caplog.text.count(f"policy {unsigned.id}| of tenant acme cannot be used") == 1
        assert await registry.resolve("acme", f"{current.id}|") is in_force
        await store.push(denying("curl *"), signing_key=KEY_B)  # signed since: now it may be used
        await async_wait_for(lambda: registry.org_version() == unsigned.id, timeout_s=5)
        assert await registry.resolve("acme", f"{unsigned.id}|") is registry.for_tenant("acme")[0]
    finally:
        await registry.stop()


async def test_pushing_a_signed_version_again_keeps_or_replaces_its_signature(bus: BusProbe) -> None:
    store = PolicyStore(bus.redis, bus.keys)
    signed, _ = await store.push(denying("curl *"), signing_key=KEY_A, message="from CI")
    again, changed = await store.push(denying("curl *"))  # unsigned, same files: nothing changes
    assert not changed and again.signed_by == key_id(raw_public(KEY_A)) and again.message == "from CI"
    resigned, changed = await store.push(denying("curl *"), signing_key=KEY_B)
    assert changed and resigned.id == signed.id
    stored = await store.get(signed.id)
    assert stored is not None and stored.signed_by == key_id(raw_public(KEY_B)) and stored.message == "from CI"
    Verifier(A_AND_B).verify(stored, "org")


def test_what_is_signed_covers_scope_id_and_every_name_and_text() -> None:
    files = [("a.yaml", "x: 1\n"), ("b.yaml", "y: 2\n")]
    message = signed_bytes("org", "abc", files)
    assert message.startswith(CONTEXT)
    others = [
        signed_bytes("tenant:acme", "abc", files),
        signed_bytes("org", "abd", files),
        signed_bytes("org", "abc", [("a.yaml", "x: 2\n"), files[1]]),
        signed_bytes("org", "abc", [("b.yaml", "x: 1\n"), files[1]]),
        signed_bytes("org", "abc", files[:1]),
        signed_bytes("org", "abc", [("a.yam", "lx: 1\n"), files[1]]),  # framed: no sliding between fields
    ]
    assert len({message, *others}) == len(others) + 1
    signature, signer = sign(KEY_A, "org", "abc", files)
    version = PolicyVersion("abc", "org", tuple(files), "ci", 0, "", signature, signer)
    Verifier(A_AND_B).verify(version, "org")
    Verifier().verify(PolicyVersion("abc", "org", tuple(files), "ci", 0, ""), "org")  # no keys: nothing checked


def test_trusted_keys_are_parsed_once_at_start_and_a_bad_one_is_one_line() -> None:
    a, b = (public_key_text(k.public) for k in A_AND_B)
    settings = Settings.from_env({"HOOKBUS_POLICY_TRUSTED_KEYS": f" {a}@org+tenant ,{b}@tenant+org,{a}@org"})
    assert settings.policy_trusted_keys == A_AND_B and "<2 keys>" in repr(settings)
    bad = ("ed25519:" + base64.b64encode(bytes(31)).decode(), a.removeprefix("ed25519:"), "ed25519:***", " , ")
    for spec in (*(f"{key}@org" for key in bad[:3]), bad[3]):
        with pytest.raises(ConfigError) as refused:
            Settings.from_env({"HOOKBUS_POLICY_TRUSTED_KEYS": spec})
        assert "HOOKBUS_POLICY_TRUSTED_KEYS" in str(refused.value) and "\n" not in str(refused.value)
    assert Settings.from_env({}).policy_trusted_keys == ()
