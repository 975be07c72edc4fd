"""A tenant's share of a dispatcher's slots (:mod:`workers.dispatcher.slots`): the bookkeeping alone,
then a live platform where one tenant's hanging http hooks would otherwise hold every slot."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from bus.errors import ConfigError
from bus.runtime.settings import Settings, Tokens
from tests.conftest import async_wait_for, policy_yaml, pre_tool_use
from tests.loopback import LoopbackServer, hang
from workers.dispatcher.slots import PARKED_PER_SLOT, DispatchSlots

pytestmark = pytest.mark.timeout(60)


async def test_a_tenant_over_its_share_is_parked_and_takes_its_own_next_free_slot() -> None:
    slots: DispatchSlots[str] = DispatchSlots(total=4, per_tenant=2)
    assert [await slots.take("mallory", f"m{n}") for n in range(4)] == [True, True, False, False]
    assert slots.parked == 2 and slots.held("mallory") == 2
    assert await slots.take("alice", "a0") and await slots.take("alice", "a1")  # the slots mallory left
    assert slots.give_back("mallory") == "m2"  # its slot goes to its own next event, in order
    assert slots.give_back("alice") is None  # none of alice's waits: the slot is free
    assert slots.give_back("mallory") == "m3"
    assert slots.parked == 0 and slots.held("mallory") == 2
    assert await slots.take("alice", "a2")


async def test_an_event_past_its_deadline_is_not_held_to_the_share() -> None:
    slots: DispatchSlots[str] = DispatchSlots(total=4, per_tenant=1)
    assert await slots.take("mallory", "m0")
    assert await slots.take("mallory", "late", over_share=True)
    assert not await slots.take("mallory", "m1")


async def test_no_cap_when_the_share_is_zero_and_half_the_slots_by_default() -> None:
    slots: DispatchSlots[str] = DispatchSlots(total=2, per_tenant=0)
    assert await slots.take("t", "a") and await slots.take("t", "b")
    assert DispatchSlots.for_settings(256, None).per_tenant == 128
    assert DispatchSlots.for_settings(1, None).per_tenant == 1
    assert DispatchSlots.for_settings(256, 7).per_tenant == 7


def test_the_share_is_read_from_the_environment_and_a_negative_one_is_refused() -> None:
    assert Settings.from_env({"HOOKBUS_TENANT_DISPATCH_SLOTS": "3"}).tenant_dispatch_slots == 3
    assert Settings.from_env({}).tenant_dispatch_slots is None
    with pytest.raises(ConfigError, match="HOOKBUS_TENANT_DISPATCH_SLOTS must be 0"):
        Settings.from_env({"HOOKBUS_TENANT_DISPATCH_SLOTS": "-1"}).validate()


async def test_taking_waits_while_the_parked_events_are_at_their_bound() -> None:
    slots: DispatchSlots[int] = DispatchSlots(total=1, per_tenant=1)
    assert await slots.take("mallory", -1)
    for n in range(PARKED_PER_SLOT - 1):
        assert not await slots.take("mallory", n)
    last = asyncio.create_task(slots.take("mallory", PARKED_PER_SLOT - 1))
    await async_wait_for(lambda: slots.parked == PARKED_PER_SLOT, timeout_s=5)
    assert not last.done()  # reading stops until one is started: memory stays bounded
    assert slots.give_back("mallory") == 0
    assert await asyncio.wait_for(last, 5) is False


async def test_a_stopping_dispatcher_takes_every_parked_event_out() -> None:
    slots: DispatchSlots[str] = DispatchSlots(total=2, per_tenant=1)
    await slots.take("a", "a0")
    await slots.take("a", "a1")
    await slots.take("b", "b0")
    await slots.take("b", "b1")
    assert slots.unpark() == [("a", "a1"), ("b", "b1")]
    assert slots.parked == 0 and slots.held("a") == 2


def _policy(hanging_url: str) -> str:
    """alice's ``rm -rf`` denied by a rule; every prompt sent to an http hook that never answers,
    its deadline far past the tool call's."""
    hooks = {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"]}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "http", "url": hanging_url, "timeout": 60}]}],
    }
    return policy_yaml(
        hooks, deadlineSeconds=3.0, deadlines={"UserPromptSubmit": 40.0}, http={"allowedNetworks": ["127.0.0.0/8"]}
    )


def _prompt(n: int) -> dict[str, Any]:
    return {"hook_event_name": "UserPromptSubmit", "session_id": f"m-{n}", "prompt": f"prompt {n}", "cwd": "/tmp"}


@pytest.mark.parametrize("share", [2, 0])
async def test_one_tenants_hanging_hooks_leave_another_tenant_its_deny(
    platform: Callable[..., Any], share: int
) -> None:
    """mallory's prompts hang in an http hook; alice's ``rm -rf`` is still decided and denied. With no
    cap (0), mallory's events hold all four slots and alice's call fails open: the test's own check."""
    tokens = {"tokens": Tokens.parse("alice:tok-alice,mallory:tok-mallory")}
    async with (
        LoopbackServer(hang) as server,
        platform(_policy(server.url()), dispatch_concurrency=4, tenant_dispatch_slots=share, **tokens) as p,
    ):
        mallory = {"Authorization": "Bearer tok-mallory"}
        held = [asyncio.create_task(p.post(_prompt(n), headers=mallory, timeout=60)) for n in range(6)]
        try:
            await async_wait_for(lambda: len(server.requests) >= (share or 4), timeout_s=10)
            response = await p.post(pre_tool_use("rm -rf /"), headers={"Authorization": "Bearer tok-alice"})
            decision = response.json().get("hookSpecificOutput", {}).get("permissionDecision")
            outcome = response.headers.get("x-hookbus-outcome")
            if share:
                assert (response.status_code, decision, outcome) == (200, "deny", "decided")
                assert len(server.requests) == share  # the rest of mallory's prompts are parked
            else:
                assert (response.status_code, decision, outcome) == (200, None, "fail-open")
        finally:
            server.stopping.set()  # the hanging hooks get their connections closed: the dispatcher stops at once
            for task in held:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*held, return_exceptions=True)
