"""The SDK (hookbus.client) and the in-process adapter (hookbus.local_hooks) against a live platform.

The central policy denies, asks and allows with ``rule`` handlers, rewrites a tool input
and adds context with ``command`` hooks (real subprocesses run by the dispatcher), so every
field of :class:`Decision` is checked against what the platform really sends back. The
sync client runs in a worker thread: the gateway lives on the test's own event loop.
"""

from __future__ import annotations

import asyncio
import os
import pty
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bus.runtime.settings import Tokens
from hookbus.client import AsyncHookBusClient, Decision, HookBusClient
from hookbus.local_hooks import LocalHooks, as_decision
from hookbus.platform.redis_server import free_port
from tests.conftest import REPO, BusProbe, logged_session

REWRITE = """\
import json, sys
data = json.load(sys.stdin)
path = data["tool_input"]["file_path"]
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                  "updatedInput": {**data["tool_input"], "file_path": "/sandbox/" + path.lstrip("/")}}}))
"""
CONTEXT = """\
import json, sys
data = json.load(sys.stdin)
print(json.dumps({"systemMessage": "seen by hookbus", "hookSpecificOutput": {
    "hookEventName": "UserPromptSubmit", "additionalContext": "central context for: " + data["prompt"]}}))
"""


def policy(tmp_path: Path, deadline: float = 5.0) -> str:
    (tmp_path / "rewrite.py").write_text(REWRITE)
    (tmp_path / "context.py").write_text(CONTEXT)
    py = shlex.quote(sys.executable)
    return f"""
hookbus: {{deadlineSeconds: {deadline}}}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - type: rule
          reason: "central policy"
          deny: ["Bash(rm -rf *)", "Bash(sudo *)"]
          ask: ["Bash(git push *)"]
          allow: ["Bash(ls *)"]
    - matcher: Write
      hooks:
        - {{type: command, command: "{py} {tmp_path / "rewrite.py"}"}}
  UserPromptSubmit:
    - hooks:
        - {{type: command, command: "{py} {tmp_path / "context.py"}"}}
"""


def bash(command: str) -> dict[str, Any]:
    return {"tool_name": "Bash", "tool_input": {"command": command}}


# -- the clients against the central policy --------------------------------------------------


