"""OpenCode's tokens and cost: hookbus's plugin (run by Node, as OpenCode would) adds up what
OpenCode recorded on the session's assistant messages and posts it with ``session.idle``; the
session's ``tokens`` and ``cost_usd`` take those totals (raised to them, never added twice)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bus.dialects import dialect_for
from bus.policy.loading import policy_from_text
from bus.session.apply import apply_ops
from bus.session.definitions import session_policy
from bus.session.effects import effects, verdicts
from bus.session.state import SessionState, SessionView
from bus.session.usage import session_totals
from hookbus.install.opencode import render_plugin
from tests.ci import missing
from tests.loopback import LoopbackServer, reply

NODE = shutil.which("node")
HARNESS = """
import { HookbusPlugin } from "./hookbus.js"
const messages = JSON.parse(process.argv[2])
const client = { session: { messages: async () => ({ data: messages }) } }
const hooks = await HookbusPlugin({ client, directory: "/w", worktree: "/w" })
await hooks.event({ event: { type: "session.idle", properties: { sessionID: "ses_1" } } })
"""


def assistant(cost: float, tokens: dict[str, Any], text: str) -> dict[str, Any]:
    info = {"id": "m", "sessionID": "ses_1", "role": "assistant", "cost": cost, "tokens": tokens}
    return {"info": info, "parts": [{"type": "text", "text": text}]}


async def plugin_posts(tmp_path: Path, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """What the plugin posts on ``session.idle`` when the session holds ``messages``."""
    if NODE is None:
        missing("no node (apt-get install nodejs)")
    async with LoopbackServer(reply(200, {})) as server:
        plugin = render_plugin(server.url("/v1/hooks"), timeout_s=5, fail_closed=False, events=("session.idle",))
        (tmp_path / "hookbus.js").write_text(plugin)
        (tmp_path / "run.mjs").write_text(HARNESS)
        run = await asyncio.create_subprocess_exec(NODE, "run.mjs", json.dumps(messages), cwd=tmp_path)
        assert await asyncio.wait_for(run.wait(), 30) == 0
    (posted,) = server.requests
    body: dict[str, Any] = json.loads(posted.body)
    return body


@pytest.mark.system
async def test_the_plugin_adds_up_the_sessions_tokens_and_cost(tmp_path: Path) -> None:
    user = {"info": {"id": "u", "role": "user"}, "parts": [{"type": "text", "text": "hi"}]}
    first = assistant(0.0125, {"input": 1000, "output": 200, "reasoning": 50, "cache": {"read": 4000, "write": 0}}, "a")
    second = assistant(0.0031, {"input": 300, "output": 80, "reasoning": 0, "cache": {"read": 5200, "write": 10}}, "b")
    body = await plugin_posts(tmp_path, [user, first, user, second])
    assert body["lastAssistantMessage"] == "b"
    assert body["sessionUsage"]["tokens"] == 1250 + 4000 + 380 + 5210
    assert body["sessionUsage"]["costUsd"] == pytest.approx(0.0156)
    canonical = dialect_for("opencode").to_canonical(body)
    assert canonical["hook_event_name"] == "Stop"
    assert session_totals("Stop", canonical) == (10840, 15600)
    none = await plugin_posts(tmp_path, [user])
    assert "sessionUsage" not in none  # nothing recorded: nothing sent


def test_totals_raise_the_counters_once_and_a_cost_budget_stops_calls() -> None:
    policy = session_policy(
        policy_from_text("hookbus:\n  session:\n    budgets:\n      money: {counter: cost_usd, limit: 2}\nhooks: {}\n")
    )

    def idle(tokens: int, cost: float) -> dict[str, Any]:
        raw = {"event": "session.idle", "sessionID": "ses_1", "directory": "/w", "time": 1}
        return dialect_for("opencode").to_canonical({**raw, "sessionUsage": {"tokens": tokens, "costUsd": cost}})

    state = SessionState()
    for at, (tokens, cost) in enumerate([(1000, 0.5), (1000, 0.5), (2500, 1.25), (2400, 1.2)], 1):
        state = apply_ops(state, effects(policy, "Stop", idle(tokens, cost), "none"), at)
    view = SessionView(policy, state, 10)
    assert (view.counter("tokens"), view.counter("cost_usd")) == (2500, 1.25)  # the highest totals, once
    call = {"session_id": "ses_1", "tool_name": "Bash", "tool_input": {"command": "ls"}}
    assert verdicts(view, "PreToolUse", policy.matched("PreToolUse", call)) == []
    state = apply_ops(state, effects(policy, "Stop", idle(4000, 2.01), "none"), 11)
    (over,) = verdicts(SessionView(policy, state, 12), "PreToolUse", policy.matched("PreToolUse", call))
    assert over.decided == ("deny", "hookbus: budget 'money' is used up (cost_usd: 2.01 of 2)")
    claude_stop = {"session_id": "s", "stop_hook_active": False, "sessionUsage": {"tokens": 5, "costUsd": 9.0}}
    assert session_totals("Stop", claude_stop) is None  # only OpenCode's idle reports totals
