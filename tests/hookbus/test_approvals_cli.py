"""``hookbus approvals list|show|approve|deny`` against a live gateway, ``--for always`` included."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import Platform, pre_tool_use, run_hookbus
from tests.gateway.approvals.helpers import AGENT_A, asking, decision_of, pending, platform_with

pytestmark = pytest.mark.timeout(120)

#: Each ``hookbus`` run starts a Python process: on a loaded machine a handful of them outlasts the
#: helpers' 8-second hold, and the held request would come back "retry later" instead of the answer.
HOLD = {"timeoutSeconds": 55, "holdSeconds": 50}


async def _cli(p: Platform, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    redis_url = p.settings.redis_url or ""

    def run() -> subprocess.CompletedProcess[str]:
        return run_hookbus(
            "approvals",
            *args,
            HOOKBUS_URL=p.url,
            HOOKBUS_TOKEN=token,
            HOOKBUS_AUTHOR="carol",
            HOOKBUS_REDIS_URL=redis_url,
        )

    return await asyncio.to_thread(run)


async def test_a_person_lists_shows_approves_and_denies_from_the_shell(platform: Callable[..., Any]) -> None:
    async with platform_with(platform, **HOLD) as p:
        async with asking(p) as held:
            [approval] = await pending(p)
            listed = await _cli(p, "approver-a", "list")
            assert (
                listed.returncode == 0 and approval["id"] in listed.stdout and "git push origin main" in listed.stdout
            )
            shown = await _cli(p, "approver-a", "show", approval["id"])
            assert json.loads(shown.stdout)["tool_input"] == {"command": "git push origin main"}
            other = await _cli(p, "approver-b", "show", approval["id"])
            assert other.returncode == 1 and "404" in other.stderr
            refused = await _cli(p, "approver-a", "approve", approval["id"], "--input", "{not json")
            assert refused.returncode != 0 and "--input is not JSON" in refused.stderr
            done = await _cli(p, "approver-a", "approve", approval["id"], "--for", "session")
            assert done.returncode == 0, done.stderr
            decision, reason = decision_of(await held)
            assert decision == "allow" and "carol" in reason
        async with asking(p, session="s-2") as held:
            [approval] = await pending(p)
            denied = await _cli(p, "approver-a", "deny", approval["id"], "--reason", "not on Fridays")
            assert denied.returncode == 0, denied.stderr
            decision, reason = decision_of(await held)
            assert decision == "deny" and "not on Fridays" in reason
        twice = await _cli(p, "approver-a", "deny", approval["id"])
        assert twice.returncode == 1 and "already" in twice.stderr


async def test_approve_always_pushes_a_policy_version_and_the_call_no_longer_asks(platform: Callable[..., Any]) -> None:
    async with platform_with(platform, **HOLD) as p:
        async with asking(p, "git push origin release") as held:
            [approval] = await pending(p)
            not_admin = await _cli(p, "approver-a", "approve", approval["id"], "--for", "always")
            assert not_admin.returncode == 1 and "org admins" in not_admin.stderr
            always = await _cli(p, "admin-1", "approve", approval["id"], "--for", "always")
            assert always.returncode == 0, always.stderr
            assert "Bash(git push origin release)" in always.stdout
            assert decision_of(await held)[0] == "allow"
        # Another session, the same command: allowed by the policy, no approval opened.
        response = await p.post(pre_tool_use("git push origin release", "s-9"), headers=AGENT_A)
        decision, reason = decision_of(response)
        assert decision == "allow" and "approved always" in reason
        # Another command still asks; a compound one with the approved command does too.
        async with asking(p, "git push origin release && git push origin main", "s-9"):
            assert len(await pending(p)) == 1
        redis_url = p.settings.redis_url or ""
        versions = await asyncio.to_thread(
            lambda: run_hookbus("policy", "versions", "--tenant", "acme", HOOKBUS_REDIS_URL=redis_url)
        )
        assert "approve always: Bash(git push origin release)" in versions.stdout
