"""``GET /v1/events/stream`` (docs/api.md): the decision log as Server-Sent Events, over real HTTP.

Each test runs a live platform (real uvicorn gateway, in-process dispatchers, the suite's
Redis) and reads the stream with an SSE client library, as a console would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import orjson
import pytest
from httpx_sse import ServerSentEvent, aconnect_sse

from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.runtime.settings import Tokens
from bus.stream.protocol import LogRecord, now_ms
from gateway.decisionlog import sse as events_module
from gateway.decisionlog.sse import EventStream
from gateway.decisionlog.tail import QUEUE_CAPACITY
from tests.conftest import DENY_RM, Platform, assert_error, async_wait_for, pre_tool_use

TOKENS = Tokens.parse("acme:tok-a,beta:tok-b")
ADMIN = Tokens.parse_admin("tok-admin")


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class Watcher:
    """One open event stream, read in the background: every event it got, in order."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self.headers = {**bearer(token), **(headers or {})}
        self.params = params or {}
        self.events: list[ServerSentEvent] = []
        self.status: int | None = None
        self.body = b""
        self.live = asyncio.Event()
        self.ended = asyncio.Event()

    async def _run(self) -> None:
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
                async with aconnect_sse(
                    client, "GET", f"{self.url}/v1/events/stream", params=self.params, headers=self.headers
                ) as source:
                    self.status = source.response.status_code
                    if self.status != 200:
                        self.body = await source.response.aread()
                        return
                    async for event in source.aiter_sse():
                        self.events.append(event)
                        if event.event == "live":
                            self.live.set()
        finally:
            self.ended.set()
            self.live.set()

    def decisions(self) -> list[dict[str, Any]]:
        return [json.loads(e.data) for e in self.events if e.event == "decision"]

    def ids(self) -> list[str]:
        return [e.id for e in self.events if e.event == "decision"]

    def sessions(self) -> list[str]:
        return [d["session_id"] for d in self.decisions()]


