"""hookbus on a real Redis Cluster: partitions spread over the masters, decisions survive a failover.

The async queue runs on the tests' single Redis (arq does not support a cluster), as
``HOOKBUS_QUEUE_REDIS_URL`` would put it in production.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import httpx
import pytest
import redis as redis_sync

from bus.redis.connection import connect
from bus.redis.keys import DISPATCH_GROUP
from bus.redis.urls import cluster_url
from gateway.replies import sharded
from hookbus.audit.verify import check_live
from hookbus.platform.redis_server import free_port
from tests.conftest import async_wait_for, hookbus_process, policy_yaml, pre_tool_use, ready, rm_rf, wait_for
from tests.redis_cluster import LocalCluster

DENY_RM = {
    "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"], "reason": "no rm -rf"}]}]
}


def decision(answer: Any) -> str | None:
    found = answer.json().get("hookSpecificOutput", {}).get("permissionDecision")
    return str(found) if found is not None else None


def _published(cluster: LocalCluster) -> dict[str, int]:
    """PUBLISH and SPUBLISH calls so far, summed over the cluster's masters."""
    published = {"publish": 0, "spublish": 0}
    for master in cluster.masters():
        node = redis_sync.Redis.from_url(master.url)
        stats = cast(dict[str, Any], node.info("commandstats"))
        node.close()
        for command in published:
            published[command] += int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
    return published


@pytest.mark.timeout(60)
async def test_a_decision_round_trip_with_four_partitions(
    platform: Callable[..., Any], redis_cluster: LocalCluster, redis_cluster_url: str, redis_url: str
) -> None:
    policy = policy_yaml(DENY_RM, streams={"partitions": 4})
    published_before = _published(redis_cluster)  # the cluster is shared: earlier tests published too
    async with platform(policy, on_redis=cluster_url(redis_cluster_url), queue_redis_url=redis_url) as p:
        sessions = [f"cluster-{i}" for i in range(40)]
        answers = await asyncio.gather(*(p.post(rm_rf(s)) for s in sessions))
        assert [decision(a) for a in answers] == ["deny"] * 40
        assert {a.headers["X-Hookbus-Outcome"] for a in answers} == {"decided"}
        allowed = await p.post(pre_tool_use("ls", "cluster-0"))
        assert decision(allowed) != "deny" and allowed.headers["X-Hookbus-Outcome"] == "decided"

        keys = p.settings.keys.with_partitions(4)
        # Every partition's stream, log and group live in its slot; together they reach every master.
        holders = {redis_cluster.master_for_key(keys.decision_log(part)).port for part in range(4)}
        assert holders == {m.port for m in redis_cluster.masters()}
        per_master = redis_cluster.keys_per_master("hookbus:{p*}:decisions")
        assert all(count >= 1 for count in per_master.values()), per_master
        # Replies stay in their shard (SPUBLISH), never copied to every node (PUBLISH): at least one
        # message per partition (the replies a settle call sends one gateway share one message).
        published = {command: calls - published_before[command] for command, calls in _published(redis_cluster).items()}
        assert published["publish"] == 0 and published["spublish"] >= 4, published
        redis = connect(cluster_url(redis_cluster_url))
        try:
            assert sum([await redis.xlen(keys.decision_log(part)) for part in range(4)]) == 41
            for part in range(4):
                assert (await redis.xpending(keys.blocking_stream(part), DISPATCH_GROUP))["pending"] == 0
            # Each partition's records are linked into its chain, whose head lives in its slot.
            check, _ = await check_live(cluster_url(redis_cluster_url), p.settings.keys)
            assert check.first_break() is None and check.checked == 41 and len(check.partitions) == 4
        finally:
            await redis.aclose()


