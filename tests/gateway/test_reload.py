"""A policy edited on disk takes effect in the gateway and the dispatchers without a restart."""

from __future__ import annotations

import os
from pathlib import Path

from bus.policy.loading import load_policy
from tests.conftest import async_wait_for, run_platform

ALLOW_ALL = "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - {type: rule, deny: ['Bash(sudo *)']}\n"
DENY_RM = ALLOW_ALL.replace("'Bash(sudo *)'", "'Bash(sudo *)', 'Bash(rm *)'")
RM = {"hook_event_name": "PreToolUse", "session_id": "s-reload", "tool_name": "Bash", "tool_input": {"command": "rm x"}}


async def test_edited_policy_is_enforced_without_restart(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(ALLOW_ALL)
    async with run_platform(redis_url, load_policy([path]), policy_paths=(str(path),)) as p:
        assert (await p.post(RM)).json() == {}
        path.write_text(DENY_RM)
        os.utime(path, (1, 1))

        async def denied() -> bool:
            answer = (await p.post(RM)).json()
            return bool(answer.get("hookSpecificOutput", {}).get("permissionDecision") == "deny")

        await async_wait_for(denied, timeout_s=10, interval_s=0.1)
        ready = (await p.client.get(f"{p.url}/readyz")).json()
        assert ready["checks"]["policy"]["revision"] == load_policy([path]).revision


async def test_a_broken_edit_keeps_the_running_policy_and_readyz_says_so(redis_url: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(DENY_RM)
    async with run_platform(redis_url, load_policy([path]), policy_paths=(str(path),)) as p:
        path.write_text("hooks: {PreToolUse: [{hooks: [{type: rule, timeout: 0}]}]}\n")
        os.utime(path, (1, 1))

        async def reported() -> bool:
            ready = (await p.client.get(f"{p.url}/readyz")).json()
            return bool(ready["checks"]["policy"]["reload_error"])

        await async_wait_for(reported, timeout_s=10, interval_s=0.1)
        answer = (await p.post(RM)).json()
        assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
