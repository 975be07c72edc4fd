"""``hookbus audit export`` and ``hookbus audit follow`` (:mod:`hookbus.audit.command`, :mod:`hookbus.audit.sinks`).

Records are written to a real Redis with explicit entry ids (the ids are the write times the
windows select on). ``follow`` runs as a real child process that is SIGKILLed mid-stream and
started again; its webhook goes to a real HTTP server on 127.0.0.1 that records every
``webhook-id`` and checks every signature with the ``standardwebhooks`` package.
"""

from __future__ import annotations

import asyncio
import base64
import csv
import io
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from standardwebhooks import Webhook

from bus.decisionlog.audit import RecordFilter, Window, log_state, read_window
from bus.redis.keys import Keyspace
from bus.stream.partitions import claim_layout
from bus.stream.protocol import LogRecord, iso_time
from hookbus.audit.command import CSV_COLUMNS, Follower, export
from hookbus.audit.sinks import HttpSink, JsonlSink, Stopping, open_sink
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import REPO, BusProbe, async_wait_for, clean_env, frozen_during, run_hookbus
from tests.loopback import LoopbackServer, Received

AT_MS = 1_700_000_000_000


def record(
    i: int,
    *,
    tenant: str = "acme",
    session: str = "s-1",
    event: str = "PreToolUse",
    decision: str = "allow",
    outcome: str = "decided",
    agent: str = "claude",
) -> LogRecord:
    hook_input = {
        "hook_event_name": event,
        "session_id": session,
        "tool_name": "Bash",
        "tool_input": {"command": f"echo {i}"},
    }
    return LogRecord(
        event_id=f"ev-{i:04d}",
        event=event,
        tenant=tenant,
        session_id=session,
        outcome=outcome,
        decision=decision,
        output={},
        payload=orjson.dumps(hook_input),
        received_ms=AT_MS + i * 1000 - 5,
        decided_ms=AT_MS + i * 1000,
        tool_name="Bash",
        revision="rev1",
        agent=agent,
    )


async def write(bus: BusProbe, *records: tuple[int, LogRecord]) -> list[str]:
    """XADD each record with id ``AT_MS + i s``; returns the entry ids."""
    ids = []
    for i, entry in records:
        ids.append(
            (
                await bus.redis.xadd(
                    bus.keys.decision_log(),
                    entry.encode(),  # type: ignore[arg-type]
                    id=f"{AT_MS + i * 1000}-0",
                )
            ).decode()
        )
    return ids


async def ten(bus: BusProbe) -> list[str]:
    tenants = ["acme", "globex"]
    return await write(
        bus,
        *[
            (
                i,
                record(
                    i,
                    tenant=tenants[i % 2],
                    session=f"s-{i % 3}",
                    decision="deny" if i in (2, 7) else "allow",
                    event="Stop" if i == 9 else "PreToolUse",
                    agent=("claude", "gemini", "codex", "sdk", "claude")[i % 5],
                ),
            )
            for i in range(10)
        ],
    )


# -- export ------------------------------------------------------------------------------------------


async def exported(bus: BusProbe, window: Window, passes: RecordFilter | None = None, fmt: str = "jsonl") -> str:
    out = io.StringIO()
    await export(bus.url, bus.keys, window, passes or RecordFilter(), out, fmt=fmt)
    return out.getvalue()


async def test_export_writes_exactly_the_window_inclusive_in_order(bus: BusProbe) -> None:
    await ten(bus)
    lines = (await exported(bus, Window(AT_MS + 3000, AT_MS + 6000))).splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["id"] for r in rows] == ["ev-0003", "ev-0004", "ev-0005", "ev-0006"]
    assert rows[0]["log_id"] == f"{AT_MS + 3000}-0"
    assert rows[0]["time"] == iso_time(AT_MS + 2995) and rows[0]["latency_ms"] == 5
    assert len((await exported(bus, Window())).splitlines()) == 10
    assert (await exported(bus, Window(AT_MS + 10_000))) == ""