@pytest.mark.timeout(120)
async def test_decisions_resume_after_a_master_fails_over(
    platform: Callable[..., Any], redis_cluster: LocalCluster, redis_cluster_url: str, redis_url: str
) -> None:
    deadline_s = 1.0
    policy = policy_yaml(DENY_RM, streams={"partitions": 4}, deadlineSeconds=deadline_s)
    async with platform(policy, on_redis=cluster_url(redis_cluster_url), queue_redis_url=redis_url) as p:
        keys = p.settings.keys.with_partitions(4)
        victim = redis_cluster.master_for_key(keys.blocking_stream(0)).port
        sessions = [s for s in (f"fo-{i}" for i in range(400)) if keys.partition_of(s) == 0][:5]
        elsewhere = [
            part for part in range(4) if redis_cluster.master_for_key(keys.blocking_stream(part)).port != victim
        ]
        others = [s for s in (f"fo-{i}" for i in range(400)) if keys.partition_of(s) in elsewhere][:5]
        answers: list[tuple[str, float, Any]] = []
        stop = asyncio.Event()

        async def agent(session: str) -> None:
            while not stop.is_set():
                started = time.monotonic()
                answer = await p.post(rm_rf(session))
                answers.append((session, time.monotonic() - started, answer))
                await asyncio.sleep(0.02)  # an agent's pace, not synchronisation

        agents = [asyncio.create_task(agent(s)) for s in sessions + others]
        await async_wait_for(lambda: len(answers) >= 50, 20)
        promoted = await asyncio.to_thread(redis_cluster.kill_master, victim)
        try:
            before = len(answers)
            # Decisions come back for the failed-over partition without restarting anything.
            await async_wait_for(
                lambda: any(
                    s in sessions and a.headers["X-Hookbus-Outcome"] == "decided" for s, _, a in answers[before:]
                ),
                60,
            )
        finally:
            stop.set()
            await asyncio.gather(*agents)
            # Not from a worker thread: a node dies with the thread that started it (PDEATHSIG).
            redis_cluster.restart(victim)
        assert promoted != victim
        for session, took_s, answer in answers:
            assert answer.status_code == 200
            outcome = answer.headers["X-Hookbus-Outcome"]
            assert outcome in ("decided", "fail-open"), outcome
            if outcome == "decided":
                assert decision(answer) == "deny", session
            assert took_s < deadline_s + 1.0, (session, took_s)  # the client-side margin: the gateway's deadline
        # The partitions of the masters that stayed up never stalled (the nodes serve their slots
        # while another master's fail over: cluster-require-full-coverage no).
        elsewhere_outcomes = {a.headers["X-Hookbus-Outcome"] for s, _, a in answers if s in others}
        assert elsewhere_outcomes == {"decided"}


@pytest.mark.timeout(90)
def test_roles_run_on_a_cluster_with_the_queue_on_its_own_redis(
    redis_cluster_url: str, redis_url: str, write_policy: Callable[..., Any], tmp_path: Any, children: list[Any]
) -> None:
    """Real gateway, dispatcher and worker processes: a decision, an async hook run by the worker
    from the queue Redis, and its context delivered on the session's next turn from the cluster."""
    marker = tmp_path / "ran"
    output = '{"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "seen by the worker"}}'
    policy = write_policy(
        policy_yaml(
            {
                **DENY_RM,
                "PostToolUse": [
                    {"hooks": [{"type": "command", "async": True, "command": f"touch {marker}; echo '{output}'"}]}
                ],
                "UserPromptSubmit": [{"hooks": [{"type": "rule", "allow": ["*"]}]}],
            },
            streams={"partitions": 4},
        )
    )
    port = free_port()
    env = {
        "HOOKBUS_REDIS_URL": redis_cluster_url,
        "HOOKBUS_REDIS_CLUSTER": "1",
        "HOOKBUS_QUEUE_REDIS_URL": redis_url,
        "HOOKBUS_CONFIG": str(policy),
        "HOOKBUS_PORT": str(port),
    }
    children.extend(hookbus_process(role, env=env) for role in ("gateway", "dispatcher", "worker"))
    wait_for(lambda: ready(port), 30)
    url = f"http://127.0.0.1:{port}/v1/hooks"
    denied = httpx.post(url, json=rm_rf("roles-1"), timeout=10)
    assert decision(denied) == "deny"
    done = httpx.post(
        url,
        timeout=10,
        json={
            "hook_event_name": "PostToolUse",
            "session_id": "roles-1",
            "tool_name": "Bash",
            "tool_input": {"command": "ls"},
            "tool_response": {"stdout": ""},
        },
    )
    assert done.headers["X-Hookbus-Outcome"] == "decided"  # PostToolUse may block: decided at once (async hook)
    wait_for(marker.exists, 30)

    def context() -> str:
        answer = httpx.post(
            url, timeout=10, json={"hook_event_name": "UserPromptSubmit", "session_id": "roles-1", "prompt": "next"}
        ).json()
        return str(answer.get("hookSpecificOutput", {}).get("additionalContext", ""))

    assert wait_for(lambda: "seen by the worker" in context(), 30)
    cluster = redis_sync.RedisCluster.from_url(redis_cluster_url)
    try:
        assert not cluster.keys("arq:*")  # the queue lives on its own Redis
    finally:
        cluster.close()


