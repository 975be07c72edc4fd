"""No secret of a hook input reaches anything hookbus stores or prints for audit.

A live platform (gateway on 127.0.0.1, dispatcher in this process) gets real Claude Code
inputs with a different secret in every field position: ``tool_input.command``,
``tool_input.content``, ``tool_input.url``, ``prompt``, ``tool_response``,
``transcript_path``, environment-style members nested in ``tool_input``, plus a malformed
entry that is dead-lettered, a handler that fails quoting the input and a shadow handler
that echoes it. Then every key of Redis is read (and ``DUMP``ed), ``hookbus tail --json
--from-start`` and ``hookbus audit export`` run as real processes, ``/v1/audit/events`` is
read, and the captured logs are searched: no secret anywhere. The handlers themselves saw
the real input.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from bus.hooks.models import HookInput
from bus.redis.keys import Keyspace
from tests.conftest import BusProbe, async_wait_for, policy_yaml, run_hookbus

GITHUB = "ghp_Zq8Lm2Vx7Rt4Wn3Bc5Yz1Hd6Jf0Gs9Pa2Ue8k"
SECRETS = {
    "command": "Q7xLm2Vr9Tb4Wc8Yz1Hd6Jf3Gs0Pk5Ne",  # a bearer token
    "content": "sk-ant-api03-Vq2Lm7Rn4Tb9Wc1Yz6Hd3Jf5Gs0Pa8Ue2iOo4AxKq9Lm2Vx7Rt8Wn3Bc5Yz1Hd6Jf0Gs4P-Qw8Er7TyAA",
    "url": "wEb-F3tch-Pa55w0rd",
    "prompt": GITHUB,
    "tool_response": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Xk2LmN4",
    "transcript_path": "xoxb-2837465019283-4657382910473-Qm7Rk2Vx9Lp4Tn8Wz1Yb6Hc3",
    "env": "Pg-Pr0d-Passw0rd-77",
    "nested_env": "Zm9vYmFyMjAyNGJhenF1eDEyMzQ1Njc4OTBhYmNk",
    "dead_letter": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkZWFkLWxldHRlciJ9.c2lnbmF0dXJlLWRlYWQtbGV0dGVy",
}
#: What the handlers received, to show they decided on the real input.
SEEN: list[str] = []


def fails_quoting_the_url(hook_input: HookInput) -> None:
    url = str((hook_input.tool_input or {}).get("url"))
    SEEN.append(url)
    raise RuntimeError(f"cannot fetch {url}")


def echoes_the_command(hook_input: HookInput) -> str:
    command = str((hook_input.tool_input or {}).get("command"))
    SEEN.append(command)
    return f"would block: {command}"


POLICY = policy_yaml(
    {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {"type": "rule", "deny": ["Bash(curl *)"], "reason": "no curl"},
                    {"type": "function", "function": f"{__name__}:echoes_the_command", "shadow": True},
                ],
            },
            {"matcher": "WebFetch", "hooks": [{"type": "function", "function": f"{__name__}:fails_quoting_the_url"}]},
            {"matcher": "Write", "hooks": [{"type": "rule", "allow": ["Write(*)"]}]},
        ],
    }
)


def inputs() -> list[dict[str, Any]]:
    base = {
        "session_id": "leak-1",
        "cwd": "/home/dev/app",
        "permission_mode": "default",
        "transcript_path": f"/home/dev/.claude/projects/{SECRETS['transcript_path']}/t.jsonl",
    }
    tool = {**base, "hook_event_name": "PreToolUse"}
    return [
        {
            **tool,
            "tool_name": "Bash",
            "tool_use_id": "toolu_1",
            "tool_input": {"command": f"curl -H 'Authorization: Bearer {SECRETS['command']}' https://api.acme.dev"},
        },
        {
            **tool,
            "tool_name": "Write",
            "tool_use_id": "toolu_2",
            "tool_input": {"file_path": "/home/dev/app/.env", "content": f"ANTHROPIC_API_KEY={SECRETS['content']}\n"},
        },
        {
            **tool,
            "tool_name": "WebFetch",
            "tool_use_id": "toolu_3",
            "agent_id": "agent-7",
            "agent_type": "Explore",
            "tool_input": {"url": f"https://bob:{SECRETS['url']}@intranet.acme.dev/wiki", "prompt": "summarise"},
        },
        {
            **tool,
            "tool_name": "Bash",
            "tool_use_id": "toolu_4",
            "tool_input": {
                "command": "./deploy.sh",
                "env": {"DATABASE_PASSWORD": SECRETS["env"], "NESTED": {"DEPLOY_KEY_B64": SECRETS["nested_env"]}},
            },
        },
        {**base, "hook_event_name": "UserPromptSubmit", "prompt": f"push with my token {SECRETS['prompt']}"},
        {
            **base,
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_use_id": "toolu_5",
            "tool_input": {"command": "cat ~/.aws/credentials"},
            "tool_response": {
                "stdout": f"[default]\naws_secret_access_key = {SECRETS['tool_response']}\n",
                "stderr": "",
                "interrupted": False,
            },
        },
    ]


async def everything_in_redis(url: str) -> bytes:
    """Every key's value as Redis returns it, and its DUMP, as one blob to search."""
    from bus.redis.connection import connect

    client = connect(url, socket_timeout_s=5.0)
    parts: list[bytes] = []
    try:
        async for key in client.scan_iter(count=500):
            parts.append(key)
            kind = (await client.type(key)).decode()
            value: Any
            if kind == "string":
                value = await client.get(key)
            elif kind == "stream":
                value = await client.xrange(key)
            elif kind == "hash":
                value = await client.hgetall(key)  # type: ignore[misc]
            elif kind == "list":
                value = await client.lrange(key, 0, -1)  # type: ignore[misc]
            elif kind == "set":
                value = await client.smembers(key)  # type: ignore[misc]
            elif kind == "zset":
                value = await client.zrange(key, 0, -1, withscores=True)
            else:
                value = kind
            parts.append(repr(value).encode())
            parts.append(await client.dump(key) or b"")
    finally:
        await client.aclose()
    return b"\n".join(parts)


