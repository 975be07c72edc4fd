"""A replay evaluates each recorded event as the agent that sent it: ``agents`` holds there too."""

from __future__ import annotations

import orjson

from bus.policy.loading import policy_from_text
from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord, now_ms
from hookbus.replay.run import replay_window
from tests.conftest import policy_yaml, pre_tool_use

KEYS = Keyspace()
CODEX_ONLY = policy_yaml(
    {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [{"type": "rule", "deny": ["Bash(rm *)"], "reason": "codex may not rm", "agents": ["codex"]}],
            }
        ]
    }
)


async def test_a_handler_limited_to_codex_changes_only_codex_records(redis_url: str) -> None:
    redis = connect(redis_url)
    at_ms = now_ms() - 60_000
    for n, agent in enumerate(("claude", "codex", "gemini")):
        record = LogRecord(
            event_id=f"ev-{agent}",
            event="PreToolUse",
            tenant="acme",
            session_id=f"s-{agent}",
            tool_name="Bash",
            outcome="decided",
            decision="none",
            output={},
            payload=orjson.dumps(pre_tool_use("rm -r build", f"s-{agent}")),
            received_ms=at_ms + n - 5,
            decided_ms=at_ms + n,
            revision="live",
            agent=agent,
        )
        await redis.xadd(KEYS.decision_log(), record.encode(), id=f"{at_ms + n}-0")  # type: ignore[arg-type]
    await redis.aclose()
    report = (await replay_window(policy_from_text(CODEX_ONLY), redis_url, KEYS)).to_json()
    assert (report["replayed"], report["changed"], report["unchanged"]) == (3, 1, 2)
    assert [(c["from"], c["to"], c["count"]) for c in report["changes"]] == [("none", "deny", 1)]
    (example,) = report["examples"]
    assert example["candidate_reason"] == "codex may not rm (rule: Bash(rm *))"
