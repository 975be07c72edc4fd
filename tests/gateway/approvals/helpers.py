"""A platform with the approval queue on, and the calls its tests make."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import yaml

from bus.runtime.settings import Tokens
from tests.conftest import Platform, async_wait_for, policy_yaml, pre_tool_use

AGENT_A = {"Authorization": "Bearer agent-a"}
AGENT_B = {"Authorization": "Bearer agent-b"}
APPROVER_A = {"Authorization": "Bearer approver-a"}
APPROVER_A2 = {"Authorization": "Bearer approver-a2"}
APPROVER_B = {"Authorization": "Bearer approver-b"}
ADMIN = {"Authorization": "Bearer admin-1"}
TOKENS = {
    "tokens": Tokens.parse("acme:agent-a,beta:agent-b"),
    "approver_tokens": Tokens.parse("acme:approver-a,acme:approver-a2,beta:approver-b,acme:agent-a"),
    "admin_tokens": Tokens.parse_admin("admin-1"),
}


def approvals_policy(**approvals: Any) -> str:
    """``git push`` asks a person (``approval: true`` on the group), ``rm -rf`` is denied."""
    group = {
        "matcher": "Bash",
        "approval": True,
        "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"], "ask": ["Bash(git push *)"]}],
    }
    settings = {"enabled": True, "timeoutSeconds": 30, "holdSeconds": 8, **approvals}
    return policy_yaml({"PreToolUse": [group]}, approvals=settings)


def approvals_policy_with_a_fact(**approvals: Any) -> str:
    """:func:`approvals_policy` plus a session fact, ``private_data``, that a Read of ``.env`` sets."""
    policy = yaml.safe_load(approvals_policy(**approvals))
    policy["hookbus"]["session"] = {
        "facts": {"private_data": {"setBy": [{"event": "PreToolUse", "rules": ["Read(**/.env)"]}]}}
    }
    return str(yaml.safe_dump(policy))


def decision_of(response: httpx.Response) -> tuple[str, str]:
    specific = response.json()["hookSpecificOutput"]
    return specific["permissionDecision"], specific.get("permissionDecisionReason", "")


async def pending(p: Platform, headers: dict[str, str] = APPROVER_A, count: int = 1) -> list[dict[str, Any]]:
    """The pending approvals ``headers`` sees, once there are at least ``count``."""

    async def listed() -> list[dict[str, Any]] | None:
        response = await p.client.get(f"{p.url}/v1/approvals", headers=headers)
        assert response.status_code == 200, response.text
        found: list[dict[str, Any]] = response.json()["approvals"]
        return found if len(found) >= count else None

    found: list[dict[str, Any]] = await async_wait_for(listed, timeout_s=10)
    return found


@contextlib.asynccontextmanager
async def asking(
    p: Platform,
    command: str = "git push origin main",
    session: str = "s-1",
    headers: dict[str, str] = AGENT_A,
    **extra: Any,
) -> AsyncIterator[asyncio.Task[httpx.Response]]:
    """A hook request held for a person, as a task (awaited or cancelled on the way out)."""
    task = asyncio.create_task(p.post(pre_tool_use(command, session, **extra), headers=headers, timeout=60))
    try:
        yield task
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def answer(
    p: Platform,
    approval_id: str,
    verb: str,
    headers: dict[str, str] = APPROVER_A,
    scope: str | None = None,
    **body: Any,
) -> httpx.Response:
    """POST an answer; ``scope`` is the body's ``for``."""
    if scope is not None:
        body["for"] = scope
    return await p.client.post(f"{p.url}/v1/approvals/{approval_id}/{verb}", json=body, headers=headers)


def platform_with(platform: Callable[..., Any], **approvals: Any) -> Any:
    return platform(approvals_policy(**approvals), **TOKENS)