def assert_no_secret(where: str, blob: str | bytes) -> None:
    text = blob.decode("utf-8", "replace") if isinstance(blob, bytes) else blob
    for name, secret in SECRETS.items():
        assert secret not in text, f"the {name} secret is in {where}"
        assert secret[-12:] not in text, f"the end of the {name} secret is in {where}"


@pytest.mark.timeout(120)
async def test_no_secret_reaches_the_log_tail_export_api_dead_letters_redis_or_logs(
    platform: Callable[..., Any], bus: BusProbe, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keys = Keyspace()
    async with platform(POLICY) as p:
        ids = []
        for hook_input in inputs():
            response = await p.post(hook_input)
            assert response.status_code == 200, response.text
            ids.append(response.headers["X-Hookbus-Event-Id"])
        # An entry that is not a hookbus event (no id): the dispatcher moves it to the dead letters.
        await bus.redis.xadd(
            keys.blocking_stream(),
            {"ev": "PreToolUse", "p": orjson.dumps({"prompt": f"Authorization: Bearer {SECRETS['dead_letter']}"})},
        )

        async def settled() -> bool:
            logged = {r.event_id for r in await bus.log()}
            drained = await bus.redis.xlen(keys.blocking_stream()) + await bus.redis.xlen(keys.events_stream())
            return set(ids) <= logged and len(await bus.dead()) == 1 and drained == 0

        await async_wait_for(settled, timeout_s=20)
        # The handlers decided on the real input.
        assert f"https://bob:{SECRETS['url']}@intranet.acme.dev/wiki" in SEEN
        assert any(SECRETS["command"] in seen for seen in SEEN)
        records = {r.event_id: r for r in await bus.log()}
        assert records[ids[0]].decision == "deny"

        api = await p.client.get(f"{p.url}/v1/audit/events")
        assert api.status_code == 200
        api_lines = api.text.splitlines()
        assert {orjson.loads(line)["id"] for line in api_lines} == set(ids)
        assert_no_secret("GET /v1/audit/events", api.text)

    # What was masked is listed, by pointer and detector, never by value.
    masked = {(m["pointer"], m["detector"]) for r in records.values() for m in r.masked}
    assert {
        ("/input/tool_input/command", "authorization"),
        ("/input/tool_input/content", "anthropic"),
        ("/input/tool_input/url", "url-credentials"),
        ("/input/prompt", "github"),
        ("/input/tool_response/stdout", "aws-secret"),
        ("/input/transcript_path", "slack"),
        ("/input/tool_input/env/DATABASE_PASSWORD", "env-secret"),
        ("/input/tool_input/env/NESTED/DEPLOY_KEY_B64", "env-secret"),
        ("/hooks/0/reason", "url-credentials"),
        ("/shadow/0/output/hookSpecificOutput/permissionDecisionReason", "authorization"),
    } <= masked
    assert records[ids[2]].agent_id == "agent-7" and records[ids[2]].tool_use_id == "toolu_3"

    assert_no_secret("the Redis keyspace", await everything_in_redis(redis_url))
    dead = (await bus.dead())[0]
    assert b"[REDACTED:" in dead[b"p"]

    tail = run_hookbus(
        "tail", "--redis-url", redis_url, "--json", "--from-start", "--count", str(len(ids)), timeout_s=30
    )
    assert tail.returncode == 0, tail.stderr
    assert len(tail.stdout.splitlines()) == len(ids) and "[REDACTED:" in tail.stdout
    assert_no_secret("hookbus tail", tail.stdout + tail.stderr)
    export = run_hookbus("audit", "export", "--redis-url", redis_url, timeout_s=30)
    assert export.returncode == 0, export.stderr
    assert len(export.stdout.splitlines()) == len(ids)
    assert_no_secret("hookbus audit export", export.stdout + export.stderr)
    csv = run_hookbus("audit", "export", "--redis-url", redis_url, "--format", "csv", timeout_s=30)
    assert_no_secret("hookbus audit export --format csv", csv.stdout)
    assert_no_secret("the captured logs", caplog.text)


async def test_handlers_get_what_the_agent_sent(platform: Callable[..., Any], bus: BusProbe) -> None:
    """The Bash deny rule matches the real command even though the log shows it masked."""
    async with platform(POLICY) as p:
        response = await p.post(inputs()[0])
        body = response.json()
    assert body["hookSpecificOutput"]["permissionDecision"] == "deny"
    record = await async_wait_for(lambda: bus.record(response.headers["X-Hookbus-Event-Id"]), timeout_s=5)
    assert "[REDACTED:authorization]" in orjson.loads(record.payload)["tool_input"]["command"]
