"""A decision-log record made fit to store (:mod:`bus.decisionlog.masking`): every field that can carry a secret."""

from __future__ import annotations

from typing import Any

import orjson

from bus.decisionlog.masking import redact_record
from bus.redaction.redact import DEFAULT
from bus.stream.protocol import LogRecord
from tests.bus.redaction.test_redact import GITHUB, GITLAB, JWT, OPENAI, SLACK


def test_a_record_is_masked_everywhere_and_lists_what_was_masked() -> None:
    hook_input: dict[str, Any] = {
        "session_id": f"s-{GITLAB}",
        "tool_name": "Bash",
        "tool_input": {"command": f"echo {GITHUB}"},
        "agent_id": "a-1",
        "agent_type": "Explore",
        "tool_use_id": "toolu_1",
    }
    record = LogRecord(
        event_id="e1",
        event="PreToolUse",
        tenant="t",
        session_id=hook_input["session_id"],
        outcome="decided",
        decision="deny",
        output={"hookSpecificOutput": {"permissionDecisionReason": f"leaks {OPENAI}"}},
        payload=orjson.dumps(hook_input),
        received_ms=1,
        decided_ms=2,
        hooks=[{"id": "h", "reason": f"stderr: {SLACK}"}],
        shadow=[{"output": {"reason": JWT}}],
        reason=f"leaks {OPENAI}",
        agent_id="a-1",
        tool_use_id="toolu_1",
    )
    stored = redact_record(DEFAULT, record, hook_input)
    text = orjson.dumps(stored.to_json()).decode() + stored.meta().decode() + stored.payload.decode()
    for secret in (GITLAB, GITHUB, OPENAI, SLACK, JWT):
        assert secret not in text
    assert stored.session_id == "s-[REDACTED:gitlab]"
    assert stored.agent_type == "Explore" and stored.tool_use_id == "toolu_1"
    assert {m["pointer"] for m in stored.masked} == {
        "/input/session_id",
        "/input/tool_input/command",
        "/output/hookSpecificOutput/permissionDecisionReason",
        "/hooks/0/reason",
        "/shadow/0/output/reason",
        "/reason",
    }
    assert (
        LogRecord.decode(
            {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in stored.encode().items()}
        ).masked
        == stored.masked
    )
