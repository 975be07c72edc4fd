"""``--format ocsf``: every record as an OCSF 1.8 API Activity event, valid against the OCSF schema.

The schema is the JSON Schema of class ``api_activity`` built from the OCSF 1.8.0 schema's
published JSON (tests/data/ocsf/README.md). The records come from a real gateway and dispatcher
(token ids and client addresses as the gateway saw them), and leave through the real
``hookbus audit export`` command and a real follower.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import orjson
import pytest

from bus.decisionlog.audit import RecordFilter, Window, read_window
from bus.decisionlog.ocsf import ocsf_event
from bus.runtime.settings import Tokens
from bus.stream.protocol import LogRecord
from gateway.access import token_digest
from hookbus.audit.command import Follower
from hookbus.audit.sinks import JsonlSink
from tests.conftest import REPO, BusProbe, async_wait_for, logged, pre_tool_use, run_hookbus

SCHEMA = json.loads((REPO / "tests" / "data" / "ocsf" / "api_activity.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def problems(event: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, error.absolute_path))}: {error.message}" for error in VALIDATOR.iter_errors(event)]


def a_record(**fields: Any) -> LogRecord:
    hook_input = {"hook_event_name": "PreToolUse", "session_id": "s-1", "tool_name": "Bash", "tool_input": {}}
    base: dict[str, Any] = {
        "event_id": "ev-1",
        "event": "PreToolUse",
        "tenant": "acme",
        "session_id": "s-1",
        "outcome": "decided",
        "decision": "allow",
        "output": {},
        "payload": orjson.dumps(hook_input),
        "received_ms": 1_700_000_000_000,
        "decided_ms": 1_700_000_000_004,
        "tool_name": "Bash",
        "revision": "rev1",
    }
    return LogRecord(**{**base, **fields})


RECORDS = {
    "allowed": a_record(),
    "denied by a rule": a_record(
        decision="deny",
        reason="no rm -rf",
        hooks=[{"id": "h1", "type": "rule", "outcome": "deny", "duration_ms": 0.1, "decided": True, "reason": "r"}],
        token_id="tok_123",
        client_address="10.1.2.3",
        tool_use_id="toolu_1",
    ),
    "asked": a_record(decision="ask", client_address="::1"),
    "blocked stop": a_record(event="Stop", tool_name="", decision="block"),
    "deferred": a_record(decision="defer"),
    "no opinion": a_record(decision="none"),
    "recorded": a_record(event="PostToolUse", outcome="recorded", decision="none"),
    "fail-open": a_record(outcome="fail-open", fail_open="timeout", decision="none"),
    "traced, subagent, masked": a_record(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        agent_id="a1",
        agent_type="explorer",
        masked=[{"pointer": "/tool_input/command", "detector": "github"}],
        agent="gemini",
    ),
    "not a JSON input, unix client": a_record(payload=b"\xff not json", client_address="unix:/run/hookbus.sock"),
    "prompt": a_record(event="UserPromptSubmit", tool_name="", decision="none", output={"decision": None}),
    "approved by a person": a_record(decision="allow", approval={"by": "alice", "outcome": "approved", "wait_s": 12.5}),
}


@pytest.mark.parametrize("name", list(RECORDS))
def test_every_kind_of_record_is_a_valid_ocsf_api_activity(name: str) -> None:
    event = ocsf_event("1700000000000-0", RECORDS[name])
    assert problems(event) == []
    assert (event["class_uid"], event["category_uid"], event["type_uid"]) == (6003, 6, 600399)
    assert event["metadata"]["version"] == "1.8.0" and event["metadata"]["product"]["name"] == "hookbus"


def test_the_decision_is_the_disposition_and_who_and_where_are_the_actor_and_source() -> None:
    denied = ocsf_event("1-0", RECORDS["denied by a rule"])
    assert (denied["disposition_id"], denied["disposition"], denied["action_id"], denied["is_alert"]) == (
        2,
        "Blocked",
        2,
        True,
    )
    assert denied["actor"]["user"]["uid"] == "tok_123" and denied["actor"]["session"]["credential_uid"] == "tok_123"
    assert denied["src_endpoint"] == {"ip": "10.1.2.3"}
    assert denied["api"]["operation"] == "Bash" and denied["resources"][0]["uid"] == "toolu_1"
    assert denied["firewall_rule"] == {"uid": "h1", "name": "h1", "type": "rule", "desc": "r"}
    assert denied["policy"]["desc"] == "no rm -rf" and denied["time"] == 1_700_000_000_000
    assert denied["unmapped"]["log_id"] == "1-0"
    failed = ocsf_event("1-0", RECORDS["fail-open"])
    assert (failed["disposition"], failed["status_id"], failed["status_detail"]) == ("Error", 2, "timeout")
    assert ocsf_event("1-0", RECORDS["allowed"])["disposition"] == "Allowed"
    assert ocsf_event("1-0", RECORDS["asked"])["src_endpoint"] == {"ip": "::1"}
    assert ocsf_event("1-0", RECORDS["recorded"])["disposition"] == "Logged"
    assert "user" not in ocsf_event("1-0", RECORDS["allowed"])["actor"]  # no token configured


def test_the_schema_refuses_what_ocsf_does_not_allow() -> None:
    good = ocsf_event("1-0", RECORDS["allowed"])
    assert problems({k: v for k, v in good.items() if k != "actor"}) != []  # actor is required
    assert problems({**good, "decision": "allow"}) != []  # not an attribute of the class
    assert problems({**good, "disposition_id": 1000}) != []  # not in the enum
    assert problems({**good, "src_endpoint": {"ip": "not an address"}}) != []
    assert problems({**good, "src_endpoint": {}}) != []  # at least one of ip, name, ...


TOKENS = Tokens.parse("acme:tok-a")
DENY_RM = (
    "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks: [{type: rule, deny: ['Bash(rm -rf *)'], reason: no rm}]\n"
)


async def two_events(platform: Callable[..., Any], bus: BusProbe) -> list[LogRecord]:
    async with platform(DENY_RM, tokens=TOKENS) as p:
        headers = {"Authorization": "Bearer tok-a"}
        records = [
            await logged(bus, await p.post(pre_tool_use(command, "ocsf-1"), headers=headers))
            for command in ("rm -rf /", "ls")
        ]
    assert [r.decision for r in records] == ["deny", "none"]
    return records


async def test_export_format_ocsf_writes_valid_events_naming_the_token_id_and_client(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    records = await two_events(platform, bus)
    assert {(r.token_id, r.client_address) for r in records} == {(token_digest("tok-a"), "127.0.0.1")}
    done = await asyncio.to_thread(
        run_hookbus, "audit", "export", "--redis-url", bus.url, "--session", "ocsf-1", "--format", "ocsf"
    )
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [problems(event) for event in events] == [[], []]
    assert [event["disposition"] for event in events] == ["Blocked", "No Action"]
    assert {event["actor"]["user"]["uid"] for event in events} == {token_digest("tok-a")}
    assert "tok-a" not in done.stdout  # the token itself is never written
    assert {event["src_endpoint"]["ip"] for event in events} == {"127.0.0.1"}
    assert [event["unmapped"]["chain"].split(":")[:2] for event in events] == [["0", "1"], ["0", "2"]]


async def test_follow_format_ocsf_delivers_valid_events(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    await two_events(platform, bus)
    expected = [log_id async for log_id, _ in read_window(bus.redis, bus.keys, Window(), RecordFilter())]
    path = tmp_path / "ocsf.jsonl"
    follower = Follower(bus.url, bus.keys, "siem", JsonlSink(str(path)), fmt="ocsf")
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    try:
        await async_wait_for(lambda: path.exists() and path.read_text().count("\n") == len(expected), timeout_s=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [problems(event) for event in events] == [[]] * len(expected)
    assert [event["unmapped"]["log_id"] for event in events] == expected
    assert [e["disposition"] for e in events if e["actor"]["session"]["uid"] == "ocsf-1"] == ["Blocked", "No Action"]