@pytest.mark.timeout(60)
async def test_reply_subscriptions_survive_idle_pings(
    platform: Callable[..., Any],
    redis_cluster: LocalCluster,
    redis_cluster_url: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An idle gateway pings its shard subscriptions and keeps them (a read cancelled on a timer
    would drop the connection, and the ping would come back on a new one, unsubscribed)."""
    monkeypatch.setattr(sharded, "PING_EVERY_S", 0.1)
    policy = policy_yaml(DENY_RM, streams={"partitions": 4})
    async with platform(policy, on_redis=cluster_url(redis_cluster_url), queue_redis_url=redis_url) as p:
        masters = [redis_sync.Redis.from_url(master.url) for master in redis_cluster.masters()]

        def pings() -> int:
            stats = [cast(dict[str, Any], m.info("commandstats")) for m in masters]
            return sum(int(s.get("cmdstat_ping", {}).get("calls", 0)) for s in stats)

        def shard_channels() -> int:
            answers: list[list[bytes]] = [
                m.execute_command("PUBSUB", "SHARDCHANNELS")  # type: ignore[no-untyped-call]
                for m in masters
            ]
            return sum(len(answer) for answer in answers)

        try:
            await async_wait_for(lambda: shard_channels() == 4, 10)
            before = pings()
            await async_wait_for(lambda: pings() >= before + 12, 20)  # three pings per subscription at least
            assert shard_channels() == 4
            answer = await p.post(rm_rf("idle-1"))
            assert answer.headers["X-Hookbus-Outcome"] == "decided" and decision(answer) == "deny"
        finally:
            for master in masters:
                master.close()


@pytest.mark.timeout(60)
async def test_large_inputs_are_answered_before_their_records_on_every_partition(
    platform: Callable[..., Any], redis_cluster_url: str, redis_url: str
) -> None:
    policy = policy_yaml({"PreToolUse": [{"hooks": [{"type": "rule", "deny": ["Write"]}]}]}, streams={"partitions": 4})

    def write(session: str) -> dict[str, Any]:
        content = "x" * (80 << 10)  # its record is masked in a thread: answered first (the ANSWER script)
        return {
            **pre_tool_use("", session),
            "tool_name": "Write",
            "tool_input": {"file_path": ".env", "content": content},
        }

    async with platform(policy, on_redis=cluster_url(redis_cluster_url), queue_redis_url=redis_url) as p:
        answers = await asyncio.gather(*(p.post(write(f"large-{i}")) for i in range(8)))
        assert [decision(a) for a in answers] == ["deny"] * 8
        assert {a.headers["X-Hookbus-Outcome"] for a in answers} == {"decided"}
        assert p.metrics.value("hookbus_redis_errors_total", op="settle") == 0  # ANSWER ran in its slot
        keys = p.settings.keys.with_partitions(4)
        redis = connect(cluster_url(redis_cluster_url))
        try:

            async def logged() -> int | None:
                count = sum([await redis.xlen(keys.decision_log(part)) for part in range(4)])
                return count if count >= 8 else None

            assert await async_wait_for(logged, timeout_s=10) == 8
            for part in range(4):
                for _, fields in await redis.xrange(keys.decision_log(part)):
                    assert fields[b"o"] == b"decided"
            check, _ = await check_live(cluster_url(redis_cluster_url), p.settings.keys)  # answered, then linked once
            assert check.first_break() is None and check.checked == 8
        finally:
            await redis.aclose()