async def test_sync_client_decisions(platform: Callable[..., Any], bus: BusProbe, tmp_path: Path) -> None:
    async with platform(policy(tmp_path)) as p:

        def run() -> tuple[str, dict[str, Decision]]:
            with HookBusClient(p.url) as client:
                return client.session_id, {
                    "deny": client.emit("PreToolUse", **bash("rm -rf /")),
                    "ask": client.emit("PreToolUse", **bash("git push origin main")),
                    "allow": client.emit("PreToolUse", **bash("ls -la")),
                    "none": client.emit("PreToolUse", **bash("echo hi")),
                    "rewrite": client.emit(
                        "PreToolUse", tool_name="Write", tool_input={"file_path": "/etc/passwd", "content": "x"}
                    ),
                    "context": client.emit("UserPromptSubmit", prompt="fix the bug"),
                    "recorded": client.emit("Notification", message="waiting", notification_type="idle_prompt"),
                    "session": client.emit("Notification", session_id="explicit-session", message="m"),
                }

        default, got = await asyncio.to_thread(run)
    deny = got["deny"]
    assert deny.blocked and deny.permission_decision == "deny" and deny.outcome == "decided"
    assert deny.reason is not None and "central policy" in deny.reason and deny.event_id
    assert deny.raw["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert not got["ask"].blocked and got["ask"].asks and "central policy" in (got["ask"].reason or "")
    assert not got["ask"].allowed  # an ask does not run without a person
    assert not deny.allowed and not deny.asks
    assert got["allow"].allowed and got["allow"].permission_decision == "allow" and not got["allow"].asks
    assert got["none"].allowed and got["rewrite"].allowed
    assert got["none"] == Decision(outcome="decided", event_id=got["none"].event_id)
    rewrite = got["rewrite"]
    assert not rewrite.blocked and rewrite.updated_input == {"file_path": "/sandbox/etc/passwd", "content": "x"}
    context = got["context"]
    assert context.additional_context == "central context for: fix the bug"
    assert context.system_message == "seen by hookbus" and not context.blocked
    assert got["recorded"].outcome == "recorded" and not got["recorded"].blocked
    # One session per client instance unless a field says otherwise; every event reached the log.
    await logged_session(bus, "explicit-session")
    assert default.startswith("hookbus-sdk-") and len(await logged_session(bus, default, count=7)) == 7
    assert {r.session_id for r in await bus.log()} == {default, "explicit-session"}
    assert {r.agent for r in await bus.log()} == {"sdk"}  # the SDK names its dialect: its records say so


async def test_async_client_and_fresh_sessions(platform: Callable[..., Any], bus: BusProbe, tmp_path: Path) -> None:
    async with platform(policy(tmp_path)) as p:
        async with AsyncHookBusClient(p.url) as one, AsyncHookBusClient(f"{p.url}/v1/hooks") as two:
            denied = await one.emit("PreToolUse", **bash("sudo reboot"))
            allowed = await two.emit("PreToolUse", **bash("ls"))
    assert denied.blocked and "central policy" in (denied.reason or "")
    assert not allowed.blocked and one.session_id != two.session_id
    assert [(r.decision, r.agent) for r in await logged_session(bus, one.session_id)] == [("deny", "sdk")]


async def test_tokens(platform: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOOKBUS_TOKEN", raising=False)
    async with platform(policy(tmp_path), tokens=Tokens.parse("fleet:tok-1")) as p:
        async with AsyncHookBusClient(p.url, token="tok-1") as good, AsyncHookBusClient(p.url) as missing:
            assert (await good.emit("PreToolUse", **bash("rm -rf /"))).blocked
            refused = await missing.emit("PreToolUse", **bash("rm -rf /"))
        monkeypatch.setenv("HOOKBUS_TOKEN", "tok-1")
        async with AsyncHookBusClient(p.url, fail_closed=True) as from_env:
            assert (await from_env.emit("PreToolUse", **bash("ls"))).outcome == "decided"
    assert not refused.blocked and refused.outcome == "fail-open" and "401" in (refused.error or "")


# -- failing open and closed ------------------------------------------------------------------


@pytest.mark.system
async def test_gateway_down_fails_open_or_closed() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    async with AsyncHookBusClient(url) as open_, AsyncHookBusClient(url, fail_closed=True) as closed:
        opened = await open_.emit("PreToolUse", **bash("rm -rf /"))
        shut = await closed.emit("PreToolUse", **bash("ls"))
    assert not opened.blocked and opened.outcome == "fail-open" and "unreachable" in (opened.error or "")
    assert opened.reason is None
    assert shut.blocked and shut.outcome == "fail-closed" and (shut.reason or "").startswith("hookbus: gateway")
    assert "unreachable" in (shut.error or "")

    def sync() -> tuple[Decision, Decision]:
        with HookBusClient(url) as a, HookBusClient(url, fail_closed=True) as b:
            return a.emit("Stop"), b.emit("Stop")

    sync_open, sync_closed = await asyncio.to_thread(sync)
    assert (sync_open.blocked, sync_closed.blocked) == (False, True)
    assert (sync_open.outcome, sync_closed.outcome) == ("fail-open", "fail-closed")


async def test_timeouts(silent_port: int) -> None:
    url = f"http://127.0.0.1:{silent_port}"
    started = time.monotonic()
    async with AsyncHookBusClient(url, timeout_s=0.3, fail_closed=True) as client:
        decision = await client.emit("PreToolUse", **bash("ls"))
    assert decision.blocked and "within 0.3s" in (decision.reason or "")

    def sync() -> Decision:
        with HookBusClient(url, timeout_s=0.3) as c:
            return c.emit("PreToolUse", **bash("ls"))

    assert (await asyncio.to_thread(sync)).outcome == "fail-open"
    assert time.monotonic() - started < 3


async def test_gateway_fail_open_outcome(platform: Callable[..., Any], tmp_path: Path) -> None:
    async with platform(policy(tmp_path, deadline=0.3), dispatchers=0) as p:
        async with AsyncHookBusClient(p.url) as open_, AsyncHookBusClient(p.url, fail_closed=True) as closed:
            assert (await open_.emit("PreToolUse", **bash("rm -rf /"))).outcome == "fail-open"
            shut = await closed.emit("PreToolUse", **bash("ls"))
    assert shut.blocked and shut.outcome == "fail-closed" and "could not decide" in (shut.reason or "")


# -- reading outputs ------------------------------------------------------------------------


def test_decision_from_output() -> None:
    stop = Decision.from_output({"continue": False, "stopReason": "halt", "decision": "block", "reason": "r"})
    assert stop.blocked and stop.stop and stop.reason == "halt"
    block = Decision.from_output({"decision": "block", "reason": "keep going"})
    assert block.blocked and block.reason == "keep going" and not block.stop
    request = Decision.from_output(
        {
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "deny", "message": "no"},
            }
        }
    )
    assert request.blocked and request.reason == "no" and request.permission_decision == "deny"
    grant = Decision.from_output(
        {
            "hookSpecificOutput": {
                "hookEventName": "PermissionRequest",
                "decision": {"behavior": "allow", "updatedInput": {"command": "ls"}},
            }
        }
    )
    assert not grant.blocked and grant.updated_input == {"command": "ls"}
    assert Decision.from_output({"decision": "approve", "reason": "fine"}).permission_decision == "allow"
    assert Decision.from_output({}) == Decision()
    assert stop.blocked and not stop.allowed and not request.allowed and grant.allowed and Decision().allowed
    with pytest.raises(AttributeError):
        stop.blocked = False  # type: ignore[misc]