async def test_export_filters(bus: BusProbe) -> None:
    await ten(bus)

    async def ids(**given: Any) -> list[str]:
        text = await exported(bus, Window(), RecordFilter.of(**given))
        return [json.loads(line)["id"][-1] for line in text.splitlines()]

    assert await ids(tenants=["globex"]) == list("13579")
    assert await ids(decisions=["deny"]) == ["2", "7"]
    assert await ids(decisions=["decided"]) == list("0123456789")  # an outcome matches too
    assert await ids(events=["Stop"]) == ["9"]
    assert await ids(sessions=["s-1"], tenants=["acme,globex"]) == ["1", "4", "7"]
    assert await ids(agents=["gemini"]) == ["1", "6"]
    assert await ids(agents=["claude"], tenants=["acme"]) == ["0", "4"]


async def test_a_window_read_while_records_arrive_has_each_record_once(bus: BusProbe) -> None:
    await write(bus, *[(i, record(i)) for i in range(5)])
    seen = []
    async for log_id, _ in read_window(bus.redis, bus.keys, Window(), page=2):
        seen.append(log_id)
        if len(seen) == 3:  # new records land while the export is between pages
            await write(bus, *[(i, record(i)) for i in range(5, 8)])
    assert seen == [f"{AT_MS + i * 1000}-0" for i in range(8)]
    assert len(set(seen)) == len(seen)


async def test_csv_has_a_header_json_cells_and_no_live_formulas(bus: BusProbe) -> None:
    entry = record(1)
    entry.reason = '=HYPERLINK("http://evil")'
    await write(bus, (1, entry))
    rows = list(csv.DictReader(io.StringIO(await exported(bus, Window(), fmt="csv"))))
    assert len(rows) == 1
    assert rows[0]["id"] == "ev-0001" and rows[0]["decision"] == "allow" and rows[0]["agent"] == "claude"
    assert list(rows[0])[:6] == ["log_id", "id", "time", "tenant", "session_id", "agent"]
    assert json.loads(rows[0]["input"])["tool_input"] == {"command": "echo 1"}
    assert rows[0]["reason"].startswith("'=")


async def test_csv_names_the_sender_in_the_last_columns(bus: BusProbe) -> None:
    sent = record(1)
    sent.token_id, sent.client_address = "tk_ops", "10.0.0.7"
    await write(bus, (1, sent), (2, record(2)))
    text = await exported(bus, Window(), fmt="csv")
    header, *rows = list(csv.reader(io.StringIO(text)))
    assert tuple(header) == CSV_COLUMNS and header[-2:] == ["token_id", "client_address"]
    lines = [json.loads(line) for line in (await exported(bus, Window())).splitlines()]
    assert [row[-2:] for row in rows] == [["tk_ops", "10.0.0.7"], ["", ""]]
    assert [(line["token_id"], line["client_address"]) for line in lines] == [("tk_ops", "10.0.0.7"), (None, None)]


def test_export_command_line_takes_iso_and_epoch_times(redis_url: str) -> None:
    probe = BusProbe(redis_url)

    async def setup() -> None:
        await ten(probe)
        await probe.close()

    asyncio.run(setup())
    since = iso_time(AT_MS + 8000).replace(".000Z", "Z")
    result = run_hookbus("audit", "export", "--redis-url", redis_url, "--since", since, "--until", str(AT_MS + 9000))
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["ev-0008", "ev-0009"]
    assert "exported 2 records" in result.stderr
    bad = run_hookbus("audit", "export", "--redis-url", redis_url, "--since", "last tuesday")
    assert bad.returncode == 1 and bad.stderr.startswith("hookbus: cannot read the time 'last tuesday'")
    backwards = run_hookbus("audit", "export", "--redis-url", redis_url, "--since", "1h", "--until", "2h")
    assert backwards.returncode == 1 and "ends before it starts" in backwards.stderr
    by_agent = run_hookbus("audit", "export", "--redis-url", redis_url, "--agent", "Codex", "--agent=sdk")
    assert by_agent.returncode == 0, by_agent.stderr
    rows = [json.loads(line) for line in by_agent.stdout.splitlines()]
    assert [(r["id"], r["agent"]) for r in rows] == [
        ("ev-0002", "codex"),
        ("ev-0003", "sdk"),
        ("ev-0007", "codex"),
        ("ev-0008", "sdk"),
    ]


