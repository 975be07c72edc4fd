"""``agent`` hooks: the tool loop against the fake Messages API of ``test_prompt``, on the suite's Redis.

The ``recent_events`` tool reads the real decision-log stream: tests write it with XADD of
:class:`~bus.stream.protocol.LogRecord` entries, or through the whole platform.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
import pytest_asyncio

from bus.hooks.results import HandlerResult, Outcome
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.runtime.settings import Settings
from bus.stream.partitions import claim_layout
from bus.stream.protocol import LogRecord, Request, now_ms
from tests.conftest import BusProbe, async_wait_for
from tests.workers.outbound.llm_server import (
    HANG,
    KEY_ENV,
    REASON,
    SECRET,
    FakeLlm,
    Scripted,
    answer,
    context,
    event_input,
    llm_policy,
    message,
    text,
    tool_call,
)
from workers.handlers.agent import MAX_TURNS, PAGE, REMINDER, call_tool, recent_events, run
from workers.outbound.llm import ToolUse
from workers.services import Services

pytestmark = pytest.mark.usefixtures("llm_api_key")

BLOCK = {"decision": "block", "reason": REASON}
SESSION = "s-agent"


@pytest_asyncio.fixture
async def services(redis_url: str) -> AsyncIterator[Services]:
    shared = Services(Settings(redis_url=redis_url), connect(redis_url))
    yield shared
    await shared.aclose()
    assert shared.redis is not None
    await shared.redis.aclose()


def logged(
    session: str = SESSION,
    *,
    tenant: str = "default",
    event: str = "PreToolUse",
    command: str = "ls",
    decision: str = "none",
    output: dict[str, Any] | None = None,
    at_ms: int = 0,
) -> LogRecord:
    """A decision-log record as the dispatcher writes it."""
    hook_input = event_input(event, session, tool_input={"command": command})
    at_ms = at_ms or now_ms()
    return LogRecord(
        event_id=f"evt-{command}",
        event=event,
        tenant=tenant,
        session_id=session,
        outcome="decided",
        decision=decision,
        output=output or {},
        payload=orjson.dumps(hook_input),
        received_ms=at_ms,
        decided_ms=at_ms + 1,
        tool_name="Bash",
    )


async def write_log(services: Services, *records: LogRecord | dict[str, bytes]) -> None:
    assert services.redis is not None
    for record in records:
        fields = record.encode() if isinstance(record, LogRecord) else record
        await services.redis.xadd(services.keys.decision_log(), fields)  # type: ignore[arg-type]


Agent = Callable[..., Any]


@pytest.fixture
def agent(llm: FakeLlm, services: Services) -> Agent:
    """``await agent(event, *replies, **handler_fields)``: run one agent handler; the HandlerResult."""

    async def call(
        event: str, *replies: Scripted, hook_input: dict[str, Any] | None = None, **fields: Any
    ) -> HandlerResult:
        llm.reply(*replies)
        handler = {"type": "agent", "prompt": "Did the agent finish safely? $ARGUMENTS", **fields}
        hook_input = event_input(event, SESSION) if hook_input is None else hook_input
        return await run(context(llm_policy(llm.url, event, handler), event, services, hook_input))

    return call


def tool_results(seen_body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a request's last (user) message."""
    last = seen_body["messages"][-1]
    assert last["role"] == "user"
    return [block for block in last["content"] if block["type"] == "tool_result"]


async def test_recent_events_tool_then_block(agent: Agent, llm: FakeLlm, services: Services) -> None:
    deny = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no recursive deletes",
        }
    }
    await write_log(
        services,
        logged(command="rm -rf build", decision="deny", output=deny, at_ms=1_700_000_000_000),
        logged("s-other", command="echo other-session"),
        logged(tenant="fleet-b", command="echo other-tenant"),
        {"r": b"not json", "in": b"{}"},
        logged(command="pytest -q", at_ms=1_700_000_060_000),
    )
    result = await agent("Stop", tool_call("recent_events", {"limit": 10}), answer(ok=False, reason=REASON))
    assert (result.outcome, result.output) == (Outcome.OK, BLOCK)
    first, second = llm.seen
    assert {t["name"] for t in first.body["tools"]} == {"recent_events", "hook_input"}
    assert second.body["messages"][1] == {
        "role": "assistant",
        "content": json.loads(tool_call("recent_events", {"limit": 10}).body)["content"],
    }
    (block,) = tool_results(second.body)
    assert block["tool_use_id"] == "toolu_1" and "is_error" not in block
    events = json.loads(block["content"])
    assert events == [
        {
            "event": "PreToolUse",
            "time": "2023-11-14T22:13:20.000+00:00",
            "tool_name": "Bash",
            "decision": "deny",
            "reason": "no recursive deletes",
            "tool_input": '{"command":"rm -rf build"}',
        },
        {
            "event": "PreToolUse",
            "time": "2023-11-14T22:14:20.000+00:00",
            "tool_name": "Bash",
            "decision": "none",
            "tool_input": '{"command":"pytest -q"}',
        },
    ]


