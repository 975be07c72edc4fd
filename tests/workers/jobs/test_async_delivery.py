"""Async deliveries end to end: a real gateway and dispatcher, a real ``hookbus worker`` process,
a real HTTP sink on 127.0.0.1. Retries and their delays, dead letters and their replay, one
run per event however often it is settled, nothing left behind by a finished job, a SIGKILLed
worker, signatures, the queue-depth limit.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions
from standardwebhooks import Webhook

from bus.errors import BusUnavailable
from bus.stream.protocol import Request, now_ms
from tests.conftest import BusProbe, async_wait_for, policy_yaml, run_hookbus
from tests.loopback import LoopbackServer, hang
from tests.workers.jobs.async_harness import Sink, drained, notification, sink_policy, start_worker
from workers.dispatcher.outbox import Outbox, Settle
from workers.jobs import deadletters
from workers.jobs.enqueue import arq_pool, prepare_job, put_job, replay_job_id
from workers.outbound.webhooks import webhook_id

SECRET = "whsec_" + base64.b64encode(b"hookbus-test-secret-32-bytes-ok!").decode()


def only_handler(p: Any) -> str:
    return str(p.policy.entries("Notification")[0].handler_id)


async def job_keys(bus: BusProbe) -> list[bytes]:
    """The keys arq and hookbus keep per job: a finished (or dead-lettered) job leaves none behind
    (no result either: ``keepResultSeconds`` is 0 by default)."""
    return [
        key
        for pattern in ("arq:job:*", "arq:retry:*", "arq:in-progress:*", "arq:result:*", bus.keys.async_attempts("*"))
        async for key in bus.redis.scan_iter(match=pattern)
    ]


async def no_job_keys(bus: BusProbe) -> bool:
    return not await job_keys(bus)


async def test_a_sink_failing_twice_gets_it_on_the_third_try_with_growing_delays_and_one_webhook_id(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    async with Sink(plan=[503, 503]) as sink:
        text = sink_policy(sink.url(), retryDelaySeconds=0.4, maxTries=5)
        async with platform(text) as p:
            worker = await start_worker(bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log")
            try:
                answer = await p.post(notification())
                assert answer.status_code == 200
                await async_wait_for(lambda: len(sink.hits) == 3, timeout_s=20)
                await async_wait_for(lambda: drained(bus.redis), timeout_s=10)
                samples = await worker.metrics()
            finally:
                worker.stop()
    event_id = answer.headers["X-Hookbus-Event-Id"]
    assert {r.headers["webhook-id"] for r in sink.requests} == {webhook_id(event_id, only_handler(p))}
    assert [json.loads(r.body) for r in sink.requests] == [notification()] * 3
    # Try n + 1 is due no sooner than half of 0.4 s * 2**(n - 1) after try n (equal jitter): the floors double.
    first, second = sink.gaps_s()
    assert first >= 0.2 and second >= 0.4
    assert await deadletters.size(bus.redis, bus.keys) == 0
    await async_wait_for(lambda: no_job_keys(bus))  # its tries, arq's retry counter and job went with the job
    assert samples[("hookbus_async_attempts_count", frozenset())] == 1
    assert samples[("hookbus_async_attempts_bucket", frozenset({("le", "2.0")}))] == 0
    assert samples[("hookbus_async_attempts_bucket", frozenset({("le", "3.0")}))] == 1
    assert samples[("hookbus_async_jobs_total", frozenset({("status", "retried")}))] == 2
    assert samples[("hookbus_async_job_duration_seconds_count", frozenset({("type", "http")}))] == 3


async def test_a_sink_that_always_fails_is_dead_lettered_after_max_tries_and_replay_delivers_it_once_fixed(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    async with Sink(default=500) as sink:
        text = sink_policy(sink.url(), handler={"maxTries": 3}, retryDelaySeconds=0.05)
        async with platform(text) as p:
            worker = await start_worker(bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log")
            try:
                answer = await p.post(notification(session="s-dead"))
                await async_wait_for(lambda: deadletters.size(bus.redis, bus.keys), timeout_s=20)
                letters = [letter async for letter in deadletters.scan(bus.redis, bus.keys)]
                assert len(sink.hits) == 3
                [letter] = letters
                assert (letter.why, letter.event, letter.session_id, letter.handler_type) == (
                    "out_of_tries",
                    "Notification",
                    "s-dead",
                    "http",
                )
                assert [(a.number, a.outcome, a.retryable) for a in letter.attempts] == [
                    (1, "error", True),
                    (2, "error", True),
                    (3, "error", True),
                ]
                assert all("HTTP 500" in a.error for a in letter.attempts)
                assert [a.at_ms for a in letter.attempts] == sorted(a.at_ms for a in letter.attempts)
                assert json.loads(letter.payload) == notification(session="s-dead")

                listing = run_hookbus("dlq", "list", "--redis-url", p.settings.redis_url or "")
                assert listing.returncode == 0, listing.stderr
                assert letter.entry_id in listing.stdout and "out_of_tries" in listing.stdout
                shown = run_hookbus("dlq", "show", letter.entry_id, "--redis-url", p.settings.redis_url or "")
                assert json.loads(shown.stdout)["attempts"][2]["try"] == 3

                sink.default = 200  # the sink is fixed
                replayed = run_hookbus("dlq", "replay", letter.entry_id, "--redis-url", p.settings.redis_url or "")
                assert replayed.returncode == 0, replayed.stderr
                assert replay_job_id(letter.job_id, 1) in replayed.stdout
                await async_wait_for(lambda: len(sink.hits) == 4, timeout_s=20)
                await async_wait_for(lambda: drained(bus.redis), timeout_s=10)
            finally:
                worker.stop()
    assert await deadletters.size(bus.redis, bus.keys) == 0  # replayed letters leave the stream
    await async_wait_for(lambda: no_job_keys(bus))  # neither the dead job nor its replay left anything
    ids = {r.headers["webhook-id"] for r in sink.requests}
    assert ids == {webhook_id(answer.headers["X-Hookbus-Event-Id"], only_handler(p))}  # the replay included


async def test_a_sink_that_never_answers_times_out_at_the_hook_timeout_and_is_dead_lettered(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    # The worker sets no timer of its own over an http hook: the request's deadline must end the try.
    async with LoopbackServer(hang) as silent:
        text = sink_policy(silent.url(), handler={"timeout": 0.3, "maxTries": 2}, retryDelaySeconds=0.05)
        async with platform(text) as p:
            worker = await start_worker(bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log")
            try:
                await p.post(notification(session="s-silent"))
                await async_wait_for(lambda: deadletters.size(bus.redis, bus.keys), timeout_s=20)
            finally:
                worker.stop()
        [letter] = [letter async for letter in deadletters.scan(bus.redis, bus.keys)]
        assert len(silent.requests) == 2
    assert [(a.number, a.outcome, a.retryable) for a in letter.attempts] == [(1, "timeout", True), (2, "timeout", True)]
    assert all("within 0.3s" in a.error for a in letter.attempts)


async def test_4xx_is_not_retried_and_429_waits_for_retry_after(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    async with Sink(default=404) as refusing, Sink(plan=[429], headers={"Retry-After": "1"}) as busy:
        hooks = {
            "Notification": [
                {
                    "hooks": [
                        {"type": "http", "url": refusing.url(), "async": True, "timeout": 5},
                        {"type": "http", "url": busy.url(), "async": True, "timeout": 5},
                    ]
                }
            ]
        }
        text = policy_yaml(hooks, http={"allowedNetworks": ["127.0.0.0/8"]}, **{"async": {"retryDelaySeconds": 0.05}})
        async with platform(text) as p:
            worker = await start_worker(bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log")
            try:
                await p.post(notification())
                await async_wait_for(lambda: len(busy.hits) == 2, timeout_s=20)
                await async_wait_for(lambda: drained(bus.redis), timeout_s=10)
            finally:
                worker.stop()
    assert len(refusing.hits) == 1  # a 404 would be refused again: no retry
    [letter] = [letter async for letter in deadletters.scan(bus.redis, bus.keys)]
    assert letter.why == "not_retryable" and "HTTP 404" in letter.reason and len(letter.attempts) == 1
    assert busy.gaps_s()[0] >= 1.0  # Retry-After: 1, far above retryDelaySeconds


async def test_an_event_settled_again_runs_its_async_hook_once_with_no_result_kept(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    async with Sink() as sink:
        async with platform(sink_policy(sink.url())) as p:
            answer = await p.post(notification())  # the dispatcher settles it: record, job, acknowledgement
            event_id = answer.headers["X-Hookbus-Event-Id"]
            record = await async_wait_for(lambda: bus.record(event_id))
            request = Request(event_id, "Notification", "default", json.dumps(notification()).encode(), now_ms())
            job = prepare_job(request, only_handler(p), 3600, 100)
            again = Outbox(bus.redis, p.settings.keys, metrics=p.metrics)  # another dispatcher, given the entry again
            await again.start()
            try:

                async def settle_again() -> None:
                    again.settle(Settle(f"{bus.keys.prefix}redelivered", b"0-1", request, record, None, 1000, [job]))
                    await again.flushed()

                await settle_again()  # before the job ran
                assert await bus.redis.zcard(bus.keys.arq_queue) == 1
                worker = await start_worker(
                    bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log"
                )
                try:
                    await async_wait_for(lambda: len(sink.hits) == 1, timeout_s=20)
                    await async_wait_for(lambda: drained(bus.redis), timeout_s=10)
                    await async_wait_for(lambda: no_job_keys(bus))  # no result kept to refuse the job id ...
                    await settle_again()  # ... yet a settle after the run queues nothing either
                    assert await bus.redis.zcard(bus.keys.arq_queue) == 0
                finally:
                    worker.stop()
            finally:
                await again.stop()
    assert len(sink.hits) == 1
    assert len([r for r in await bus.log() if r.event_id == event_id]) == 1


@pytest.mark.timeout(90)
async def test_a_sigkilled_workers_job_runs_again_and_the_receiver_deduplicates(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    seen: set[str] = set()
    processed: list[str] = []
    release = [False]

    async with Sink() as sink:
        original = sink.respond

        async def once_released(server: Any, request: Any, writer: Any) -> None:
            if not release[0]:  # the first delivery hangs until its worker is killed
                sink.hits.append((0.0, request))
                await server.stopping.wait()
                return
            if request.headers["webhook-id"] not in seen:  # what a receiver does with webhook-id
                seen.add(request.headers["webhook-id"])
                processed.append(request.headers["webhook-id"])
            await original(server, request, writer)

        sink.server.respond = once_released
        async with platform(sink_policy(sink.url(), handler={"timeout": 60})) as p:
            first = await start_worker(bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "1.log")
            try:
                await p.post(notification())
                await async_wait_for(lambda: sink.hits, timeout_s=20)
                first.kill()
                release[0] = True
                second = await start_worker(
                    bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "2.log"
                )
                try:
                    await async_wait_for(lambda: len(sink.hits) == 2, timeout_s=40)  # once the lease (15 s) ends
                    await async_wait_for(lambda: drained(bus.redis), timeout_s=10)
                finally:
                    second.stop()
            finally:
                first.kill()
    assert len({r.headers["webhook-id"] for r in sink.requests}) == 1
    assert len(processed) == 1


async def test_a_signed_delivery_verifies_with_standardwebhooks_and_the_secret_stays_out_of_logs(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    async with Sink() as sink:
        text = sink_policy(sink.url(), handler={"secret": "$SINK_SECRET"})
        async with platform(text) as p:
            worker = await start_worker(
                bus.redis,
                p.settings.redis_url or "",
                p.policy.sources[0],
                tmp_path / "w.log",
                SINK_SECRET=SECRET,
                HOOKBUS_LOG_LEVEL="debug",
            )
            try:
                answer = await p.post(notification())
                await async_wait_for(lambda: sink.hits, timeout_s=20)
                await async_wait_for(lambda: drained(bus.redis), timeout_s=10)
            finally:
                worker.stop()
    [request] = sink.requests
    verified = Webhook(SECRET).verify(request.body, request.headers)
    assert verified == notification()
    assert request.headers["webhook-id"] == webhook_id(answer.headers["X-Hookbus-Event-Id"], only_handler(p))
    assert request.headers["webhook-signature"].startswith("v1,")
    with pytest.raises(Exception, match="signature"):
        Webhook("whsec_" + base64.b64encode(b"another-secret-another-secret-32").decode()).verify(
            request.body, request.headers
        )
    assert SECRET not in worker.output() and SECRET.removeprefix("whsec_") not in worker.output()


async def test_a_secret_that_is_not_set_is_never_sent_unsigned(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    async with Sink() as sink:
        async with platform(sink_policy(sink.url(), handler={"secret": "${NOT_SET_HERE}"})) as p:
            worker = await start_worker(bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log")
            try:
                await p.post(notification())
                await async_wait_for(lambda: deadletters.size(bus.redis, bus.keys), timeout_s=20)
            finally:
                worker.stop()
    assert sink.hits == []
    [letter] = [letter async for letter in deadletters.scan(bus.redis, bus.keys)]
    assert letter.why == "not_retryable" and "NOT_SET_HERE is not set" in letter.reason


async def test_past_max_queued_async_work_is_dropped_and_counted_and_every_answer_arrives(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    hooks = {
        "Notification": [{"hooks": [{"type": "command", "command": "true", "async": True}]}],
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {"type": "rule", "deny": ["Bash(rm -rf *)"]},
                    {"type": "command", "command": "true", "async": True},
                ],
            }
        ],
    }
    async with platform(policy_yaml(hooks, **{"async": {"maxQueued": 5}})) as p:  # and no worker at all
        notes = [await p.post(notification(n=n)) for n in range(20)]
        denied = [
            await p.post(
                {
                    "hook_event_name": "PreToolUse",
                    "session_id": "s-q",
                    "tool_name": "Bash",
                    "tool_input": {"command": f"rm -rf /tmp/{n}"},
                }
            )
            for n in range(10)
        ]
        await async_wait_for(lambda: p.metrics.value("hookbus_async_jobs_total", status="dropped") == 25, timeout_s=30)
    assert [(r.status_code, r.headers["X-Hookbus-Outcome"]) for r in notes] == [(200, "recorded")] * 20
    assert {(r.status_code, r.headers["X-Hookbus-Outcome"]) for r in denied} == {(200, "decided")}
    assert all(r.json()["hookSpecificOutput"]["permissionDecision"] == "deny" for r in denied)
    assert await bus.redis.zcard(bus.keys.arq_queue) == 5
    assert p.metrics.value("hookbus_async_jobs_total", status="queued") == 5
    assert p.metrics.value("hookbus_async_jobs_total", status="dropped") == 25


async def test_a_dead_letter_is_masked_like_the_decision_log(
    platform: Callable[..., Any], bus: BusProbe, tmp_path: Path
) -> None:
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    async with Sink(default=400) as sink:
        async with platform(sink_policy(sink.url())) as p:
            worker = await start_worker(bus.redis, p.settings.redis_url or "", p.policy.sources[0], tmp_path / "w.log")
            try:
                await p.post({**notification(), "message": f"pushed with {token}"})
                await async_wait_for(lambda: deadletters.size(bus.redis, bus.keys), timeout_s=20)
            finally:
                worker.stop()
    assert token in sink.requests[0].body.decode()  # the handler saw the real input
    [letter] = [letter async for letter in deadletters.scan(bus.redis, bus.keys)]
    raw = await bus.redis.xrange(bus.keys.async_dead_letters)
    assert token not in repr(raw)
    assert "[REDACTED:github]" in json.loads(letter.payload)["message"]
    assert {"pointer": "/input/message", "detector": "github"} in letter.masked


async def test_a_transaction_cut_by_a_dropped_connection_is_not_taken_for_a_duplicate(
    bus: BusProbe, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    arq = arq_pool(redis_url)
    try:
        request = Request("ev-cut", "Notification", "default", json.dumps(notification()).encode(), now_ms())

        async def cut(*args: Any, **kwargs: Any) -> None:
            return None  # what arq answers when redis-py turns a dropped connection into a WatchError

        async def cut_while_watching(*args: Any, **kwargs: Any) -> None:
            raise redis.exceptions.WatchError("A ConnectionError occurred on while watching one or more keys")

        real = arq.enqueue_job
        for broken in (cut, cut_while_watching):  # at EXEC (arq answers None), or before it (redis-py raises)
            monkeypatch.setattr(arq, "enqueue_job", broken)
            with pytest.raises(BusUnavailable, match="not queued"):  # the dispatcher retries it
                await put_job(arq, bus.keys, request, "h1", "ev-cut:h1", 60)
        monkeypatch.setattr(arq, "enqueue_job", real)
        assert await put_job(arq, bus.keys, request, "h1", "ev-cut:h1", 60)  # the retry queues it
        assert not await put_job(arq, bus.keys, request, "h1", "ev-cut:h1", 60)  # now it is a duplicate
    finally:
        await arq.aclose()