@contextlib.asynccontextmanager
async def watching(url: str, token: str | None = None, **kwargs: Any) -> AsyncIterator[Watcher]:
    """An open stream, once it is live (or refused)."""
    watcher = Watcher(url, token, **kwargs)
    task = asyncio.create_task(watcher._run())
    try:
        async with asyncio.timeout(10):
            await watcher.live.wait()
        yield watcher
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def post(p: Platform, command: str, session: str, token: str | None = None, tool: str = "Bash") -> str:
    response = await p.post(pre_tool_use(command, session, tool=tool), headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.headers["X-Hookbus-Event-Id"]


def stream_of(p: Platform) -> EventStream:
    """The gateway's stream endpoint object (to look at its tail and slots)."""
    for route in p.app.router.routes:
        if getattr(route, "path", "") == "/v1/events/stream":
            owner = route.endpoint.__self__
            assert isinstance(owner, EventStream)
            return owner
    raise AssertionError("no /v1/events/stream route")


# -- scoping ------------------------------------------------------------------------------------


async def test_a_tenant_token_sees_its_own_tenant_and_an_admin_token_sees_all(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, tokens=TOKENS, admin_tokens=ADMIN) as p:
        async with watching(p.url, "tok-a") as a, watching(p.url, "tok-b") as b, watching(p.url, "tok-admin") as admin:
            assert a.events[0].event == "hello" and json.loads(a.events[0].data)["scope"] == "acme"
            assert json.loads(admin.events[0].data) == {"scope": None, "admin": True, "resumed_after": None}
            await post(p, "rm -rf /", "a-1", "tok-a")
            await post(p, "ls", "b-1", "tok-b")
            await post(p, "rm -rf /tmp/x", "a-2", "tok-a")
            await async_wait_for(lambda: len(admin.decisions()) == 3, 10)
            await async_wait_for(lambda: len(a.decisions()) == 2 and len(b.decisions()) == 1, 10)
            assert a.sessions() == ["a-1", "a-2"] and {d["tenant"] for d in a.decisions()} == {"acme"}
            assert b.sessions() == ["b-1"] and b.decisions()[0]["tenant"] == "beta"
            assert sorted(admin.sessions()) == ["a-1", "a-2", "b-1"]
            deny = a.decisions()[0]
            assert deny["decision"] == "deny" and deny["verdict"] == "deny"
            assert "no rm -rf" in deny["output"]["hookSpecificOutput"]["permissionDecisionReason"]
            assert deny["input"]["tool_input"] == {"command": "rm -rf /"}
            assert a.ids() == [d["log_id"] for d in a.decisions()]


async def test_a_stream_without_a_token_or_for_another_tenant_is_refused(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, tokens=TOKENS, admin_tokens=ADMIN) as p:
        stream = f"{p.url}/v1/events/stream"
        assert_error(await p.client.get(stream), 401, "unauthorized")
        assert_error(await p.client.get(stream, headers=bearer("nope")), 401, "unauthorized")
        assert_error(await p.client.get(stream, params={"tenant": "beta"}, headers=bearer("tok-a")), 403, "forbidden")
        two = [(b"authorization", b"Bearer tok-admin"), (b"authorization", b"Bearer tok-a")]
        assert_error(await p.client.get(stream, headers=two), 401, "unauthorized")
        async with watching(p.url, "tok-admin", params={"tenant": "beta"}) as admin:
            assert admin.status == 200


async def test_with_no_tokens_configured_everyone_sees_every_tenant(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p, watching(p.url) as anyone:
        await post(p, "rm -rf /", "open-1")
        await async_wait_for(lambda: anyone.sessions() == ["open-1"], 10)
        assert json.loads(anyone.events[0].data)["scope"] is None


# -- filters ------------------------------------------------------------------------------------


async def test_filters_pick_tenant_session_event_decision_and_tool(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, tokens=TOKENS, admin_tokens=ADMIN, max_streams_per_token=8) as p:
        url = p.url
        async with (
            watching(url, "tok-admin", params={"decision": "deny"}) as denies,
            watching(url, "tok-admin", params={"session": "keep-", "tenant": "acme"}) as sessions,
            watching(url, "tok-admin", params={"tool": "Read,Grep"}) as tools,
            watching(url, "tok-admin", params=[("event", "Stop"), ("event", "Notification")]) as stops,
            watching(url, "tok-admin") as everything,
        ):
            await post(p, "rm -rf /", "keep-1", "tok-a")  # deny, acme, kept session
            await post(p, "ls", "keep-2", "tok-a", tool="Read")  # none, acme, Read
            await post(p, "rm -rf /", "keep-3", "tok-b")  # deny, but beta
            await post(p, "ls", "other", "tok-a", tool="Grep")
            stop = await p.post({"hook_event_name": "Stop", "session_id": "stopper"}, headers=bearer("tok-b"))
            assert stop.status_code == 200
            await async_wait_for(lambda: len(everything.decisions()) == 5, 10)
            await async_wait_for(lambda: len(denies.decisions()) == 2 and len(stops.decisions()) == 1, 5)
            await async_wait_for(lambda: len(sessions.decisions()) == 2 and len(tools.decisions()) == 2, 5)
            assert sorted(denies.sessions()) == ["keep-1", "keep-3"]
            assert sessions.sessions() == ["keep-1", "keep-2"]
            assert sorted(tools.sessions()) == ["keep-2", "other"]
            assert stops.sessions() == ["stopper"]


async def test_the_agent_filter_picks_the_records_of_one_agent(platform: Callable[..., Any]) -> None:
    gemini_rm = {
        "hook_event_name": "BeforeTool",
        "session_id": "agent-gemini",
        "tool_name": "run_shell_command",
        "tool_input": {"command": "rm -rf /"},
    }
    async with platform(DENY_RM) as p:
        async with (
            watching(p.url, params={"agent": "gemini"}) as gemini,
            watching(p.url, params={"agent": "claude,sdk"}) as others,
            watching(p.url) as everything,
        ):
            assert (await p.post(gemini_rm, params={"dialect": "gemini"})).json()["decision"] == "deny"
            await post(p, "rm -rf /", "agent-claude")
            sdk = {"hook_event_name": "Notification", "session_id": "agent-sdk", "message": "m"}
            assert (await p.post(sdk, headers={"X-Hookbus-Dialect": "sdk"})).status_code == 200
            await async_wait_for(lambda: len(everything.decisions()) == 3, 10)
            await async_wait_for(lambda: len(gemini.decisions()) == 1 and len(others.decisions()) == 2, 5)
    assert [(d["session_id"], d["agent"], d["tool_name"]) for d in gemini.decisions()] == [
        ("agent-gemini", "gemini", "Bash")
    ]
    assert sorted((d["session_id"], d["agent"]) for d in others.decisions()) == [
        ("agent-claude", "claude"),
        ("agent-sdk", "sdk"),
    ]


async def test_bad_stream_parameters_are_a_400(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        stream = f"{p.url}/v1/events/stream"
        assert_error(await p.client.get(stream, params={"sesion": "x"}), 400, "invalid_parameter")
        assert_error(await p.client.get(stream, params={"backlog": "lots"}), 400, "invalid_parameter")
        assert_error(await p.client.get(stream, params={"backlog": "2001"}), 400, "invalid_parameter")
        assert_error(
            await p.client.get(stream, params={"tool": ",".join(f"T{i}" for i in range(65))}), 400, "invalid_filter"
        )
        assert_error(await p.client.get(stream, headers={"Last-Event-ID": "yesterday"}), 400, "invalid_last_event_id")
        head = await p.client.head(stream)
        assert head.status_code == 200 and head.content == b""
        assert stream_of(p).slots.held("anonymous") == 0


# -- resuming -----------------------------------------------------------------------------------


async def test_last_event_id_resumes_after_that_record_with_nothing_lost_or_repeated(
    platform: Callable[..., Any],
) -> None:
    async with platform(DENY_RM) as p:
        async with watching(p.url) as first:
            for i in range(3):
                await post(p, "rm -rf /", f"r-{i}")
            await async_wait_for(lambda: len(first.decisions()) == 3, 10)
        seen = first.ids()
        for i in range(3, 6):  # written while no stream is open
            await post(p, "rm -rf /", f"r-{i}")
        async with watching(p.url, headers={"Last-Event-ID": seen[0]}) as again:
            await async_wait_for(lambda: len(again.decisions()) == 5, 10)
            assert again.sessions() == [f"r-{i}" for i in range(1, 6)]
            assert again.ids()[:2] == seen[1:]
            assert json.loads(again.events[0].data)["resumed_after"] == seen[0]
            kinds = [e.event for e in again.events]
            assert kinds.index("live") == 6 and "gap" not in kinds  # history first, then the live notice
            await post(p, "ls", "r-6")
            await async_wait_for(lambda: len(again.decisions()) == 6, 10)
        async with watching(p.url, params={"last_event_id": seen[2]}) as by_query:
            await async_wait_for(lambda: len(by_query.decisions()) == 4, 10)
            assert by_query.sessions() == ["r-3", "r-4", "r-5", "r-6"]


async def test_a_resume_point_the_log_no_longer_holds_gets_a_gap_notice(
    platform: Callable[..., Any],
    redis_url: str,
) -> None:
    async with platform(DENY_RM) as p:
        async with watching(p.url) as first:
            for i in range(4):
                await post(p, "ls", f"g-{i}")
            await async_wait_for(lambda: len(first.decisions()) == 4, 10)
        ids = first.ids()
        redis = connect(redis_url)
        await redis.xtrim(Keyspace().decision_log(), minid=ids[2], approximate=False)  # g-0 and g-1 go
        await redis.aclose()
        async with watching(p.url, headers={"Last-Event-ID": ids[0]}) as resumed:
            await async_wait_for(lambda: len(resumed.decisions()) == 2, 10)
            gap = next(e for e in resumed.events if e.event == "gap")
            assert json.loads(gap.data)["after"] == ids[0] and json.loads(gap.data)["resumes_at"] == ids[2]
            assert resumed.sessions() == ["g-2", "g-3"]


async def test_backlog_starts_with_the_newest_records(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM) as p:
        async with watching(p.url) as first:
            for i in range(5):
                await post(p, "ls", f"b-{i}")
            await async_wait_for(lambda: len(first.decisions()) == 5, 10)
        async with watching(p.url, params={"backlog": "3"}) as late:
            assert late.sessions() == ["b-2", "b-3", "b-4"]
            await post(p, "ls", "b-5")
            await async_wait_for(lambda: late.sessions() == ["b-2", "b-3", "b-4", "b-5"], 10)


# -- redaction ----------------------------------------------------------------------------------


async def test_a_record_with_masked_fields_streams_exactly_as_the_log_holds_it(
    platform: Callable[..., Any],
    redis_url: str,
) -> None:
    masked_input = pre_tool_use("aws s3 ls --key [REDACTED:aws-access-key]", "red-1")
    masks = [{"pointer": "/input/tool_input/command", "detector": "aws-access-key"}]
    record = LogRecord(
        event_id="e-red",
        event="PreToolUse",
        tenant="default",
        session_id="red-1",
        tool_name="Bash",
        outcome="decided",
        decision="none",
        output={},
        payload=orjson.dumps(masked_input),
        received_ms=1,
        decided_ms=2,
        masked=masks,
    )
    async with platform(DENY_RM) as p, watching(p.url) as watcher:
        redis = connect(redis_url)
        await redis.xadd(Keyspace().decision_log(), record.encode())  # type: ignore[arg-type]
        await redis.aclose()
        await async_wait_for(lambda: watcher.decisions(), 10)
        streamed = watcher.decisions()[0]
        assert streamed["input"] == masked_input
        assert streamed["masked"] == masks


async def test_a_secret_in_a_live_event_never_reaches_the_stream(platform: Callable[..., Any]) -> None:
    secret = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # the shape of a GitHub token
    async with platform(DENY_RM) as p, watching(p.url) as watcher:
        await post(p, f"git push https://x:{secret}@github.com/o/r", "red-2")
        await async_wait_for(lambda: watcher.decisions(), 10)
        streamed = watcher.decisions()[0]
        assert streamed["masked"], streamed
        assert secret not in "".join(e.data for e in watcher.events)


# -- limits, keep-alive, slow clients -----------------------------------------------------------


async def test_one_token_holds_a_bounded_number_of_streams(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, tokens=TOKENS, max_streams_per_token=2) as p:
        stream = f"{p.url}/v1/events/stream"
        async with watching(p.url, "tok-a"), watching(p.url, "tok-a"):
            third = await p.client.get(stream, headers=bearer("tok-a"))
            assert_error(third, 429, "too_many_streams")
            assert third.headers["Retry-After"] == "5"
            async with watching(p.url, "tok-b") as other:
                assert other.status == 200
        # Closed streams give their slots back.
        await async_wait_for(lambda: stream_of(p).open == 0, 10)
        async with watching(p.url, "tok-a") as again:
            assert again.status == 200


async def test_idle_streams_get_keep_alive_comments(
    platform: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(events_module, "KEEPALIVE_S", 0.1)
    async with platform(DENY_RM) as p, p.client.stream("GET", f"{p.url}/v1/events/stream") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        comments = 0
        async with asyncio.timeout(10):
            async for line in response.aiter_lines():
                comments += line.startswith(": keep-alive")
                if comments == 2:
                    break
    assert comments == 2


def _never_reading_stream(port: int) -> socket.socket:
    """A client that asks for the stream and then never reads a byte (a small receive buffer)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(b"GET /v1/events/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    return sock


async def test_a_client_that_never_reads_holds_up_nobody_and_is_dropped(
    platform: Callable[..., Any],
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(events_module, "SEND_TIMEOUT_S", 2.0)
    count = QUEUE_CAPACITY + 1500
    pad = "x" * 4000  # ~4 KB a record: the slow client's socket buffers fill long before the end
    async with platform(DENY_RM) as p, watching(p.url) as fast:
        stream = stream_of(p)
        (fast_subscriber,) = stream.tail.subscribers
        slow = _never_reading_stream(int(p.url.rsplit(":", 1)[1]))
        try:
            await async_wait_for(lambda: stream.open == 2, 10)
            (slow_subscriber,) = stream.tail.subscribers - {fast_subscriber}
            redis = connect(redis_url)
            template = LogRecord(
                event_id="",
                event="PreToolUse",
                tenant="default",
                session_id="",
                tool_name="Bash",
                outcome="decided",
                decision="none",
                output={},
                payload=b"",
                received_ms=1,
                decided_ms=2,
            )
            async with redis.pipeline(transaction=False) as pipe:
                for i in range(count):
                    template.event_id, template.session_id = f"slow-{i}", f"s-{i}"
                    template.payload = orjson.dumps(pre_tool_use(f"echo {i} {pad}", f"s-{i}"))
                    pipe.xadd(Keyspace().decision_log(), template.encode())  # type: ignore[arg-type]
                await pipe.execute()
            await redis.aclose()
            # The reading client gets everything, in order, while the other one reads nothing.
            await async_wait_for(lambda: len(fast.decisions()) == count, 30)
            assert fast.sessions() == [f"s-{i}" for i in range(count)]
            assert (await p.client.get(f"{p.url}/healthz")).status_code == 200
            # The slow one's queue stayed bounded: it fell behind instead of growing.
            assert slow_subscriber.lags >= 1 and slow_subscriber.queue.qsize() <= QUEUE_CAPACITY
            # And once its socket took nothing for SEND_TIMEOUT_S it was dropped, slot and all.
            await async_wait_for(lambda: stream.open == 1 and slow_subscriber not in stream.tail.subscribers, 20)
            assert stream.slots.held("anonymous") == 1
        finally:
            slow.close()


# -- four partitions ----------------------------------------------------------------------------

DENY_RM_FOUR = DENY_RM.replace("{deadlineSeconds: 2.0}", "{deadlineSeconds: 2.0, streams: {partitions: 4}}")
FOUR = Keyspace(partitions=4)
AT_MS = 1_700_000_000_000
#: Each partition's records, by millisecond: 1 and 4 and 9 are in two partitions each (the same entry id).
WRITTEN = {0: (1, 4, 7), 1: (2, 4, 8), 2: (3, 5, 9), 3: (1, 6, 9)}


async def write_four(redis_url: str) -> list[str]:
    """Write :data:`WRITTEN` (session ``p<partition>-<ms>``); returns the sessions in merged order."""
    redis = connect(redis_url)
    for partition, times in WRITTEN.items():
        for ms in times:
            entry = LogRecord(
                event_id=f"e-{partition}-{ms}",
                event="PreToolUse",
                tenant="default",
                session_id=f"p{partition}-{ms}",
                tool_name="Bash",
                outcome="decided",
                decision="none",
                output={},
                payload=b"{}",
                received_ms=AT_MS + ms,
                decided_ms=AT_MS + ms,
            )
            await redis.xadd(FOUR.decision_log(partition), entry.encode(), id=f"{AT_MS + ms}-0")  # type: ignore[arg-type]
    await redis.aclose()
    return [f"p{partition}-{ms}" for ms, partition in sorted((ms, p) for p, times in WRITTEN.items() for ms in times)]


async def blocked_log_reads(redis_url: str) -> int:
    redis = connect(redis_url)
    try:
        return sum(1 for c in await redis.client_list() if c["cmd"] == "xread" and "b" in c["flags"])
    finally:
        await redis.aclose()


async def test_with_four_partitions_the_stream_follows_every_partition(
    platform: Callable[..., Any], redis_url: str
) -> None:
    sessions = [f"four-{i}" for i in range(12)]
    assert {FOUR.partition_of(s) for s in sessions} == {0, 1, 2, 3}
    async with platform(DENY_RM_FOUR) as p, watching(p.url) as watcher:
        assert stream_of(p).tail.keys.partitions == 4
        await async_wait_for(lambda: blocked_log_reads(redis_url), 10)
        assert await blocked_log_reads(redis_url) == 4  # one read in flight per partition's log
        for session in sessions:
            await post(p, "rm -rf /", session)
        await async_wait_for(lambda: len(watcher.decisions()) == 12, 10)
        assert sorted(watcher.sessions()) == sorted(sessions)
        assert len(set(watcher.ids())) == 12 and all(d["decision"] == "deny" for d in watcher.decisions())
        # A record read after one of another partition with a larger id is still sent: each
        # partition is tracked on its own (here partition 0's clock runs a minute ahead).
        redis = connect(redis_url)
        template = LogRecord(
            event_id="",
            event="Stop",
            tenant="default",
            session_id="",
            outcome="recorded",
            decision="none",
            output={},
            payload=b"{}",
            received_ms=1,
            decided_ms=2,
        )
        for partition, session, entry_id in ((0, "ahead", f"{now_ms() + 60_000}-0"), (1, "behind", "*")):
            template.event_id = template.session_id = session
            await redis.xadd(FOUR.decision_log(partition), template.encode(), id=entry_id)  # type: ignore[arg-type]
            await async_wait_for(lambda s=session: s in watcher.sessions(), 10)  # type: ignore[misc]
        await redis.aclose()
        assert watcher.sessions()[-2:] == ["ahead", "behind"]


async def test_with_four_partitions_resume_gap_and_backlog_read_every_partition(
    platform: Callable[..., Any], redis_url: str
) -> None:
    merged = await write_four(redis_url)
    async with platform(DENY_RM_FOUR) as p:
        async with watching(p.url, headers={"Last-Event-ID": f"{AT_MS + 3}-0"}) as resumed:
            # Every partition from past that id, merged by id; a shared id in partition order.
            assert resumed.sessions() == merged[merged.index("p2-3") + 1 :]
            assert resumed.sessions()[:2] == ["p0-4", "p1-4"] and "gap" not in [e.event for e in resumed.events]
            live_before = len(resumed.decisions())
            await post(p, "ls", "four-live")
            await async_wait_for(lambda: len(resumed.decisions()) == live_before + 1, 10)
        async with watching(p.url, params={"backlog": "3"}) as late:
            assert late.sessions() == ["p2-9", "p3-9", "four-live"]  # the newest 3 of all partitions
        redis = connect(redis_url)
        await redis.xtrim(FOUR.decision_log(1), minid=f"{AT_MS + 8}-0", approximate=False)  # p1-2 and p1-4 go
        await redis.aclose()
        async with watching(p.url, headers={"Last-Event-ID": f"{AT_MS + 3}-0"}) as trimmed:
            gap = next(e for e in trimmed.events if e.event == "gap")
            assert json.loads(gap.data) | {"detail": ""} == {
                "after": f"{AT_MS + 3}-0",
                "resumes_at": f"{AT_MS + 8}-0",
                "detail": "",
            }
            assert trimmed.sessions()[:6] == ["p0-4", "p2-5", "p3-6", "p0-7", "p1-8", "p2-9"]
