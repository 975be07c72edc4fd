"""The OTLP sink of ``hookbus audit follow`` (:mod:`hookbus.audit.otlp`) against a real OTLP/HTTP receiver.

The receiver is a real HTTP server on 127.0.0.1 that decodes every request as an
``ExportLogsServiceRequest`` (the ``opentelemetry-proto`` messages) and answers as an OTLP
endpoint would: 200 with an ``ExportLogsServiceResponse``, a partial success, a 400, a 503,
or no answer at all. Records are acknowledged in Redis only once the receiver took them.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from bus.runtime.metrics import Metrics
from hookbus.audit.command import Follower
from hookbus.audit.delivery import Answer, DeadLetters, retry_delay_s
from hookbus.audit.otlp import env_headers, logs_url
from hookbus.audit.sinks import OtlpSink, SinkOptions, open_sink
from tests.conftest import BusProbe, async_wait_for
from tests.hookbus.audit.test_command import CrashAfterDelivery, _Crash, follow_until, record, write
from tests.loopback import LoopbackServer, Received

LOOPBACK = ("127.0.0.0/8",)
TRACE = "0af7651916cd43dd8448eb211c80319c"


def _plain(value: AnyValue) -> Any:
    return getattr(value, value.WhichOneof("value") or "string_value")


class OtlpReceiver:
    """Decodes each request; answers 200, or what ``answer(records)`` says (a status, or None: hang up)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.requests = 0
        self.down = False
        self.refuse: set[str] = set()
        self.partial: int = 0
        self.headers: list[dict[str, str]] = []

    async def __call__(self, server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        self.requests += 1
        self.headers.append(request.headers)
        if self.down:
            if self.requests % 2:
                writer.write(b"HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return  # every other try: the connection closes with no answer
        body = request.body
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        decoded = ExportLogsServiceRequest.FromString(body)
        found = []
        for resource_logs in decoded.resource_logs:
            resource = {a.key: _plain(a.value) for a in resource_logs.resource.attributes}
            for scope_logs in resource_logs.scope_logs:
                for log in scope_logs.log_records:
                    attributes = {a.key: _plain(a.value) for a in log.attributes}
                    found.append(
                        {
                            "event_name": log.event_name,
                            "time_unix_nano": log.time_unix_nano,
                            "severity": log.severity_text,
                            "body": log.body.string_value,
                            "trace_id": log.trace_id.hex(),
                            "scope": scope_logs.scope.name,
                            "resource": resource,
                            **attributes,
                        }
                    )
        if any(r["hookbus.event_id"] in self.refuse for r in found):  # as a collector answers: a protobuf Status
            answer = Status(code=3, message="bad record").SerializeToString()
            writer.write(
                b"HTTP/1.1 400 Bad\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n" % len(answer) + answer
            )
            return
        self.records.extend(found)
        response = ExportLogsServiceResponse()
        if self.partial:
            response.partial_success.rejected_log_records = self.partial
            response.partial_success.error_message = "2 records over the attribute limit"
        data = response.SerializeToString()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(data) + data
        )
        await writer.drain()


def sink(server: LoopbackServer, tmp_path: Path, metrics: Metrics | None = None, **options: Any) -> OtlpSink:
    return OtlpSink(
        f"http://127.0.0.1:{server.port}",
        dead_letters=DeadLetters(str(tmp_path / "dead.jsonl")),
        allow_networks=LOOPBACK,
        max_delay_s=0.05,
        counters=metrics.audit().sink("siem", "otlp") if metrics is not None else None,
        **options,
    )


async def acknowledged(bus: BusProbe) -> bool:
    return bool((await bus.redis.xpending(bus.keys.decision_log(), "siem"))["pending"] == 0)


async def test_each_record_arrives_as_a_decision_event_with_genai_attributes(bus: BusProbe, tmp_path: Path) -> None:
    shaped = record(0, decision="deny")
    shaped.tool_use_id, shaped.trace_id, shaped.reason = "toolu_01", TRACE, "no rm -rf"
    await write(bus, (0, shaped), *[(i, record(i)) for i in range(1, 30)])
    receiver = OtlpReceiver()
    async with LoopbackServer(receiver) as server:
        follower = Follower(bus.url, bus.keys, "siem", sink(server, tmp_path, gzip_body=True, batch=8))
        await follow_until(follower, lambda: len(receiver.records) == 30)
    assert [r["hookbus.event_id"] for r in receiver.records] == [f"ev-{i:04d}" for i in range(30)]
    first = receiver.records[0]
    assert first["event_name"] == "hookbus.decision" and first["scope"] == "hookbus.audit"
    assert first["resource"] == {"service.name": "hookbus"}
    assert first["gen_ai.tool.name"] == "Bash" and first["gen_ai.tool.call.id"] == "toolu_01"
    assert first["gen_ai.conversation.id"] == "s-1" == first["session.id"]
    assert first["hookbus.decision"] == "deny" and first["hookbus.reason"] == "no rm -rf"
    assert first["hookbus.tenant"] == "acme" and first["hookbus.outcome"] == "decided"
    assert first["hookbus.log_id"] == "1700000000000-0"
    assert json.loads(first["hookbus.input"])["tool_input"] == {"command": "echo 0"}
    assert first["trace_id"] == TRACE and receiver.records[1]["trace_id"] == ""
    assert first["severity"] == "WARN" and receiver.records[1]["severity"] == "INFO"
    assert first["body"] == "PreToolUse Bash -> deny: no rm -rf"
    assert first["time_unix_nano"] == 1_700_000_000_000 * 1_000_000
    assert receiver.requests == 4 and all(h["content-encoding"] == "gzip" for h in receiver.headers)
    assert await acknowledged(bus)


async def test_an_outage_is_retried_and_nothing_is_lost_or_acknowledged_early(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, *[(i, record(i)) for i in range(40)])
    receiver = OtlpReceiver()
    receiver.down = True
    m = Metrics()
    async with LoopbackServer(receiver) as server:
        follower = Follower(
            bus.url, bus.keys, "siem", sink(server, tmp_path, m, batch=10), counters=m.audit().sink("siem", "otlp")
        )
        stop = asyncio.Event()
        task = asyncio.create_task(follower.run(stop))
        try:
            await async_wait_for(lambda: receiver.requests >= 6, timeout_s=20)
            assert not await acknowledged(bus) and receiver.records == []
            assert m.value("hookbus_audit_sink_errors_total", group="siem", sink="otlp", error="server") >= 1
            assert m.value("hookbus_audit_sink_errors_total", group="siem", sink="otlp", error="no_answer") >= 1
            lag = "hookbus_audit_sink_lag_seconds"
            await async_wait_for(lambda: m.value(lag, group="siem", sink="otlp") > 0, timeout_s=10)  # said while down
            receiver.down = False
            await async_wait_for(lambda: len(receiver.records) == 40, timeout_s=20)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
    assert [r["hookbus.event_id"] for r in receiver.records] == [f"ev-{i:04d}" for i in range(40)]
    assert await acknowledged(bus)
    assert m.value("hookbus_audit_sink_records_total", group="siem", sink="otlp") == 40
    assert m.value("hookbus_audit_sink_lag_seconds", group="siem", sink="otlp") == 0  # nothing held any more
    assert not (tmp_path / "dead.jsonl").exists()


async def test_a_follower_dying_before_its_ack_sends_that_batch_again_and_loses_nothing(
    bus: BusProbe, tmp_path: Path
) -> None:
    await write(bus, *[(i, record(i)) for i in range(25)])
    receiver = OtlpReceiver()
    async with LoopbackServer(receiver) as server:
        with pytest.raises(_Crash):  # the receiver took the first batch; the XACK never happened
            await CrashAfterDelivery(bus.url, bus.keys, "siem", sink(server, tmp_path, batch=10)).run(asyncio.Event())
        assert len(receiver.records) == 10 and not await acknowledged(bus)
        follower = Follower(bus.url, bus.keys, "siem", sink(server, tmp_path, batch=10))
        await follow_until(follower, lambda: len(receiver.records) == 35)
        await async_wait_for(lambda: acknowledged(bus), timeout_s=10)
    ids = [r["hookbus.event_id"] for r in receiver.records]
    assert ids == [f"ev-{i:04d}" for i in range(10)] * 2 + [f"ev-{i:04d}" for i in range(10, 25)]


async def test_a_record_refused_for_good_goes_to_the_dead_letter_file_alone(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, *[(i, record(i)) for i in range(20)])
    receiver = OtlpReceiver()
    receiver.refuse = {"ev-0005"}
    m = Metrics()
    async with LoopbackServer(receiver) as server:
        follower = Follower(bus.url, bus.keys, "siem", sink(server, tmp_path, m, batch=20))
        await follow_until(follower, lambda: len(receiver.records) == 19)
        await async_wait_for(lambda: acknowledged(bus), timeout_s=10)
    assert [r["hookbus.event_id"] for r in receiver.records] == [f"ev-{i:04d}" for i in range(20) if i != 5]
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [d["record"]["id"] for d in dead] == ["ev-0005"]
    assert dead[0]["reason"].startswith("HTTP 400: ") and dead[0]["reason"].endswith("bad record")
    assert dead[0]["sink"] == "otlp"
    assert (tmp_path / "dead.jsonl").stat().st_mode & 0o077 == 0
    assert m.value("hookbus_audit_sink_dead_letters_total", group="siem", sink="otlp") == 1
    assert await acknowledged(bus)


async def test_a_partial_success_keeps_the_batch_in_the_dead_letter_file(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, *[(i, record(i)) for i in range(5)])
    receiver = OtlpReceiver()
    receiver.partial = 2
    m = Metrics()
    async with LoopbackServer(receiver) as server:
        follower = Follower(bus.url, bus.keys, "siem", sink(server, tmp_path, m, batch=5))
        await follow_until(follower, lambda: (tmp_path / "dead.jsonl").exists())
    dead = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [d["record"]["id"] for d in dead] == [f"ev-{i:04d}" for i in range(5)]
    assert "rejected 2 of these 5 records: 2 records over the attribute limit" in dead[0]["reason"]
    assert m.value("hookbus_audit_sink_errors_total", group="siem", sink="otlp", error="partial") == 1
    assert m.value("hookbus_audit_sink_records_total", group="siem", sink="otlp") == 3  # the 2 rejected are not
    assert await acknowledged(bus)


@pytest.mark.system
async def test_headers_come_from_the_otel_variables_and_urls_get_the_logs_path(tmp_path: Path) -> None:
    assert logs_url("http://collector:4318") == "http://collector:4318/v1/logs"
    assert logs_url("https://collector/custom/logs") == "https://collector/custom/logs"
    assert env_headers({"OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%20abc, x-tenant = acme"}) == {
        "authorization": "Bearer abc",
        "x-tenant": "acme",
    }
    assert env_headers({"OTEL_EXPORTER_OTLP_LOGS_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_HEADERS": "b=2"}) == {"a": "1"}
    from bus.errors import ConfigError

    with pytest.raises(ConfigError, match="name=value"):
        env_headers({"OTEL_EXPORTER_OTLP_HEADERS": "justtext"})
    with pytest.raises(ConfigError, match="otlp: needs an http"):
        open_sink("otlp:ftp://x")
    with pytest.raises(ConfigError, match="has nothing to sign"):
        open_sink("otlp:http://127.0.0.1:4318", SinkOptions(secret_env="X"))
    receiver = OtlpReceiver()
    async with LoopbackServer(receiver) as server:
        otlp = OtlpSink(
            f"http://127.0.0.1:{server.port}",
            dead_letters=DeadLetters(str(tmp_path / "dead.jsonl")),
            allow_networks=LOOPBACK,
            environ={"OTEL_EXPORTER_OTLP_LOGS_HEADERS": "authorization=Bearer s3cret"},
        )
        try:
            await otlp.deliver([("1-0", {"id": "ev-1", "decision": "allow"})], asyncio.Event())
        finally:
            await otlp.aclose()
    assert receiver.headers[0]["authorization"] == "Bearer s3cret"
    assert receiver.records[0]["hookbus.event_id"] == "ev-1"


@pytest.mark.system
async def test_the_otlp_sink_goes_through_the_ssrf_guard(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    async with LoopbackServer(receiver) as server:
        otlp = OtlpSink(
            f"http://127.0.0.1:{server.port}", dead_letters=DeadLetters(str(tmp_path / "d")), max_delay_s=0.01
        )
        stop = asyncio.Event()
        try:
            task = asyncio.create_task(otlp.deliver([("1-0", {"id": "ev-1"})], stop))
            await async_wait_for(lambda: "SSRF guard refused" in caplog.text, timeout_s=10)
            stop.set()
            from hookbus.audit.delivery import Stopping

            with pytest.raises(Stopping):
                await asyncio.wait_for(task, 5)
        finally:
            await otlp.aclose()
    assert receiver.requests == 0


async def test_a_trickle_waits_the_linger_and_goes_out_in_one_batch(bus: BusProbe, tmp_path: Path) -> None:
    receiver = OtlpReceiver()
    async with LoopbackServer(receiver) as server:
        follower = Follower(bus.url, bus.keys, "siem", sink(server, tmp_path), start="now", linger_s=2.0)
        stop = asyncio.Event()
        task = asyncio.create_task(follower.run(stop))
        try:
            await async_wait_for(lambda: _has_group(bus), timeout_s=10)
            for i in range(5):  # one at a time: the follower's blocked read wakes at the first
                await write(bus, (i, record(i)))
            await async_wait_for(lambda: len(receiver.records) == 5, timeout_s=20)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
    assert receiver.requests == 1
    assert await acknowledged(bus)


async def _has_group(bus: BusProbe) -> bool:
    return bool(await bus.redis.exists(bus.keys.decision_log())) and any(
        g["name"] == b"siem" for g in await bus.redis.xinfo_groups(bus.keys.decision_log())
    )


def test_a_retry_waits_at_least_what_the_receiver_asked_up_to_the_cap() -> None:
    assert retry_delay_s(Answer(False, retry_after_s=5.0), 0.2, 30.0) == 5.0
    assert retry_delay_s(Answer(False, retry_after_s=120.0), 0.2, 30.0) == 30.0
    assert retry_delay_s(Answer(False), 0.4, 30.0) == 0.4


@pytest.mark.system
async def test_retry_after_is_read_from_a_429_or_503_only(tmp_path: Path) -> None:
    answers = iter([(503, "7"), (429, "2.5"), (500, "9"), (503, "Wed, 21 Oct 2015 07:28:00 GMT")])

    async def busy(server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        status, after = next(answers)
        writer.write(f"HTTP/1.1 {status} Busy\r\nRetry-After: {after}\r\nContent-Length: 0\r\n\r\n".encode())

    async with LoopbackServer(busy) as server:
        otlp = sink(server, tmp_path)
        try:
            waits = [(await otlp.poster._post(b"", {}))[0].retry_after_s for _ in range(4)]
        finally:
            await otlp.aclose()
    assert waits == [7.0, 2.5, 0.0, 0.0]
