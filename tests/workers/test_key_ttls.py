"""Every per-session key expires: Redis memory stays bounded however many sessions come and go.

A live platform on a private Redis runs events that create each per-session key (a ``once``
marker, the Stop guard's count, an async hook's context for the next turn, the outcome of
each event); then every key in that Redis is looked at: the per-session ones must carry a
TTL, and the only keys without one are the platform's fixed, session-independent ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from bus.redis.keys import Keyspace
from bus.stream.pending_context import CONTEXT_TTL_S
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import async_wait_for, pre_tool_use
from tests.workers.jobs.test_worker import run_worker
from workers.engine.evaluation import ONCE_TTL_S, STOP_GUARD_TTL_S

CONTEXT = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "lint: 2 warnings"}}
BLOCK = {"decision": "block", "reason": "keep going"}
SESSIONS = ("ttl-a", "ttl-b")


def policy() -> str:
    return f"""
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {{type: rule, deny: ['Bash(sudo *)'], once: true}}
  PostToolUse:
    - hooks:
        - {{type: command, async: true, command: {json.dumps("cat >/dev/null; echo '" + json.dumps(CONTEXT) + "'")}}}
  Stop:
    - hooks:
        - {{type: command, command: {json.dumps("cat >/dev/null; echo '" + json.dumps(BLOCK) + "'")}}}
"""


def event(name: str, session: str, **fields: Any) -> dict[str, Any]:
    return {"hook_event_name": name, "session_id": session, "cwd": "/tmp", **fields}


def fixed_keys(keys: Keyspace) -> set[str]:
    """Keys that exist once per platform, not per session or event (bounded by their own caps)."""
    return {
        keys.blocking_stream(),
        keys.events_stream(),
        keys.dead_letter_stream(),
        keys.decision_log(),
        keys.arq_queue,
        keys.dispatchers,
        keys.layout,
        keys.approvals_opened,  # capped (MAXLEN)
        keys.approval_tenants,  # one member per tenant
        # One hash-chain head and one stream of signed checkpoints per partition.
        *(keys.decision_chain(p) for p in keys.all_partitions),
        *(keys.chain_checkpoints(p) for p in keys.all_partitions),
        # Redis 6.2: what each audit group read of a partition's log (one field per group).
        *(keys.decision_reads(p) for p in keys.all_partitions),
    }


async def test_every_per_session_key_has_a_ttl(platform: Callable[..., Any], private_redis: EmbeddedRedis) -> None:
    async with platform(policy(), on_redis=private_redis.url) as p:
        keys: Keyspace = p.settings.keys
        once_id = p.policy.entries("PreToolUse")[0].handler_id
        for session in SESSIONS:
            assert (await p.post(pre_tool_use("ls", session=session))).status_code == 200  # once: marked
            assert (
                await p.post(
                    event(
                        "PostToolUse",
                        session,
                        tool_name="Edit",
                        tool_input={"file_path": "/a.py"},
                        tool_response={"success": True},
                    )
                )
            ).json() == {}  # async: queued
            assert (await p.post(event("Stop", session, stop_hook_active=False))).json() == BLOCK  # guard: counted
        await run_worker(p)  # the async hooks run and leave context for each session
        probe = aioredis.Redis.from_url(private_redis.url)
        try:
            expected = (
                {keys.once("default", s, once_id) for s in SESSIONS}
                | {keys.stop_guard("default", s) for s in SESSIONS}
                | {keys.pending_context("default", s) for s in SESSIONS}
            )

            async def all_created() -> bool:
                return bool(await probe.exists(*expected) == len(expected))

            await async_wait_for(all_created, 10)
            for name in expected:
                ttl = await probe.ttl(name)
                family = name[len(keys.prefix) :].split(":")[0]
                limit = {"once": ONCE_TTL_S, "stopguard": STOP_GUARD_TTL_S, "context": CONTEXT_TTL_S}[family]
                assert 0 < ttl <= limit, f"{name}: TTL {ttl}, expected 1..{limit}"
            without_ttl = []
            outcomes = 0
            async for raw in probe.scan_iter(match="*", count=500):  # the whole (private) Redis, arq's keys too
                name = raw.decode()
                outcomes += name.startswith(keys.outcome(""))
                if name not in fixed_keys(keys) and await probe.ttl(name) == -1:
                    without_ttl.append(name)
            assert outcomes >= len(SESSIONS) * 3  # every event's outcome key was written (and has a TTL)
            assert without_ttl == [], f"keys without a TTL: {without_ttl}"
        finally:
            await probe.aclose()