# -- follow: the jsonl sink -------------------------------------------------------------------------


class _Crash(Exception):
    pass


class CrashAfterDelivery(Follower):
    """Dies after the sink took its first batch and before the XACK: the worst moment."""

    async def _deliver(self, entries: Any, stop: asyncio.Event) -> None:
        items = [(e.log_id, {"log_id": e.log_id, **LogRecord.decode(e.fields).to_json()}) for e in entries]
        await self.sink.deliver(items, stop)
        raise _Crash


async def follow_until(follower: Follower, done: Any) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    try:
        await async_wait_for(done, timeout_s=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_jsonl_follower_crashing_before_its_ack_writes_nothing_twice(bus: BusProbe, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    ids = await write(bus, *[(i, record(i)) for i in range(250)])
    with pytest.raises(_Crash):
        await CrashAfterDelivery(bus.url, bus.keys, "siem", JsonlSink(str(path))).run(asyncio.Event())
    assert len(path.read_text().splitlines()) == JsonlSink.batch  # written, not acknowledged
    with path.open("ab") as file:  # and a line cut short by the crash
        file.write(b'{"log_id": "1700000999000-0", "id": "ev-')
    follower = Follower(bus.url, bus.keys, "siem", JsonlSink(str(path)))
    await follow_until(follower, lambda: len(path.read_text().splitlines()) == 250)
    written = [json.loads(line)["log_id"] for line in path.read_text().splitlines()]
    assert written == ids
    assert (await bus.redis.xpending(bus.keys.decision_log(), "siem"))["pending"] == 0


async def test_records_trimmed_while_pending_are_skipped_with_a_warning(
    bus: BusProbe, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = await write(bus, *[(i, record(i)) for i in range(6)])
    await bus.redis.xgroup_create(bus.keys.decision_log(), "siem", id="0")
    await bus.redis.xreadgroup("siem", "follower", {bus.keys.decision_log(): ">"}, count=4)  # then it crashed
    await bus.redis.xtrim(bus.keys.decision_log(), minid=ids[2], approximate=False)  # retention took two
    path = tmp_path / "audit.jsonl"
    await follow_until(
        Follower(bus.url, bus.keys, "siem", JsonlSink(str(path))),
        lambda: path.exists() and len(path.read_text().splitlines()) == 4,
    )
    assert [json.loads(line)["log_id"] for line in path.read_text().splitlines()] == ids[2:]
    assert f"record {ids[0]} was trimmed from the log before it was delivered" in caplog.text
    assert (await bus.redis.xpending(bus.keys.decision_log(), "siem"))["pending"] == 0


async def test_a_deleted_log_or_group_is_created_again(bus: BusProbe, tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    await write(bus, (0, record(0)))
    stop = asyncio.Event()
    task = asyncio.create_task(Follower(bus.url, bus.keys, "siem", JsonlSink(str(path))).run(stop))
    try:
        await async_wait_for(lambda: path.exists() and path.read_text().count("\n") == 1, timeout_s=10)
        await bus.redis.delete(bus.keys.decision_log())  # an operator starts over
        await write(bus, (1, record(1)))
        await async_wait_for(lambda: path.read_text().count("\n") == 2, timeout_s=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["ev-0000", "ev-0001"]


async def test_a_redis_that_stops_answering_is_said_and_waited_out(
    private_redis: EmbeddedRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Frozen mid-follow: the follower logs the outage and, once Redis answers again, delivers
    what was written meanwhile."""
    redis = aioredis.Redis.from_url(private_redis.url)
    keys = Keyspace()
    path = tmp_path / "audit.jsonl"
    stop = asyncio.Event()
    task = asyncio.create_task(Follower(private_redis.url, keys, "siem", JsonlSink(str(path))).run(stop))
    try:
        # Redis 6.2 (the embedded one): new records are read by a script, waited for by a blocking XREAD.
        async with frozen_during(private_redis, "xread"):
            await async_wait_for(lambda: "Timeout reading" in caplog.text, timeout_s=15)
        await redis.xadd(keys.decision_log(), record(0).encode())
        await async_wait_for(lambda: path.exists() and path.read_text().count("\n") == 1, timeout_s=15)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await redis.aclose()
    assert "redis unavailable at" in caplog.text and "; retrying" in caplog.text


async def test_groups_are_independent_and_start_where_asked(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, *[(i, record(i)) for i in range(3)])
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    await follow_until(
        Follower(bus.url, bus.keys, "a", JsonlSink(str(first))),
        lambda: first.exists() and len(first.read_text().splitlines()) == 3,
    )
    late = Follower(bus.url, bus.keys, "b", JsonlSink(str(second)), start="now")
    stop = asyncio.Event()
    task = asyncio.create_task(late.run(stop))
    await async_wait_for(lambda: _has_group(bus, "b"), timeout_s=5)
    await write(bus, (3, record(3)))
    await async_wait_for(lambda: second.exists() and second.read_text().count("\n") == 1, timeout_s=10)
    stop.set()
    await asyncio.wait_for(task, 10)
    assert json.loads(second.read_text())["id"] == "ev-0003"
    assert len(first.read_text().splitlines()) == 3  # group a has not read record 3 yet: its own pace


async def _has_group(bus: BusProbe, name: str) -> bool:
    return any(g["name"] == name.encode() for g in await bus.redis.xinfo_groups(bus.keys.decision_log()))


def test_bad_sinks_and_secrets_are_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    from bus.errors import ConfigError

    for spec, message in (
        ("kafka:x", "must be jsonl:PATH, http:URL or otlp:URL"),
        ("http:ftp://x", r"http\(s\) URL"),
        ("jsonl:/nonexistent-dir/x.jsonl", "cannot write"),
    ):
        with pytest.raises(ConfigError, match=message):
            open_sink(spec)
    with pytest.raises(ConfigError, match="not set"):
        open_sink("http:https://siem.acme.dev/hook", secret_env="HOOKBUS_TEST_UNSET")
    monkeypatch.setenv("HOOKBUS_TEST_SECRET", "whsec_!!!")
    with pytest.raises(ConfigError, match="not a Standard Webhooks secret"):
        open_sink("http:https://siem.acme.dev/hook", secret_env="HOOKBUS_TEST_SECRET")
    with pytest.raises(ConfigError, match="CIDR"):
        open_sink("http:https://siem.acme.dev/hook", allow_networks=("10.0.0.0/33",))


# -- follow: the http sink --------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"hookbus-audit-test-secret-0123").decode()


class Receiver:
    """A webhook receiver: verifies each signature, answers 200, or holds request ``hold_at`` until released."""

    def __init__(self, hold_at: int | None = None) -> None:
        self.hold_at = hold_at
        self.release = asyncio.Event()
        self.accepted: list[str] = []
        self.bad_signatures = 0

    async def __call__(self, server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        if self.hold_at is not None and len(server.requests) == self.hold_at:
            await self.release.wait()
            return  # the connection is closed without an answer
        try:
            Webhook(SECRET).verify(request.body, request.headers)
        except Exception:
            self.bad_signatures += 1
            writer.write(b"HTTP/1.1 400 Bad\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        self.accepted.append(request.headers["webhook-id"])
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()


def follow_process(redis_url: str, url: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hookbus",
            "audit",
            "follow",
            "--redis-url",
            redis_url,
            "--group",
            "siem",
            "--sink",
            f"http:{url}",
            "--secret-env",
            "SIEM_SECRET",
            "--allow-network",
            "127.0.0.0/8",
            "--batch",
            "1",
            *extra,
        ],
        cwd=REPO,
        env=clean_env(SIEM_SECRET=SECRET),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.timeout(90)
async def test_a_killed_follower_restarts_with_no_gap_and_no_duplicate(
    bus: BusProbe, children: list[subprocess.Popen[bytes]]
) -> None:
    await write(bus, *[(i, record(i)) for i in range(20)])
    receiver = Receiver(hold_at=8)  # the 8th request is in flight when the follower is killed
    async with LoopbackServer(receiver) as server:
        first = follow_process(bus.url, server.url())
        children.append(first)
        await async_wait_for(lambda: len(server.requests) == 8, timeout_s=30)
        os.kill(first.pid, signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
        receiver.release.set()
        assert receiver.accepted == [f"ev-{i:04d}" for i in range(7)]
        await write(bus, *[(i, record(i)) for i in range(20, 30)])  # written while no follower runs
        second = follow_process(bus.url, server.url())
        children.append(second)
        await async_wait_for(lambda: len(receiver.accepted) == 30, timeout_s=30)
        os.kill(second.pid, signal.SIGTERM)
        await asyncio.to_thread(second.wait, 10)
    assert receiver.accepted == [f"ev-{i:04d}" for i in range(30)]  # in order, each once
    assert Counter(r.headers["webhook-id"] for r in server.requests)["ev-0007"] == 2  # the one in flight, again
    assert receiver.bad_signatures == 0
    body = json.loads(server.requests[0].body)
    assert body["type"] == "hookbus.decision" and body["data"]["id"] == "ev-0000"
    assert second.returncode == 0
    assert (await bus.redis.xpending(bus.keys.decision_log(), "siem"))["pending"] == 0


async def test_the_http_sink_retries_with_backoff_until_accepted(bus: BusProbe) -> None:
    answers = iter([503, 500, 204])

    async def flaky(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 {next(answers)} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())

    async with LoopbackServer(flaky) as server:
        sink = HttpSink(server.url(), allow_networks=("127.0.0.1/32",), max_delay_s=0.05)
        try:
            await sink.deliver([("1-0", {"id": "ev-1"})], asyncio.Event())
        finally:
            await sink.aclose()
    assert [r.headers["webhook-id"] for r in server.requests] == ["ev-1"] * 3
    assert "webhook-signature" not in server.requests[0].headers  # no secret, no signature


async def test_the_http_sink_goes_through_the_ssrf_guard(caplog: pytest.LogCaptureFixture) -> None:
    async def never(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        raise AssertionError("the guard let a loopback request through")

    async with LoopbackServer(never) as server:
        sink = HttpSink(server.url(), max_delay_s=0.01)
        stop = asyncio.Event()
        try:
            task = asyncio.create_task(sink.deliver([("1-0", {"id": "ev-1"})], stop))
            await async_wait_for(lambda: "SSRF guard refused" in caplog.text, timeout_s=10)
            stop.set()
            with pytest.raises(Stopping):
                await asyncio.wait_for(task, 5)
        finally:
            await sink.aclose()
        assert server.requests == []


# -- four partitions -----------------------------------------------------------------------------

FOUR = Keyspace(partitions=4)


async def write_four(bus: BusProbe, count: int, start: int = 0) -> list[str]:
    """Record ``i`` into partition ``i % 4`` with the entry id of second ``i // 2``: partitions 0 and 1
    (and 2 and 3) hold the same ids. The bus's layout says 4 partitions, as a running bus's does.
    Returns the event ids in merged order (which is ``i`` order)."""
    await claim_layout(bus.redis, FOUR)
    for i in range(start, start + count):
        await bus.redis.xadd(
            FOUR.decision_log(i % 4),
            record(i, session=f"s-{i % 4}").encode(),  # type: ignore[arg-type]
            id=f"{AT_MS + i // 2 * 1000}-0",
        )
    return [f"ev-{i:04d}" for i in range(start, start + count)]


async def test_export_merges_every_partition_of_the_bus_in_id_order(bus: BusProbe) -> None:
    events = await write_four(bus, 10)
    rows = [json.loads(line) for line in (await exported(bus, Window())).splitlines()]  # the CLI's 1-partition keys
    assert [r["id"] for r in rows] == events
    assert [r["log_id"] for r in rows[:2]] == [f"{AT_MS}-0"] * 2  # partitions 0 and 1, same id
    window = [json.loads(line)["id"] for line in (await exported(bus, Window(AT_MS + 1000, AT_MS + 3000))).splitlines()]
    assert window == events[2:8]


def partitions_of(lines: list[dict[str, Any]]) -> dict[int, list[int]]:
    by_partition: dict[int, list[int]] = {}
    for line in lines:
        i = int(line["id"][3:])
        by_partition.setdefault(i % 4, []).append(i)
    return by_partition


async def all_acknowledged(bus: BusProbe, group: str) -> bool:
    return all([(await bus.redis.xpending(FOUR.decision_log(p), group))["pending"] == 0 for p in range(4)])


async def test_a_follower_of_four_partitions_crashing_before_its_ack_delivers_each_record_once(
    bus: BusProbe,
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.jsonl"
    events = await write_four(bus, 250)
    with pytest.raises(_Crash):
        await CrashAfterDelivery(bus.url, bus.keys, "siem", JsonlSink(str(path))).run(asyncio.Event())
    assert 0 < len(path.read_text().splitlines()) <= JsonlSink.batch  # written, not acknowledged
    assert [(await bus.redis.xinfo_groups(FOUR.decision_log(p)))[0]["name"] for p in range(4)] == [b"siem"] * 4
    stop = asyncio.Event()
    task = asyncio.create_task(Follower(bus.url, bus.keys, "siem", JsonlSink(str(path))).run(stop))
    try:
        await async_wait_for(lambda: len(path.read_text().splitlines()) == 250, timeout_s=20)
        events += await write_four(bus, 9, start=250)  # while it follows, into every partition
        await async_wait_for(lambda: len(path.read_text().splitlines()) == 259, timeout_s=20)
        await async_wait_for(lambda: all_acknowledged(bus, "siem"), timeout_s=10)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == events  # each once, ties across partitions included
    assert all(ids == sorted(ids) for ids in partitions_of(lines).values())  # each partition in order
    assert all(line["log_id"] == f"{AT_MS + int(line['id'][3:]) // 2 * 1000}-0" for line in lines)


async def test_records_another_consumer_left_pending_are_claimed_and_acknowledged_per_partition(
    bus: BusProbe,
    tmp_path: Path,
) -> None:
    events = await write_four(bus, 16)
    for p in range(4):
        await bus.redis.xgroup_create(FOUR.decision_log(p), "siem", id="0")
    for p in (1, 3):  # a consumer took two records of partitions 1 and 3, then died
        await bus.redis.xreadgroup("siem", "gone", {FOUR.decision_log(p): ">"}, count=2)
    path = tmp_path / "audit.jsonl"
    follower = Follower(bus.url, bus.keys, "siem", JsonlSink(str(path)), claim_idle_s=0)
    await follow_until(follower, lambda: path.exists() and len(path.read_text().splitlines()) == 16)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == events
    assert {int(line["id"][3:]) for line in lines[:4]} == {1, 5, 3, 7}  # the claimed ones first
    assert await all_acknowledged(bus, "siem")
    state = await log_state(bus.redis, FOUR)
    assert [(g.name, g.pending, g.lag) for g in state.groups] == [("siem", 0, 0)]