def pre_tool_use(permission: str) -> Decision:
    return Decision.from_output(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": permission,
                "permissionDecisionReason": f"policy says {permission}",
            }
        }
    )


@pytest.mark.parametrize(
    ("permission", "allowed", "asks", "defers", "blocked"),
    [
        ("allow", True, False, False, False),
        ("ask", False, True, False, False),
        ("defer", False, False, True, False),
        ("deny", False, False, False, True),
    ],
)
def test_only_an_allow_or_no_opinion_runs_without_a_person(
    permission: str, allowed: bool, asks: bool, defers: bool, blocked: bool
) -> None:
    decision = pre_tool_use(permission)
    assert (decision.allowed, decision.asks, decision.defers, decision.blocked) == (allowed, asks, defers, blocked)
    assert decision.reason == f"policy says {permission}"


def test_asking_is_never_allowed_whatever_it_is_combined_with() -> None:
    ask, allow = pre_tool_use("ask"), pre_tool_use("allow")
    assert not ask.combine(allow).allowed and ask.combine(allow).asks
    assert not allow.combine(ask).allowed and allow.combine(ask).asks
    denied = ask.combine(pre_tool_use("deny"))
    assert denied.blocked and not denied.asks and not denied.allowed
    assert Decision.failed("gateway down", fail_closed=False).allowed  # fail open: no opinion
    assert not Decision.failed("gateway down", fail_closed=True).allowed


# -- LocalHooks ------------------------------------------------------------------------------


def test_trigger_hooks_is_seed_003() -> None:
    engine, calls = LocalHooks(), []

    def log_hook(name: str) -> Callable[[str], None]:
        return lambda block: calls.append(name)

    engine.register_hook("PreToolUse", log_hook("log"))
    engine.register_hook("PreToolUse", lambda block: "Permission denied" if "rm -rf" in block else None)
    engine.register("PreToolUse", log_hook("never"))
    assert engine.trigger_hooks("PreToolUse", "ls") is None and calls == ["log", "never"]
    calls.clear()
    assert engine.trigger_hooks("PreToolUse", "rm -rf /") == "Permission denied" and calls == ["log"]
    assert engine.trigger_hooks("Stop") is None


def test_local_results_and_blocks_without_a_bus() -> None:
    assert as_decision(None) is None and as_decision({"action": "continue"}) is None
    assert as_decision("nope") == Decision(blocked=True, reason="nope", outcome="local")
    assert as_decision({"action": "modify", "modifications": {"args": {"a": 1}}}).updated_input == {"a": 1}  # type: ignore[union-attr]
    engine, seen = LocalHooks(), []
    engine.register("PreToolUse", lambda i: {"action": "modify", "modifications": {"args": {"command": "ls -l"}}})

    def ask(hook_input: dict[str, Any]) -> dict[str, Any]:
        seen.append(hook_input["tool_input"])
        return {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "ask",
                "additionalContext": "local ctx",
            }
        }

    engine.register("PreToolUse", ask)
    decision = engine.emit("PreToolUse", **bash("ls"))
    assert seen == [{"command": "ls -l"}] and decision.updated_input == {"command": "ls -l"}
    assert decision.asks and decision.additional_context == "local ctx" and decision.outcome == "local"

    def boom(hook_input: dict[str, Any]) -> None:
        raise RuntimeError("bug in a hook")

    engine.register("Stop", boom)
    assert not engine.emit("Stop").blocked
    closed = LocalHooks(fail_closed=True)
    closed.register("Stop", boom)
    assert "bug in a hook" in (closed.emit("Stop").reason or "")