async def test_recent_events_limit_and_paging(services: Services, llm: FakeLlm) -> None:
    await write_log(services, logged(command="first"), logged(command="second"))
    await write_log(services, *(logged("s-noise", command=f"noise-{n}") for n in range(PAGE + 20)))
    await write_log(services, logged(command="third"), logged(command="fourth"))
    ctx = context(
        llm_policy(llm.url, "Stop", {"type": "agent", "prompt": "x"}), "Stop", services, event_input("Stop", SESSION)
    )
    commands = [json.loads(e["tool_input"])["command"] for e in await recent_events(ctx, 3)]
    assert commands == ["second", "third", "fourth"]
    commands = [json.loads(e["tool_input"])["command"] for e in await recent_events(ctx, 50)]
    assert commands == ["first", "second", "third", "fourth"]  # found past the first XREVRANGE page


async def test_hook_input_unknown_tool_and_no_redis(agent: Agent, llm: FakeLlm, services: Services) -> None:
    calls = message(
        {"type": "tool_use", "id": "t1", "name": "hook_input", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "Read", "input": {"file_path": "/etc/passwd"}},
        stop_reason="tool_use",
    )
    hook_input = event_input("PreToolUse", SESSION)
    result = await agent("PreToolUse", calls, answer(ok=True), hook_input=hook_input)
    assert (result.outcome, result.output) == (Outcome.OK, {})
    first, second = tool_results(llm.seen[1].body)
    assert (first["tool_use_id"], json.loads(first["content"])) == ("t1", hook_input)
    assert (second["tool_use_id"], second["is_error"]) == ("t2", True) and "unknown tool" in second["content"]
    ctx = context(llm_policy(llm.url, "Stop", {"type": "agent", "prompt": "x"}), "Stop", Services(Settings()))
    failed = await call_tool(ctx, ToolUse("t3", "recent_events", {}))
    assert failed["is_error"] is True and "decision log" in failed["content"]


DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": REASON,
    }
}


@pytest.mark.parametrize(
    ("event", "more", "expected"),
    [
        ("PreToolUse", {}, DENY),  # continueOnBlock true: deny, the turn goes on
        ("PostToolUse", {}, BLOCK),
        ("TeammateIdle", {}, BLOCK),
        ("TaskCompleted", {}, BLOCK),
        ("Stop", {"impossible": True}, BLOCK),  # no `impossible` for agent hooks
        ("UserPromptSubmit", {}, {"continue": False, "stopReason": REASON}),
    ],
)
async def test_not_ok_is_handled_like_prompt_with_continue_on_block(
    agent: Agent, event: str, more: dict[str, Any], expected: dict[str, Any]
) -> None:
    result = await agent(event, answer(ok=False, reason=REASON, **more))
    assert (result.outcome, result.output) == (Outcome.OK, expected)


async def test_turn_limit_is_an_error(agent: Agent, llm: FakeLlm) -> None:
    llm.always = tool_call("hook_input")
    result = await agent("Stop")
    assert result.outcome is Outcome.ERROR and f"{MAX_TURNS} turns" in (result.reason or "")
    assert len(llm.seen) == MAX_TURNS


async def test_one_reminder_for_a_reply_without_verdict(agent: Agent, llm: FakeLlm) -> None:
    result = await agent("Stop", text("I think it is fine."), text(f"```json\n{json.dumps(BLOCK)}\n```"))
    assert (result.outcome, result.output) == (Outcome.OK, BLOCK)
    assert llm.seen[1].body["messages"][-1] == {"role": "user", "content": REMINDER}
    result = await agent("Stop", text("Still thinking."), text("No JSON for you."))
    assert result.outcome is Outcome.ERROR and len(llm.seen) == 4


