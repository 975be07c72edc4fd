"""The engine's selection and platform rules, through the full path.

Every test posts real HTTP to a live gateway; an in-process dispatcher evaluates the policy
against the suite's Redis (``rule`` handlers in-process, ``command`` handlers as real
``/bin/sh`` subprocesses). Answers are checked in the reply, the decision log and metrics.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import BusProbe, Platform, async_wait_for, logged, policy_yaml, pre_tool_use

BLOCK = json.dumps({"decision": "block", "reason": "keep going"})


def bash_group(*handlers: dict[str, Any], matcher: str = "Bash") -> dict[str, Any]:
    return {"PreToolUse": [{"matcher": matcher, "hooks": list(handlers)}]}


def decision(response: httpx.Response) -> str | None:
    assert response.status_code == 200, response.text
    value: str | None = response.json().get("hookSpecificOutput", {}).get("permissionDecision")
    return value


# -- selection and merging ---------------------------------------------------------------------


async def test_group_matcher_and_if_select_handlers(platform: Callable[..., Any], bus: BusProbe) -> None:
    hooks = bash_group(
        {"type": "rule", "if": "Bash(git push *)", "deny": ["Bash(*)"], "reason": "no pushing"}, matcher="Bash|Write"
    )
    async with platform(policy_yaml(hooks)) as p:
        push = await p.post(pre_tool_use("git push origin main"))
        assert decision(push) == "deny"
        assert "no pushing" in push.json()["hookSpecificOutput"]["permissionDecisionReason"]
        status = await p.post(pre_tool_use("git status"))
        assert status.json() == {}
        other_tool = await p.post(pre_tool_use("git push origin main", tool="Read"))
        assert other_tool.json() == {}
        assert [h["type"] for h in (await logged(bus, push)).hooks] == ["rule"]
        assert (await logged(bus, status)).hooks == []  # `if` did not match: the handler never ran
        assert (await logged(bus, other_tool)).hooks == []  # the group matcher did not match


async def test_handlers_are_merged_and_deny_beats_allow(platform: Callable[..., Any], bus: BusProbe) -> None:
    hooks = bash_group(
        {"type": "rule", "allow": ["Bash(*)"]},
        {"type": "rule", "ask": ["Bash(curl *)"]},
        {"type": "rule", "deny": ["Bash(rm *)"], "reason": "rm is off"},
    )
    async with platform(policy_yaml(hooks)) as p:
        assert decision(await p.post(pre_tool_use("ls"))) == "allow"
        assert decision(await p.post(pre_tool_use("curl example.com"))) == "ask"
        denied = await p.post(pre_tool_use("rm -r build"))
        assert decision(denied) == "deny"
        assert "rm is off" in denied.json()["hookSpecificOutput"]["permissionDecisionReason"]
        record = await logged(bus, denied)
        assert record.decision == "deny"
        assert len(record.hooks) == 3


# -- shadow ---------------------------------------------------------------------------------------


async def test_shadow_handler_is_logged_not_enforced(platform: Callable[..., Any], bus: BusProbe) -> None:
    hooks = bash_group({"type": "rule", "deny": ["Bash(rm *)"], "shadow": True})
    async with platform(policy_yaml(hooks)) as p:
        response = await p.post(pre_tool_use("rm -r build"))
        assert response.json() == {}
        assert response.headers["X-Hookbus-Outcome"] == "decided"
        record = await logged(bus, response)
    assert record.decision == "none"
    assert [s["decision"] for s in record.shadow] == ["deny"]
    assert record.shadow[0]["output"]["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert record.hooks[0]["shadow"] is True
    assert p.metrics.value("hookbus_shadow_decisions_total", event="PreToolUse", decision="deny") == 1


async def test_shadow_and_enforced_handlers_side_by_side(platform: Callable[..., Any], bus: BusProbe) -> None:
    hooks = bash_group({"type": "rule", "allow": ["Bash(ls *)"]}, {"type": "rule", "deny": ["Bash(*)"], "shadow": True})
    async with platform(policy_yaml(hooks)) as p:
        response = await p.post(pre_tool_use("ls -la"))
        assert decision(response) == "allow"
        record = await logged(bus, response)
    assert record.decision == "allow"
    assert [s["decision"] for s in record.shadow] == ["deny"]


async def test_whole_policy_shadow(platform: Callable[..., Any], bus: BusProbe) -> None:
    hooks = bash_group({"type": "rule", "deny": ["Bash(rm *)"]})
    async with platform(policy_yaml(hooks, shadow=True)) as p:
        response = await p.post(pre_tool_use("rm -r build"))
        assert response.json() == {}
        record = await logged(bus, response)
    assert (record.decision, record.output) == ("none", {})
    assert [s["decision"] for s in record.shadow] == ["deny"]
    assert p.metrics.value("hookbus_shadow_decisions_total", event="PreToolUse", decision="deny") == 1


# -- failMode -------------------------------------------------------------------------------------


async def test_fail_closed_handlers_deny_on_error_and_timeout(platform: Callable[..., Any], bus: BusProbe) -> None:
    hooks = bash_group(
        {"type": "command", "command": "echo broken >&2; exit 1", "failMode": "closed", "if": "Bash(err *)"},
        {"type": "command", "command": "sleep 5", "timeout": 0.3, "failMode": "closed", "if": "Bash(slow *)"},
    )
    async with platform(policy_yaml(hooks)) as p:
        errored = await p.post(pre_tool_use("err now"))
        timed_out = await p.post(pre_tool_use("slow now"))
        for response in (errored, timed_out):
            assert decision(response) == "deny"
            assert "fail-closed" in response.json()["hookSpecificOutput"]["permissionDecisionReason"]
            assert response.headers["X-Hookbus-Outcome"] == "decided"
        assert "broken" in errored.json()["hookSpecificOutput"]["permissionDecisionReason"]
        assert [h["outcome"] for h in (await logged(bus, timed_out)).hooks] == ["timeout"]
        assert (await logged(bus, errored)).decision == "deny"
    assert p.metrics.value("hookbus_fail_closed_total", event="PreToolUse", type="command") == 2


async def test_fail_open_handlers_are_ignored_and_counted(platform: Callable[..., Any], bus: BusProbe) -> None:
    hooks = bash_group(
        {"type": "command", "command": "exit 1", "if": "Bash(err *)"},
        {"type": "command", "command": "sleep 5", "timeout": 0.3, "if": "Bash(slow *)"},
    )
    async with platform(policy_yaml(hooks)) as p:
        errored = await p.post(pre_tool_use("err now"))
        timed_out = await p.post(pre_tool_use("slow now"))
        assert errored.json() == {} and timed_out.json() == {}
        assert [h["outcome"] for h in (await logged(bus, errored)).hooks] == ["error"]
        assert [h["outcome"] for h in (await logged(bus, timed_out)).hooks] == ["timeout"]
    assert p.metrics.value("hookbus_fail_open_total", event="PreToolUse", reason="hook_error") == 1
    assert p.metrics.value("hookbus_fail_open_total", event="PreToolUse", reason="hook_timeout") == 1


# -- Stop guard -------------------------------------------------------------------------------------


async def _stop(p: Platform, session: str, allow: bool = False) -> dict[str, Any]:
    body = {"hook_event_name": "Stop", "session_id": session, "stop_hook_active": True}
    if allow:
        body["let_me_go"] = True
    response = await p.post(body)
    assert response.status_code == 200
    assert response.headers["X-Hookbus-Outcome"] == "decided"
    out: dict[str, Any] = response.json()
    return out


async def test_stop_guard_overrides_consecutive_blocks(platform: Callable[..., Any]) -> None:
    # Blocks every Stop unless the input says let_me_go (then it says nothing: an allow).
    command = f"grep -q let_me_go && exit 0; echo '{BLOCK}'"
    hooks = {"Stop": [{"hooks": [{"type": "command", "command": command}]}]}
    async with platform(policy_yaml(hooks, stopBlockLimit=2)) as p:
        blocked = {"decision": "block", "reason": "keep going"}
        assert await _stop(p, "s-1") == blocked
        assert await _stop(p, "s-1") == blocked
        forced = await _stop(p, "s-1")
        assert "decision" not in forced
        assert "stopBlockLimit 2" in forced["systemMessage"]
        assert "keep going" in forced["systemMessage"]
        assert p.metrics.value("hookbus_stop_guard_overrides_total", event="Stop") == 1
        # The count starts again after an override, and an allowed Stop resets it too.
        assert await _stop(p, "s-1") == blocked
        assert await _stop(p, "s-1", allow=True) == {}
        assert await _stop(p, "s-1") == blocked
        assert await _stop(p, "s-1") == blocked
        assert "systemMessage" in await _stop(p, "s-1")
        # Sessions are counted apart.
        assert await _stop(p, "s-2") == blocked
    assert p.metrics.value("hookbus_stop_guard_overrides_total", event="Stop") == 2


# -- once -----------------------------------------------------------------------------------------


async def test_once_runs_once_per_session(platform: Callable[..., Any], tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    hooks = bash_group({"type": "command", "command": f"echo $CLAUDE_CODE_SESSION_ID >> {runs}", "once": True})
    async with platform(policy_yaml(hooks)) as p:
        for session in ("s-1", "s-1", "s-2", "s-1", "s-2"):
            response = await p.post(pre_tool_use("ls", session=session))
            assert response.json() == {}
    assert runs.read_text().split() == ["s-1", "s-2"]


async def test_once_is_claimed_only_for_the_run_and_kept_after_success(
    platform: Callable[..., Any], tmp_path: Path, bus: Any
) -> None:
    go = tmp_path / "go"
    hooks = bash_group(
        {
            "type": "command",
            "timeout": 5,
            "once": True,
            "command": f"cat >/dev/null; while [ ! -f {go} ]; do sleep 0.01; done",
        }
    )
    async with platform(policy_yaml(hooks, deadlineSeconds=10.0)) as p:
        entry = p.policy.entries("PreToolUse")[0]
        key = p.settings.keys.once("default", "s-ttl", entry.handler_id)
        answer = asyncio.create_task(p.post(pre_tool_use("ls", session="s-ttl")))
        await async_wait_for(lambda: bus.redis.get(key), timeout_s=10)
        assert await bus.redis.get(key) == b"running"
        assert 0 < await bus.redis.ttl(key) <= 5 + 30  # a dispatcher dying now does not block it for days
        go.write_text("")
        await answer
        assert await bus.redis.get(key) == b"done"
        assert await bus.redis.ttl(key) > 86400  # a successful run is remembered
