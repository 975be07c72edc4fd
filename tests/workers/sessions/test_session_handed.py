"""What handlers and the console are given of a session: ``hookbus.session`` in the input of
``http``, ``command`` and ``function`` handlers (the facts, each budget's limit, used and
remaining amount, before the event), and each budget's units left in the decision log's
records (``budgets``), which the console's event stream carries to the session lane."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from bus.policy.loading import policy_from_text
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for, logged, pre_tool_use
from tests.gateway.decisionlog.test_sse import watching
from tests.loopback import LoopbackServer, reply
from workers.handlers.context import HookContext

BUDGET = """
hookbus:
  deadlineSeconds: 5
  http: {allowedNetworks: ["127.0.0.0/8"]}
  session:
    facts:
      deployed: {setBy: [{event: PreToolUse, rules: ["Bash(deploy *)"]}]}
    counters:
      deploys: {count: [{event: PreToolUse, rules: ["Bash(deploy *)"]}]}
    budgets:
      deploys: {counter: deploys, limit: 3, reason: three deploys per session}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: http, url: "URL"}
        - {type: command, command: "cat >> OUT && echo >> OUT"}
"""


def context(payload: bytes, session: dict[str, Any] | None) -> HookContext:
    policy = policy_from_text("hooks: {}\n")
    request = Request("evt-1", "PreToolUse", "default", payload, now_ms(), now_ms() + 5000, "gw")
    entry: Any = None
    return HookContext(request, orjson.loads(payload), entry, policy, 5.0, session=session)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (b'{"session_id": "s", "tool_name": "Bash"}', b'{"session_id": "s", "tool_name": "Bash","hookbus":'),
        (b'{"session_id":"s"}\n', b'{"session_id":"s","hookbus":'),
        (b"{ }", b'{"hookbus":'),
    ],
)
def test_the_session_is_added_to_the_agents_bytes_as_they_came(payload: bytes, expected: bytes) -> None:
    session = {"facts": ["deployed"], "budgets": {}}
    ctx = context(payload, session)
    assert ctx.payload.startswith(expected)
    assert orjson.loads(ctx.payload) == {**orjson.loads(payload), "hookbus": {"session": session}}
    assert ctx.given_input["hookbus"] == {"session": session}
    assert context(payload, None).payload is payload  # no session state: the bytes as they came


def test_an_inputs_own_hookbus_key_is_replaced() -> None:
    ctx = context(b'{"session_id":"s","hookbus":{"session":{"budgets":{"x":{"remaining":99}}}}}', {"facts": []})
    assert orjson.loads(ctx.payload)["hookbus"] == {"session": {"facts": []}}


async def test_handlers_get_each_budgets_remaining_and_the_log_and_console_carry_it(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    out = tmp_path / "stdin.jsonl"
    async with LoopbackServer(reply(200, {})) as server:
        text = BUDGET.replace("URL", server.url()).replace("OUT", str(out))
        async with platform(text) as p, watching(p.url) as console:
            first = await p.post(pre_tool_use("deploy 1", "handed"))
            second = await p.post(pre_tool_use("deploy 2", "handed"))
            await async_wait_for(lambda: len(console.decisions()) == 2, 10)
    bodies = [json.loads(r.body) for r in server.requests]
    stdins = [json.loads(line) for line in out.read_text().splitlines()]
    assert [b["hookbus"]["session"] for b in bodies] == [s["hookbus"]["session"] for s in stdins]
    before_first, before_second = (b["hookbus"]["session"] for b in bodies)
    assert before_first == {
        "facts": [],
        "budgets": {"deploys": {"counter": "deploys", "limit": 3, "used": 0, "remaining": 3}},
    }
    assert before_second["facts"] == ["deployed"] and before_second["budgets"]["deploys"]["remaining"] == 2
    assert bodies[1]["tool_input"] == {"command": "deploy 2"}  # the agent's input is all there
    assert (await logged(bus, first)).budgets == {"deploys": 2} and (await logged(bus, second)).budgets == {
        "deploys": 1
    }
    # What the console's session lane reads: each budget's units left once the event settled.
    assert [d["budgets"] for d in console.decisions()] == [{"deploys": 2}, {"deploys": 1}]