@pytest.mark.parametrize(
    ("scripted", "outcome"),
    [
        (HANG, Outcome.TIMEOUT),
        (Scripted(500, b'{"type":"error","error":{"type":"api_error","message":"boom"}}'), Outcome.ERROR),
        (Scripted(200, b'{"type": "message", "content": []}'), Outcome.ERROR),
    ],
)
async def test_llm_failures(agent: Agent, scripted: Scripted, outcome: Outcome) -> None:
    result = await agent("Stop", scripted, timeout=0.2)
    assert result.outcome is outcome and SECRET not in (result.reason or "")


async def test_missing_key_and_permission_request_make_no_call(
    agent: Agent, llm: FakeLlm, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = context(llm_policy(llm.url, "Stop", {"type": "agent", "prompt": "x"}), "Stop", services)
    request = Request(
        event_id="evt-pr", event="PermissionRequest", tenant="default", payload=b"{}", received_ms=now_ms()
    )
    skipped = await run(dataclasses.replace(ctx, request=request))
    assert (skipped.outcome, skipped.output) == (Outcome.OK, {})
    monkeypatch.delenv(KEY_ENV)
    result = await agent("Stop", answer(ok=False, reason=REASON))
    assert result.outcome is Outcome.ERROR and KEY_ENV in (result.reason or "")
    assert llm.seen == []


async def test_full_path_agent_sees_an_earlier_event(llm: FakeLlm, platform: Callable[..., Any], bus: BusProbe) -> None:
    rules = {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"], "reason": "no recursive deletes"}],
            }
        ]
    }
    policy = llm_policy(llm.url, "Stop", {"type": "agent", "prompt": "Did the session stay safe?"}, extra_hooks=rules)
    llm.reply(tool_call("recent_events", {"limit": 5}), answer(ok=False, reason="an rm -rf was attempted"))
    async with platform(policy) as p:
        earlier = await p.post(event_input("PreToolUse", "s-full", tool_input={"command": "rm -rf /srv"}))
        assert earlier.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        event_id = earlier.headers["x-hookbus-event-id"]
        await async_wait_for(lambda: bus.record(event_id))
        stopped = await p.post(event_input("Stop", "s-full", stop_hook_active=False))
    assert stopped.json() == {"decision": "block", "reason": "an rm -rf was attempted"}
    assert llm.seen[0].prompt.startswith("Did the session stay safe?\n\n")
    (block,) = tool_results(llm.seen[1].body)
    (seen_event,) = json.loads(block["content"])
    assert seen_event | {"time": "-"} == {
        "event": "PreToolUse",
        "time": "-",
        "tool_name": "Bash",
        "decision": "deny",
        "reason": "no recursive deletes (rule: Bash(rm -rf *))",
        "tool_input": '{"command":"rm -rf /srv"}',
    }


async def test_recent_events_reads_every_partition_merged_by_time(services: Services, llm: FakeLlm) -> None:
    four = Keyspace(partitions=4)
    assert services.redis is not None
    await claim_layout(services.redis, four)  # the dispatcher's Settings keep 1: the bus's layout says 4
    at_ms = 1_700_000_000_000
    home = four.partition_of(SESSION)
    # The session's records in its own partition and, written before a change of layout, in another;
    # other sessions' records everywhere.
    writes = [
        (home, 1, "first"),
        ((home + 1) % 4, 2, "second"),
        (home, 3, "third"),
        ((home + 2) % 4, 4, None),
        ((home + 1) % 4, 5, "fourth"),
        (home, 6, "fifth"),
        ((home + 3) % 4, 7, None),
    ]
    for partition, ms, command in writes:
        entry = logged(SESSION if command else "s-noise", command=command or f"noise-{ms}", at_ms=at_ms + ms)
        await services.redis.xadd(
            four.decision_log(partition),
            entry.encode(),  # type: ignore[arg-type]
            id=f"{at_ms + ms}-0",
        )
    ctx = context(
        llm_policy(llm.url, "Stop", {"type": "agent", "prompt": "x"}), "Stop", services, event_input("Stop", SESSION)
    )
    commands = [json.loads(e["tool_input"])["command"] for e in await recent_events(ctx, 3)]
    assert commands == ["third", "fourth", "fifth"]
    commands = [json.loads(e["tool_input"])["command"] for e in await recent_events(ctx, 50)]
    assert commands == ["first", "second", "third", "fourth", "fifth"]
