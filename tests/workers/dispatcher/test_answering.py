"""The dispatcher's consumer-group loop: crashes, claims, dead letters, SIGTERM, expiry.

Real processes where the issue asks for them (``hookbus dispatcher`` killed with SIGKILL or
stopped with SIGTERM), in-process dispatchers elsewhere; always the suite's real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import yaml

from bus.hooks.decisions import Decision
from bus.redis.keys import DISPATCH_GROUP
from bus.stream.protocol import Reply, Request, now_ms
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, Platform, async_wait_for, frozen_during, hookbus_process, logged, rm_rf
from workers.dispatcher import records
from workers.dispatcher.answering import Dispatcher
from workers.dispatcher.outbox import Outbox

DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "slow no",
    }
}


def slow_policy(deadline_s: float, *, notification: str = "sleep 1; echo ok") -> str:
    """PreToolUse: a command hook that denies after 1 s; Notification: a slow command too."""
    return yaml.safe_dump(
        {
            "hookbus": {"deadlineSeconds": deadline_s},
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "Bash",
                        "hooks": [{"type": "command", "command": f"sleep 1; echo '{json.dumps(DENY)}'"}],
                    }
                ],
                "Notification": [{"hooks": [{"type": "command", "command": notification}]}],
            },
        }
    )


def note(session: str = "s-d") -> dict[str, Any]:
    return {"hook_event_name": "Notification", "session_id": session, "message": "hello"}


async def start_dispatcher_process(
    policy_file: Path, redis_url: str, bus: BusProbe, children: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[bytes], str]:
    """``hookbus dispatcher`` as a child process; returns it once its first heartbeat is in Redis."""
    process = hookbus_process(
        "dispatcher",
        "--config",
        str(policy_file),
        "--redis-url",
        redis_url,
        env={"HOOKBUS_CLAIM_IDLE_MS": "200", "HOOKBUS_LOG_LEVEL": "info"},
    )
    children.append(process)
    consumer = f"{socket.gethostname()}-{process.pid}"

    async def beating() -> bool:
        assert process.poll() is None, process.communicate()
        return bool(await bus.redis.hexists(bus.keys.dispatchers, consumer))  # type: ignore[misc]

    await async_wait_for(beating, timeout_s=20)
    return process, consumer


async def pending_for(bus: BusProbe, stream: str, consumer: str) -> list[dict[str, Any]]:
    return [p for p in await bus.pending(stream) if p["consumer"].decode() == consumer]


@contextlib.asynccontextmanager
async def dispatcher(p: Platform, consumer: str, **overrides: Any) -> AsyncIterator[Dispatcher]:
    """An in-process dispatcher with its own settings (e.g. a short claim_idle_ms), counting into ``p.metrics``."""
    settings = dataclasses.replace(p.settings, **{"claim_idle_ms": 200, **overrides})
    worker = Dispatcher(settings, p.policy, p.settings.redis_url or "", consumer=consumer, metrics=p.metrics)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        yield worker
    finally:
        stop.set()
        await task


async def test_killed_dispatcher_work_is_claimed_and_nothing_is_lost(
    platform: Callable[..., Any],
    write_policy: Callable[..., Path],
    redis_url: str,
    bus: BusProbe,
    children: list[subprocess.Popen[bytes]],
) -> None:
    text = slow_policy(0.5)
    async with platform(text, dispatchers=0) as p:
        a, consumer_a = await start_dispatcher_process(write_policy(text, "a.yaml"), redis_url, bus, children)
        started = time.perf_counter()
        blocking = asyncio.create_task(p.post(rm_rf("s-d")))
        recorded = await p.post(note())
        assert recorded.headers["X-Hookbus-Outcome"] == "recorded"
        await async_wait_for(lambda: pending_for(bus, bus.keys.blocking_stream(), consumer_a), timeout_s=5)
        await async_wait_for(lambda: pending_for(bus, bus.keys.events_stream(), consumer_a), timeout_s=5)
        os.kill(a.pid, signal.SIGKILL)
        assert a.wait(timeout=10) == -signal.SIGKILL

        answer = await blocking
        elapsed = time.perf_counter() - started
        assert answer.json() == {}
        assert answer.headers["X-Hookbus-Outcome"] == "fail-open"
        assert elapsed <= 0.5 + 0.5  # deadline + client-side margin (see tests/gateway/test_faults.py)

        async with dispatcher(p, "B"):
            expired = await async_wait_for(lambda: bus.record(answer.headers["X-Hookbus-Event-Id"]), timeout_s=10)
            assert (expired.event, expired.outcome, expired.fail_open, expired.decision) == (
                "PreToolUse",
                "fail-open",
                "timeout",
                "none",
            )
            finished = await async_wait_for(lambda: bus.record(recorded.headers["X-Hookbus-Event-Id"]), timeout_s=10)
            assert (finished.event, finished.outcome) == ("Notification", "recorded")
            assert [(h["type"], h["outcome"]) for h in finished.hooks] == [("command", "ok")]
            await async_wait_for(lambda: _nothing_pending(bus), timeout_s=5)
        assert len(await bus.log()) == 2


async def _nothing_pending(bus: BusProbe) -> bool:
    return not await bus.pending(bus.keys.blocking_stream()) and not await bus.pending(bus.keys.events_stream())


async def test_sigterm_finishes_in_flight_work_and_exits_0(
    platform: Callable[..., Any],
    write_policy: Callable[..., Path],
    redis_url: str,
    bus: BusProbe,
    children: list[subprocess.Popen[bytes]],
) -> None:
    text = slow_policy(5.0)
    async with platform(text, dispatchers=0) as p:
        a, consumer_a = await start_dispatcher_process(write_policy(text, "a.yaml"), redis_url, bus, children)
        blocking = asyncio.create_task(p.post(rm_rf("s-d")))
        await async_wait_for(lambda: pending_for(bus, bus.keys.blocking_stream(), consumer_a), timeout_s=5)
        a.send_signal(signal.SIGTERM)
        answer = await blocking
        assert answer.headers["X-Hookbus-Outcome"] == "decided"
        assert answer.json() == DENY
        _, stderr = a.communicate(timeout=10)
        assert a.returncode == 0, stderr.decode()
        assert b"stopped" in stderr
        record = await async_wait_for(lambda: bus.record(answer.headers["X-Hookbus-Event-Id"]), timeout_s=5)
        assert (record.outcome, record.decision) == ("decided", "deny")
        assert await bus.pending(bus.keys.blocking_stream()) == []
        assert not await bus.redis.hexists(bus.keys.dispatchers, consumer_a)  # type: ignore[misc]


async def test_an_idle_dispatcher_stops_at_once(platform: Callable[..., Any], bus: BusProbe) -> None:
    """Stopping does not wait out the blocked XREADGROUP (CLIENT UNBLOCK wakes it)."""
    async with platform(slow_policy(1.0), dispatchers=0) as p:
        worker = Dispatcher(p.settings, p.policy, p.settings.redis_url or "", consumer="idle", metrics=p.metrics)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))

        async def blocked_in_read() -> bool:
            clients = await bus.redis.client_list()
            return any(c.get("name") == worker.work.reader_name and c.get("cmd") == "xreadgroup" for c in clients)

        await async_wait_for(blocked_in_read, timeout_s=5)
        started = time.perf_counter()
        stop.set()
        await asyncio.wait_for(task, 5)
        assert time.perf_counter() - started < 0.5


async def test_a_dispatcher_stops_when_redis_stops_answering(
    platform: Callable[..., Any], private_redis: EmbeddedRedis
) -> None:
    """A Redis that freezes mid-read does not hold a stopping dispatcher forever: the read gives up
    after its grace and every Redis call of the way out is bounded."""
    async with platform(slow_policy(1.0), on_redis=private_redis.url, dispatchers=0) as p:
        worker = Dispatcher(p.settings, p.policy, private_redis.url, consumer="frozen", metrics=p.metrics)
        stop = asyncio.Event()
        task = asyncio.create_task(worker.run(stop))
        async with frozen_during(private_redis, "xreadgroup", worker.work.reader_name):
            stop.set()
            await asyncio.wait_for(task, 20)


async def test_a_slow_hook_is_not_claimed_from_a_live_dispatcher(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    """A hook running for 5x claim_idle_ms stays with its dispatcher: one run, one delivery, one record."""
    runs = tmp_path / "runs"
    text = slow_policy(5.0, notification=f"echo start >> {runs}; sleep 1; echo end >> {runs}")
    async with platform(text, dispatchers=0) as p, dispatcher(p, "A"), dispatcher(p, "B"):
        response = await p.post(note())
        mid_run = await async_wait_for(lambda: bus.pending(bus.keys.events_stream()), timeout_s=5)
        assert mid_run[0]["times_delivered"] == 1
        record = await async_wait_for(lambda: bus.record(response.headers["X-Hookbus-Event-Id"]), timeout_s=10)
        assert record.outcome == "recorded"
        assert runs.read_text().split() == ["start", "end"]
        assert [r.event_id for r in await bus.log()] == [record.event_id]


async def _ghost_reads(bus: BusProbe, stream: str, *entries: dict[Any, Any]) -> list[bytes]:
    """Append ``entries`` and read them as a consumer that then dies (they stay pending)."""
    with contextlib.suppress(Exception):
        await bus.redis.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
    ids: list[bytes] = [await bus.redis.xadd(stream, fields) for fields in entries]
    await bus.redis.xreadgroup(DISPATCH_GROUP, "ghost", {stream: ">"})
    return ids


def _request(event: str = "Notification", session: str = "s-g", **fields: Any) -> dict[Any, Any]:
    payload = json.dumps({"hook_event_name": event, "session_id": session}).encode()
    request = Request(
        event_id=f"evt-{session}", event=event, tenant="default", payload=payload, received_ms=now_ms(), **fields
    )
    return dict(request.encode())


async def test_entries_delivered_too_often_are_dead_lettered(platform: Callable[..., Any], bus: BusProbe) -> None:
    stream = bus.keys.events_stream()
    async with platform(slow_policy(1.0, notification="echo ok"), dispatchers=0) as p:
        poison, healthy = await _ghost_reads(bus, stream, _request(session="poison"), _request(session="ok"))
        await bus.redis.xclaim(stream, DISPATCH_GROUP, "ghost-2", 0, [poison])  # a second delivery
        async with dispatcher(p, "B", max_deliveries=2):
            dead = await async_wait_for(bus.dead, timeout_s=5)
            record = await async_wait_for(lambda: bus.record("evt-ok"), timeout_s=5)
            await async_wait_for(lambda: _nothing_pending(bus), timeout_s=5)
    assert len(dead) == 1
    assert dead[0][b"id"] == b"evt-poison"
    assert dead[0][b"_stream"] == stream.encode()
    assert dead[0][b"_id"] == poison
    assert b"delivered more than 2 times" in dead[0][b"_why"]
    assert record.outcome == "recorded"  # delivered twice only: processed, not dead
    assert await bus.record("evt-poison") is None
    assert healthy != poison
    assert p.metrics.value("hookbus_dead_letters_total", stream="events") == 1


async def test_malformed_entries_are_dead_lettered(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(slow_policy(1.0, notification="echo ok")) as p:
        await async_wait_for(lambda: bus.redis.exists(bus.keys.blocking_stream()), timeout_s=5)  # group ready
        await bus.redis.xadd(bus.keys.blocking_stream(), {"nonsense": "1"})
        await bus.redis.xadd(bus.keys.events_stream(), {b"\xff\xfe": b"\x00", b"id": b"\xff"})  # not even UTF-8
        dead = await async_wait_for(lambda: _dead_count(bus, 2), timeout_s=5)
        assert all(b"malformed" in entry[b"_why"] for entry in dead)
        assert {entry[b"_stream"] for entry in dead} == {
            bus.keys.blocking_stream().encode(),
            bus.keys.events_stream().encode(),
        }
        await async_wait_for(lambda: _nothing_pending(bus), timeout_s=5)
        assert (await p.post(note())).status_code == 200  # and the dispatcher carries on
        assert await async_wait_for(bus.log, timeout_s=5)


async def _dead_count(bus: BusProbe, count: int) -> list[dict[bytes, bytes]] | None:
    dead = await bus.dead()
    return dead if len(dead) >= count else None


async def test_an_entry_trimmed_while_pending_does_not_wedge_recovery(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    stream = bus.keys.events_stream()
    async with platform(slow_policy(1.0, notification="echo ok"), dispatchers=0) as p:
        gone, _ = await _ghost_reads(bus, stream, _request(session="gone"), _request(session="kept"))
        await bus.redis.xdel(stream, gone)
        async with dispatcher(p, "B"):
            record = await async_wait_for(lambda: bus.record("evt-kept"), timeout_s=5)
            await async_wait_for(lambda: _nothing_pending(bus), timeout_s=5)
    assert record.outcome == "recorded"


async def test_expired_blocking_entries_are_logged_not_evaluated(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    text = yaml.safe_dump({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": f"touch {ran}"}]}]}})
    async with platform(text) as p:
        past = now_ms() - 1000
        fields = _request("PreToolUse", "late", reply_to="hookbus:reply:gone", deadline_ms=past)
        fields["c"] = b'[{"additionalContext":"taken by the gateway"}]'  # context its append took
        await bus.redis.xadd(bus.keys.blocking_stream(), fields)
        record = await async_wait_for(lambda: bus.record("evt-late"), timeout_s=5)
        await async_wait_for(lambda: _nothing_pending(bus), timeout_s=5)
    assert (record.outcome, record.fail_open, record.decision, record.hooks) == ("fail-open", "timeout", "none", [])
    pending = await bus.redis.lrange(bus.keys.pending_context("default", "late"), 0, -1)  # type: ignore[misc]
    assert pending == [b'{"additionalContext":"taken by the gateway"}']  # back for the session's next turn
    assert p.metrics.value("hookbus_expired_total", event="PreToolUse") == 1
    assert not ran.exists()


async def test_two_dispatchers_share_the_group_and_handle_each_event_once(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    text = yaml.safe_dump(
        {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm *)"]}]}]}}
    )
    async with platform(text, dispatchers=2) as p:
        answers = await asyncio.gather(
            *[p.post(rm_rf(f"s-{i}")) for i in range(20)], *[p.post(note(f"n-{i}")) for i in range(20)]
        )
        assert [a.headers["X-Hookbus-Outcome"] for a in answers] == ["decided"] * 20 + ["recorded"] * 20
        assert all(a.json()["hookSpecificOutput"]["permissionDecision"] == "deny" for a in answers[:20])
        ids = {a.headers["X-Hookbus-Event-Id"] for a in answers}
        await async_wait_for(lambda: _logged(bus, 40), timeout_s=10)
        assert sorted(r.event_id for r in await bus.log()) == sorted(ids)
        await async_wait_for(lambda: _nothing_pending(bus), timeout_s=5)


async def _logged(bus: BusProbe, count: int) -> bool:
    return len(await bus.log()) >= count


async def test_a_killed_dispatcher_takes_its_running_hooks_with_it(
    platform: Callable[..., Any],
    write_policy: Callable[..., Path],
    redis_url: str,
    bus: BusProbe,
    children: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "hook.pid"
    text = yaml.safe_dump(
        {
            "hookbus": {"deadlineSeconds": 0.5},
            "hooks": {
                "PreToolUse": [{"hooks": [{"type": "command", "command": f"echo $$ > {pid_file}; exec sleep 30"}]}]
            },
        }
    )
    async with platform(text, dispatchers=0) as p:
        a, _ = await start_dispatcher_process(write_policy(text, "a.yaml"), redis_url, bus, children)
        blocking = asyncio.create_task(p.post(rm_rf("s-d")))
        hook_pid = int(await async_wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10))
        os.kill(a.pid, signal.SIGKILL)
        a.wait(timeout=10)

        def gone() -> bool:
            try:
                os.kill(hook_pid, 0)
            except ProcessLookupError:
                return True
            # A zombie waiting for init to reap it is gone too.
            return Path(f"/proc/{hook_pid}/stat").read_text().split()[2] == "Z"

        await async_wait_for(gone, timeout_s=10)
        assert (await blocking).headers["X-Hookbus-Outcome"] == "fail-open"


async def test_settled_entries_leave_the_work_streams(platform: Callable[..., Any], bus: BusProbe) -> None:
    text = yaml.safe_dump(
        {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm *)"]}]}]}}
    )
    async with platform(text) as p:
        await asyncio.gather(
            *[p.post(rm_rf(f"t-{i}")) for i in range(10)], *[p.post(note(f"tn-{i}")) for i in range(10)]
        )
        await async_wait_for(lambda: _logged(bus, 20), timeout_s=10)

        async def drained() -> bool:
            lengths = [await bus.redis.xlen(s) for s in (bus.keys.blocking_stream(), bus.keys.events_stream())]
            return lengths == [0, 0]

        # The work streams are queues: their settled entries are trimmed, the log keeps the records.
        await async_wait_for(drained, timeout_s=10)
        assert len(await bus.log()) == 20


async def test_a_large_blocking_event_is_answered_before_its_record_is_masked(
    platform: Callable[..., Any], bus: BusProbe, monkeypatch: Any
) -> None:
    release = threading.Event()
    masked = threading.Event()
    held_masking = records._masked

    def held(budget_s: float, *args: Any) -> Any:
        release.wait(30)  # fault injection: the masking thread is held until the agent has its answer
        try:
            return held_masking(budget_s, *args)
        finally:
            masked.set()

    monkeypatch.setattr(records, "_masked", held)
    monkeypatch.setattr(records, "_MASK_BUDGET_S", 30.0)  # the masking is not cut short: half the deadline
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    large = {
        "hook_event_name": "PreToolUse",
        "session_id": "s-large",
        "tool_name": "Write",
        "tool_input": {"file_path": ".env", "content": f"TOKEN={secret}\n" + "x" * (80 << 10)},
    }
    policy = 'hookbus: {deadlineSeconds: 5.0}\nhooks:\n  PreToolUse:\n    - hooks: [{type: rule, deny: ["Write"]}]\n'
    async with platform(policy) as p:
        try:
            response = await p.post(large)
            answered_while_held = not masked.is_set()
        finally:
            release.set()
        record = await logged(bus, response)
    assert response.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert response.headers["X-Hookbus-Outcome"] == "decided"
    assert answered_while_held
    assert (record.outcome, record.fail_open, record.decision) == ("decided", "", "deny")
    stored = json.loads(record.payload)
    assert "hookbus_note" not in stored and stored["tool_input"]["file_path"] == ".env"  # masked, not a note
    assert secret not in record.payload.decode()


async def test_an_answered_event_redelivered_past_its_deadline_is_logged_as_answered(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    payload = json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "s-answered",
            "tool_name": "Write",
            "tool_input": {"file_path": ".env", "content": "x" * (80 << 10)},
        }
    ).encode()
    in_time = Request(
        event_id="evt-answered",
        event="PreToolUse",
        tenant="default",
        payload=payload,
        received_ms=now_ms(),
        deadline_ms=now_ms() + 60_000,
        reply_to=f"{bus.keys.prefix}reply:gone",
    )
    async with platform("hooks: {}\n") as p:  # nothing to run: a re-evaluation would decide nothing
        outbox = Outbox(bus.redis, bus.keys)
        # A dispatcher answered it early, then stopped before its settle; the entry comes back
        # to another dispatcher after the deadline (not evaluated again).
        assert await outbox.answer(in_time, Reply(in_time.event_id, DENY, Decision.DENY))
        late = dataclasses.replace(in_time, deadline_ms=now_ms() - 1000)
        await bus.redis.xadd(bus.keys.blocking_stream(), late.encode())  # type: ignore[arg-type]
        record = await async_wait_for(lambda: bus.record("evt-answered"), timeout_s=5)
        await async_wait_for(lambda: _nothing_pending(bus), timeout_s=5)
        assert p.metrics.value("hookbus_expired_total", event="PreToolUse") == 1
    assert (record.outcome, record.fail_open, record.decision) == ("decided", "", "deny")
    assert record.output == DENY
    assert len([r for r in await bus.log() if r.event_id == "evt-answered"]) == 1
