"""``HOOKBUS_LOG_FORMAT=json``: real roles write one JSON object per line, with the event's
ids, and never a token or a hook input."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from bus.redis.keys import Keyspace
from hookbus.platform.redis_server import free_port
from tests.conftest import clean_env, hookbus_process, policy_yaml, ready, wait_for

TOKEN = "sekret-token-4f9a"
MARKER = "PAYLOAD-MARKER-77c1"
POLICY = policy_yaml(
    {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"]}]}],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "sleep 1"}]}],
    },
    deadlines={"UserPromptSubmit": 0.3},
)


def lines(process: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """Every line the role wrote to stderr, each parsed as JSON (it fails if one is not)."""
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=20)
    text = err.decode()
    assert TOKEN not in text
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.timeout(90)
def test_roles_log_one_json_object_per_line_with_the_event_ids(
    redis_url: str, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    port = free_port()
    env = clean_env(
        HOOKBUS_REDIS_URL=redis_url,
        HOOKBUS_LOG_FORMAT="json",
        HOOKBUS_LOG_LEVEL="debug",
        HOOKBUS_TOKENS=f"acme:{TOKEN}",
    )
    gateway = hookbus_process("gateway", "--config", str(policy), "--port", str(port), env=env)
    dispatcher = hookbus_process("dispatcher", "--config", str(policy), env=env)
    children += [gateway, dispatcher]
    wait_for(
        lambda: ready(port) or gateway.poll() is not None or dispatcher.poll() is not None,
        timeout_s=30,
        interval_s=0.05,
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = f"http://127.0.0.1:{port}/v1/hooks"
    deny = httpx.post(
        url,
        headers=headers,
        timeout=5,
        json={
            "hook_event_name": "PreToolUse",
            "session_id": "s-deny",
            "tool_name": "Bash",
            "tool_input": {"command": f"rm -rf /{MARKER}"},
        },
    )
    late = httpx.post(
        url,
        headers=headers,
        timeout=5,
        json={"hook_event_name": "UserPromptSubmit", "session_id": "s-late", "prompt": MARKER},
    )
    assert deny.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert late.headers["X-Hookbus-Outcome"] == "fail-open"
    deny_id, late_id = deny.headers["X-Hookbus-Event-Id"], late.headers["X-Hookbus-Event-Id"]
    # The dispatcher logs the hook that ran out of time once it has given up on it.
    wait_for(lambda: _settled(redis_url, 2), timeout_s=10, interval_s=0.05)

    gateway_lines, dispatcher_lines = lines(gateway), lines(dispatcher)
    everything = gateway_lines + dispatcher_lines
    assert all({"time", "level", "logger", "pid", "message"} <= set(line) for line in everything)
    assert not [line for line in everything if MARKER in json.dumps(line)]  # no hook input, at any level
    assert any(line["logger"] == "uvicorn.error" for line in gateway_lines)  # uvicorn's lines are JSON too

    (decided,) = [line for line in dispatcher_lines if line.get("event_id") == deny_id]
    assert decided["level"] == "debug"  # decisions at debug only
    assert (decided["message"], decided["decision"], decided["tenant"], decided["session_id"]) == (
        "decided deny",
        "deny",
        "acme",
        "s-deny",
    )
    assert len(decided["handler"]) == 16  # the deciding handler's id in the policy

    answered = [line for line in gateway_lines if line.get("event_id") == deny_id]
    assert [(line["level"], line["message"]) for line in answered] == [("debug", "answered deny")]

    (fail_open,) = [line for line in gateway_lines if line.get("event_id") == late_id]
    assert (fail_open["level"], fail_open["message"], fail_open["reason"]) == (
        "info",
        "answered fail-open: timeout",
        "timeout",
    )
    assert (fail_open["tenant"], fail_open["session_id"], fail_open["event"]) == ("acme", "s-late", "UserPromptSubmit")

    late_lines = [line for line in dispatcher_lines if line.get("event_id") == late_id]
    assert [(line["level"], line["message"]) for line in late_lines] == [
        ("info", "handler timeout"),
        ("debug", "decided none"),
    ]
    timed_out = late_lines[0]
    assert (timed_out["handler_type"], timed_out["session_id"], timed_out["tenant"]) == ("command", "s-late", "acme")
    assert timed_out["handler"] and timed_out["reason"].startswith("timed out after")


def _settled(redis_url: str, records: int) -> bool:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        return cast(int, client.xlen(Keyspace().decision_log())) >= records
    finally:
        client.close()


def test_the_log_format_flag_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from hookbus.cli import build_parser
    from hookbus.commands import _settings

    monkeypatch.setenv("HOOKBUS_LOG_FORMAT", "text")
    for role in ("up", "gateway", "dispatcher", "worker"):
        assert _settings(build_parser().parse_args([role, "--log-format", "json"])).log_format == "json"
        assert _settings(build_parser().parse_args([role])).log_format == "text"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["gateway", "--log-format", "xml"])
