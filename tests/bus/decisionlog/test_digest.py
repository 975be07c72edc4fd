"""A record's chain digest as its writers compute it (``record_digest``, from the record's fields)
is the digest ``hookbus audit verify`` computes from the record's view (``view_digest``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from bus.decisionlog.chain import record_digest, view_digest
from bus.stream.protocol import VIEW_DEPTH, LogRecord

DENY = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}
#: Every field set, none of them empty: a field the view shows and the digest leaves out fails here.
FULL = LogRecord(
    event_id="01JEVENT",
    event="PreToolUse",
    tenant="acme",
    session_id="s-1",
    outcome="decided",
    decision="deny",
    output=DENY,
    payload=orjson.dumps({"session_id": "s-1", "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}),
    received_ms=1_765_000_000_123,
    decided_ms=1_765_000_000_125,
    revision="r1",
    hooks=[{"id": "rules", "type": "rule", "outcome": "deny", "duration_ms": 0.125, "shadow": False}],
    shadow=[{"id": "new", "decision": "allow"}],
    tool_name="Bash",
    fail_open="timeout",
    agent_id="sub-1",
    agent_type="Explore",
    tool_use_id="toolu_1",
    reason="no rm -rf",
    masked=[{"pointer": "/input/tool_input/env", "detector": "github"}],
    agent="gemini",
    trace_id="0af7651916cd43dd8448eb211c80319c",
    token_id="tok_1",
    client_address="10.0.0.7",
    approval={"by": "ana", "at_ms": 1_765_000_000_900, "outcome": "approved"},
    chain="0:1:" + "0" * 40 + ":" + "1" * 40,
    facts=["tests_ran"],
    budgets={"tool_calls": 3.5},
)

VARIED: dict[str, dict[str, Any]] = {
    "every field": {},
    "every optional field empty": {
        "agent_id": "",
        "agent_type": "",
        "tool_use_id": "",
        "reason": "",
        "masked": [],
        "trace_id": "",
        "token_id": "",
        "client_address": "",
        "approval": {},
        "chain": "",
        "facts": [],
        "budgets": {},
        "hooks": [],
        "shadow": [],
        "tool_name": "",
        "fail_open": "",
        "revision": "",
        "output": {},
    },
    "unicode and escapes": {
        "session_id": "séance-✓",
        "reason": 'déni "cité"\n\t\\ 🚫',
        "payload": orjson.dumps({"z": "ünï 🚀", "a": "\u0000\u001f", "ñ": {"é": ["日本", "\u2028"]}}),
        "output": {"systemMessage": "Ω ≠ ∞"},
    },
    "floats and numbers": {
        "payload": b'{"f": 0.1, "g": 1e300, "h": -0.0, "i": 12345678901234567890, "j": 3, "k": 2.5e-8}',
        "hooks": [{"id": "h", "duration_ms": 0.0, "n": 1.0000001}],
        "budgets": {"b": 0.0, "c": 1e-9},
    },
    "zeros and false": {
        "received_ms": 0,
        "decided_ms": 0,
        "payload": b'{"n": 0, "b": false, "nul": null, "e": "", "l": [], "o": {}}',
        "output": {"continue": False, "n": 0},
    },
    "input 0": {"payload": b"0"},
    "input false": {"payload": b"false"},
    "input null": {"payload": b"null"},
    "input empty object": {"payload": b"{}"},
    "input empty array": {"payload": b"[]"},
    "input empty string": {"payload": b'""'},
    "input not JSON": {"payload": b"not json \xff at all"},
    "input empty bytes": {"payload": b""},
    "input nested past the view's depth": {"payload": b"[" * (VIEW_DEPTH + 5) + b"]" * (VIEW_DEPTH + 5)},
    "input deeply nested, within it": {"payload": b'{"a":' * 50 + b"1" + b"}" * 50},
    "input keys out of order, spaced": {"payload": b'{ "zeta" : 1 , "alpha" : { "y" : [3, 2, 1], "b" : true } }'},
    "decided before received": {"received_ms": 1_765_000_000_500, "decided_ms": 1_765_000_000_100},
    "same moment": {"decided_ms": FULL.received_ms},
}


@pytest.mark.parametrize("change", VARIED.values(), ids=list(VARIED))
def test_a_records_digest_is_its_views(change: dict[str, Any]) -> None:
    record = dataclasses.replace(FULL, **change)
    view = record.to_json()
    assert record_digest(record) == view_digest(view)
    # What the settle script sets and the log's id are not in the digest.
    assert record_digest(dataclasses.replace(record, outcome="fail-open", fail_open="", chain="")) == view_digest(view)
    assert view_digest({**view, "log_id": "1-0"}) == record_digest(record)


def test_every_field_the_view_shows_is_in_the_digest_but_the_settled_ones() -> None:
    # A field added to records must be set in FULL, so that the test above covers it.
    assert [f.name for f in dataclasses.fields(LogRecord) if getattr(FULL, f.name) in ("", [], {}, None)] == []
    view = FULL.to_json()
    for key in set(view) - {"outcome", "fail_open", "chain", "time", "latency_ms"}:
        assert view_digest({**view, key: "changed"}) != record_digest(FULL), key
