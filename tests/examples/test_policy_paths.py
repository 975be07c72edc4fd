"""The example policy's secret rules hold outside the project and under the agent's home, not the dispatcher's."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from bus.policy.loading import load_policy
from bus.redis.keys import Keyspace
from bus.stream.protocol import Request
from tests.conftest import REPO
from workers.engine.evaluation import Engine
from workers.handlers.runners import default_runners

CWD = "/work/repo"


def decision(tool: str, path: str, transcript: str | None) -> str:
    policy = load_policy([REPO / "examples" / "policy.yaml"])
    engine = Engine(policy, None, Keyspace(), default_runners(), async_handlers="skip")  # type: ignore[arg-type]
    hook_input: dict[str, Any] = {
        "session_id": "s",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": {"file_path": path, "content": "x"},
        "cwd": CWD,
        "transcript_path": transcript,
    }
    request = Request(event_id="e", event="PreToolUse", tenant="t", payload=orjson.dumps(hook_input), received_ms=0)
    return str(asyncio.run(engine.evaluate(request, hook_input, policy)).merged.decision)


@pytest.mark.parametrize(
    ("tool", "path"),
    [
        ("Read", "/home/dev/.ssh/id_rsa"),
        ("Read", "/home/dev/.aws/credentials"),
        ("Read", "/home/dev/other-project/.env"),
        ("Read", "/opt/deploy/keys/id_ed25519"),
        ("Read", "/etc/ssl/private/server.pem"),
        ("Read", f"{CWD}/config/.env.production"),
        ("Write", "/srv/app/.env"),
    ],
)
@pytest.mark.parametrize("transcript", ["/home/dev/.claude/projects/-work-repo/s.jsonl", None])
def test_secrets_anywhere_are_denied(
    tool: str, path: str, transcript: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/var/lib/hookbus")  # the dispatcher's home is not the agent's
    assert decision(tool, path, transcript) == "deny"


def test_other_files_are_not_secrets() -> None:
    assert decision("Read", f"{CWD}/src/app.py", None) == "none"
    assert decision("Read", "/home/dev/notes/id_rsa.md", None) == "none"
