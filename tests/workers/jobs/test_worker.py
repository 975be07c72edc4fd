"""Async hooks: queued on arq by the dispatcher, run by the worker, context delivered next turn."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, Platform, pre_tool_use
from workers.jobs import deadletters
from workers.jobs import enqueue as queue
from workers.jobs.worker import build_worker

CONTEXT = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "lint: 2 warnings"}}


def policy(tmp_path: Path, command: str) -> str:
    return f"""
hooks:
  PreToolUse:
    - hooks:
        - {{type: rule, deny: ['Bash(sudo *)']}}
  PostToolUse:
    - matcher: Edit
      hooks:
        - type: command
          async: true
          command: {json.dumps(command)}
"""


def post_tool_use(session: str = "s-async") -> dict[str, Any]:
    return {
        "hook_event_name": "PostToolUse",
        "session_id": session,
        "tool_name": "Edit",
        "tool_input": {"file_path": "/repo/a.py"},
        "tool_response": {"success": True},
    }


async def run_worker(p: Platform) -> None:
    """Run a worker on the platform's queue until it is empty, counting into the platform's metrics."""
    worker = build_worker(p.settings, p.policy, p.settings.redis_url or "", burst=True, metrics=p.metrics)
    try:
        await worker.async_run()
    finally:
        await worker.close()


async def test_async_hook_runs_on_the_worker_and_its_context_arrives_next_turn(
    platform: Callable[..., Any], tmp_path: Path, bus: BusProbe
) -> None:
    ran = tmp_path / "ran.txt"
    command = f"cat >/dev/null; echo ran >> {ran}; echo '{json.dumps(CONTEXT)}'"
    # The janitor every 15 s, not every 75 ms: it trims acknowledged work-stream entries, and
    # the test reads one back.
    async with platform(policy(tmp_path, command), claim_idle_ms=60_000) as p:
        answer = await p.post(post_tool_use())
        assert answer.json() == {}  # an async hook's decision fields have no effect
        assert not ran.exists()  # fire and forget: the answer did not wait for it
        await run_worker(p)
        assert ran.read_text() == "ran\n"
        nxt = (await p.post(pre_tool_use("ls", "s-async", cwd=None))).json()
        assert nxt["hookSpecificOutput"]["additionalContext"] == "lint: 2 warnings"
        ((_, entry),) = await bus.redis.xrevrange(bus.keys.blocking_stream(), count=1)
        assert b"lint: 2 warnings" in entry[b"c"]  # the gateway took it into the event as it appended it
        again = (await p.post(pre_tool_use("ls", "s-async", cwd=None))).json()
        assert "additionalContext" not in again.get("hookSpecificOutput", {})  # delivered once
        other = (await p.post(pre_tool_use("ls", "another-session", cwd=None))).json()
        assert other == {}
    assert p.metrics.value("hookbus_async_jobs_total", status="queued") == 1
    assert p.metrics.value("hookbus_async_jobs_total", status="succeeded") == 1


async def test_a_failing_async_hook_is_retried_then_dead(
    platform: Callable[..., Any], tmp_path: Path, bus: BusProbe
) -> None:
    tries = tmp_path / "tries.txt"
    fast = "hookbus: {async: {maxTries: 3, retryDelaySeconds: 0.01}}\n"
    async with platform(fast + policy(tmp_path, f"cat >/dev/null; echo x >> {tries}; echo oops >&2; exit 1")) as p:
        await p.post(post_tool_use())
        await run_worker(p)
    letters = [letter async for letter in deadletters.scan(bus.redis, bus.keys)]
    assert [(letter.why, len(letter.attempts), letter.reason) for letter in letters] == [
        ("out_of_tries", 3, "Failed with non-blocking status code: oops")
    ]
    assert [a.number for a in letters[0].attempts] == [1, 2, 3]
    assert not await bus.redis.exists(bus.keys.async_attempts(letters[0].job_id))  # the tries moved into the letter
    assert tries.read_text().count("x") == 3
    assert p.metrics.value("hookbus_async_jobs_total", status="retried") == 2
    assert p.metrics.value("hookbus_async_jobs_total", status="dead") == 1
    assert p.metrics.value("hookbus_async_jobs_total", status="succeeded") == 0


async def test_on_a_queue_redis_of_its_own_a_redelivered_event_queues_its_async_hook_once(
    platform: Callable[..., Any], tmp_path: Path
) -> None:
    async with platform(policy(tmp_path, "true")) as p:
        arq = queue.arq_pool(p.settings.redis_url)
        try:
            m = Metrics()
            jobs = queue.JobQueue(arq, p.settings.keys, metrics=m)
            entry = p.policy.entries("PostToolUse")[0]
            request = Request("ev-1", "PostToolUse", "default", json.dumps(post_tool_use()).encode(), now_ms())
            job = queue.prepare_job(request, entry.handler_id, 3600, 100)
            await jobs.put(request, [job])
            await jobs.put(request, [job])  # the event again, before its job ran
            assert await arq.zcard(p.settings.keys.arq_queue) == 1
            assert m.value("hookbus_async_jobs_total", status="queued") == 1
        finally:
            await arq.aclose()
