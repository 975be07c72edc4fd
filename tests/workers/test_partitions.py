"""A partitioned bus end to end: sessions spread over partitions, decided and logged in each."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from bus.errors import ConfigError
from bus.redis.connection import connect
from bus.redis.keys import DISPATCH_GROUP
from bus.runtime.settings import Settings
from bus.stream.protocol import LogRecord
from tests.conftest import async_wait_for, policy_yaml, pre_tool_use, rm_rf
from workers.dispatcher.answering import Dispatcher

DENY_RM = {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"], "reason": "no rm -rf"}]}]
}
PARTITIONED = policy_yaml(DENY_RM, streams={"partitions": 4})


async def test_sessions_are_decided_in_their_partitions(platform: Callable[..., Any], redis_url: str) -> None:
    async with platform(PARTITIONED) as p:
        sessions = [f"part-{i}" for i in range(24)]
        answers = await asyncio.gather(
            *(p.post(rm_rf(s)) for s in sessions), *(p.post(pre_tool_use("ls", s)) for s in sessions)
        )
        denied = [a.json().get("hookSpecificOutput", {}).get("permissionDecision") for a in answers[:24]]
        assert denied == ["deny"] * 24
        assert all(
            a.json() == {}
            or "hookSpecificOutput" not in a.json()
            or a.json()["hookSpecificOutput"].get("permissionDecision") != "deny"
            for a in answers[24:]
        )
        keys = p.settings.keys.with_partitions(4)
        redis = connect(redis_url)
        try:
            logged = {part: await redis.xlen(keys.decision_log(part)) for part in range(4)}
            assert sum(logged.values()) == 48
            assert all(count > 0 for count in logged.values()), logged
            for session in sessions:  # both events of a session went to its own partition
                part = keys.partition_of(session)
                records = await redis.xrange(keys.decision_log(part))
                assert sum(1 for _, fields in records if LogRecord.decode(fields).session_id == session) == 2
            for part in range(4):
                assert (await redis.xpending(keys.blocking_stream(part), DISPATCH_GROUP))["pending"] == 0
            assert await redis.hget(keys.layout, "partitions") == b"4"  # type: ignore[misc]
        finally:
            await redis.aclose()


async def test_a_dispatcher_consumes_only_its_partitions(platform: Callable[..., Any], redis_url: str) -> None:
    # The platform's own dispatcher is told to take partitions 0-1 only: sessions of 2-3 wait.
    short = policy_yaml(DENY_RM, streams={"partitions": 4}, deadlineSeconds=0.5)
    async with platform(short, dispatch_partitions=(0, 1)) as p:
        keys = p.settings.keys.with_partitions(4)
        mine = next(f"s-{i}" for i in range(100) if keys.partition_of(f"s-{i}") in (0, 1))
        answer = await p.post(rm_rf(mine))
        assert answer.headers["X-Hookbus-Outcome"] == "decided"
        other = next(f"s-{i}" for i in range(100) if keys.partition_of(f"s-{i}") in (2, 3))
        late = await p.post(rm_rf(other))
        assert late.headers["X-Hookbus-Outcome"] == "fail-open"


@pytest.mark.timeout(30)
async def test_a_node_with_another_partition_count_refuses_to_run(
    redis_url: str, write_policy: Callable[..., Any]
) -> None:
    from bus.policy.loading import load_policy

    four = load_policy([write_policy(PARTITIONED, "four.yaml")])
    two = load_policy([write_policy(policy_yaml({}, streams={"partitions": 2}), "two.yaml")])
    settings = Settings(redis_url=redis_url)
    stop = asyncio.Event()
    first = Dispatcher(settings, four, redis_url, consumer="four")
    running = asyncio.create_task(first.run(stop))
    redis = connect(redis_url)
    try:
        await async_wait_for(lambda: redis.hget(settings.keys.layout, "partitions"), 10)
        with pytest.raises(ConfigError, match="the bus has 4 partitions"):
            await Dispatcher(settings, two, redis_url, consumer="two").run(asyncio.Event())
        with pytest.raises(ConfigError, match="--partitions names 5"):
            Dispatcher(Settings(redis_url=redis_url, dispatch_partitions=(0, 5)), four, redis_url)
    finally:
        stop.set()
        await running
        await redis.aclose()