async def test_adapter_composes_local_hooks_with_the_bus(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    async with platform(policy(tmp_path)) as p:
        client = AsyncHookBusClient(p.url, session_id="adapter")
        engine = LocalHooks(client)
        engine.register("PreToolUse", lambda i: "local says no" if "shred" in i["tool_input"]["command"] else None)

        async def escalate(hook_input: dict[str, Any]) -> Any:
            command = hook_input["tool_input"]["command"]
            if command.startswith("apt "):  # a local rewrite the central policy must see
                return {"action": "modify", "modifications": {"args": {"command": "sudo " + command}}}
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": "local note"}}

        engine.register("PreToolUse", escalate)
        local_block = await engine.aemit("PreToolUse", **bash("shred secrets"))
        central_block = await engine.aemit("PreToolUse", **bash("apt install x"))
        merged = await engine.aemit("PreToolUse", **bash("git push origin main"))
        with pytest.raises(TypeError):
            engine.emit("PreToolUse", **bash("ls"))
        await client.aclose()
    assert local_block.blocked and local_block.reason == "local says no" and local_block.outcome == "local"
    assert central_block.blocked and central_block.outcome == "decided"
    assert "central policy" in (central_block.reason or "")
    assert merged.asks and merged.additional_context == "local note" and not merged.blocked
    records = await logged_session(bus, "adapter", count=2)
    assert len(records) == 2  # the local block never reached the bus
    assert b'"sudo apt install x"' in records[0].payload and records[0].decision == "deny"


# -- the example agent loop ------------------------------------------------------------------


PUSH = '[PreToolUse] Bash {"command": "git push origin main"} -> ASKS: A push publishes the work'


@pytest.mark.parametrize("person", ["absent", "yes", "no"])
async def test_example_agent_loop(platform: Callable[..., Any], bus: BusProbe, person: str) -> None:
    """The example follows every decision; a call the policy asks about runs only on a person's
    yes at the terminal, and with no terminal on stdin it is not run."""
    policy_text = (REPO / "examples" / "agent_loop_policy.yaml").read_text()
    terminal, stdin = None, subprocess.DEVNULL
    if person != "absent":
        terminal, stdin = pty.openpty()
        os.write(terminal, b"y\n" if person == "yes" else b"\n")  # waits in the terminal until read
    try:
        async with platform(policy_text) as p:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(REPO / "examples" / "agent_loop.py"),
                "--url",
                p.url,
                stdin=stdin,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=REPO,
            )
            out, err = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if terminal is not None:
            os.close(terminal)
            os.close(stdin)
    assert process.returncode == 0, err.decode()
    text = out.decode()
    lines = text.splitlines()
    assert "[SessionStart] context added: Fleet policy:" in lines[1]
    assert "context added: Reminder from hookbus" in lines[2]
    assert '[PreToolUse] Bash {"command": "rm -rf build /"} -> BLOCKED: Permission denied' in text
    assert PUSH in text
    assert '-> input modified -> {"file_path": "/tmp/agent-sandbox/notes/todo.md"' in text
    assert [line for line in lines if line.startswith("[Stop]")] == [
        "[Stop] BLOCKED: Run the tests (pytest) before stopping.",
        "[Stop] allowed (decided)",
    ]
    confirmed = person == "yes"
    if person == "absent":
        assert "[confirm] no one to ask (stdin is not a terminal): Bash is not run" in lines
    else:
        assert "\n[confirm] A push publishes the work: a person confirms it first (rule: Bash(git push *))\n" in text
        assert '[confirm] run Bash {"command": "git push origin main"}? [y/N] ' in text
    assert (
        f"[summary] 5 tool calls, 1 blocked, 1 asked ({int(confirmed)} confirmed), 1 modified, "
        "2 context additions, 2 turns"
    ) in text
    refused = "[model context] tool error for Bash: not confirmed: A push publishes the work"
    assert (refused in text) is not confirmed
    # Every event reached the bus: 12, and the push's PostToolUse when the person said yes.
    records = await logged_session(bus, lines[0].split()[1], count=12 + confirmed)
    assert {r.event for r in records} == {"PostToolUse", "PreToolUse", "SessionStart", "Stop", "UserPromptSubmit"}
    # The pushed call ran (its PostToolUse reached the bus) only on the person's yes.
    ran = [r for r in records if r.event == "PostToolUse" and b"git push" in r.payload]
    assert len(ran) == int(confirmed)
