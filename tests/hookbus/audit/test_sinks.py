"""Batched webhooks, follow filters, the jsonl sink's rotation and the follower's metrics endpoint
(:mod:`hookbus.audit.webhook`, :mod:`hookbus.audit.jsonl`, :mod:`hookbus.audit.command`).

Webhooks go to a real HTTP server on 127.0.0.1 that decompresses each body and checks its
signature with the ``standardwebhooks`` package; the follower of the last test is a real
``hookbus audit follow`` child process, scraped over HTTP.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from standardwebhooks import Webhook

from bus.decisionlog.audit import RecordFilter
from bus.runtime.metrics import Metrics
from hookbus.audit.command import Follower
from hookbus.audit.delivery import DeadLetters
from hookbus.audit.jsonl import JsonlSink, rotated_files
from hookbus.audit.webhook import HttpSink, batch_id
from hookbus.platform.redis_server import free_port
from tests.conftest import REPO, BusProbe, async_wait_for, clean_env, exposition_samples
from tests.hookbus.audit.test_command import SECRET, follow_until, record, ten, write
from tests.hookbus.audit.test_otlp import OtlpReceiver, acknowledged
from tests.loopback import LoopbackServer, Received


class BatchReceiver:
    """Decompresses, verifies the signature, keeps each batch's records; answers 204."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.sizes: list[int] = []
        self.ids: list[str] = []

    async def __call__(self, server: LoopbackServer, request: Received, writer: asyncio.StreamWriter) -> None:
        self.sizes.append(len(request.body))
        body = gzip.decompress(request.body) if request.headers.get("content-encoding") == "gzip" else request.body
        Webhook(SECRET).verify(body, request.headers)  # raises: the test sees no answer and fails
        message = json.loads(body)
        assert message["type"] == "hookbus.decisions"
        self.batches.append(message["data"])
        self.ids.append(request.headers["webhook-id"])
        writer.write(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        await writer.drain()


def webhook(server: LoopbackServer, tmp_path: Path, **options: Any) -> HttpSink:
    return HttpSink(
        server.url(),
        signer=Webhook(SECRET),
        allow_networks=("127.0.0.0/8",),
        max_delay_s=0.05,
        dead_letters=DeadLetters(str(tmp_path / "dead.jsonl")),
        **options,
    )


async def test_a_batched_webhook_is_gzipped_and_signed_once_per_batch(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, *[(i, record(i)) for i in range(25)])
    receiver = BatchReceiver()
    async with LoopbackServer(receiver) as server:
        sink = webhook(server, tmp_path, batch=10, gzip_body=True)
        await follow_until(Follower(bus.url, bus.keys, "siem", sink), lambda: sum(map(len, receiver.batches)) == 25)
    assert [len(batch) for batch in receiver.batches] == [10, 10, 5]
    assert [r["id"] for batch in receiver.batches for r in batch] == [f"ev-{i:04d}" for i in range(25)]
    first = [(r["log_id"], r) for r in receiver.batches[0]]
    assert receiver.ids[0] == batch_id(first) and len(set(receiver.ids)) == 3  # the same records, the same id
    assert await acknowledged(bus)


async def test_a_batch_stays_under_the_byte_cap(bus: BusProbe, tmp_path: Path) -> None:
    await write(bus, *[(i, record(i)) for i in range(40)])
    receiver = BatchReceiver()
    async with LoopbackServer(receiver) as server:
        sink = webhook(server, tmp_path, batch=40, max_batch_bytes=2500)
        await follow_until(Follower(bus.url, bus.keys, "siem", sink), lambda: sum(map(len, receiver.batches)) == 40)
    assert [r["id"] for batch in receiver.batches for r in batch] == [f"ev-{i:04d}" for i in range(40)]
    assert len(receiver.batches) > 1 and max(receiver.sizes) <= 2500


async def test_follow_filters_deliver_only_matching_records_and_acknowledge_all(bus: BusProbe, tmp_path: Path) -> None:
    await ten(bus)  # tenants acme/globex alternate; 2 and 7 are denies; agents cycle
    path = tmp_path / "denies.jsonl"
    passes = RecordFilter.of(tenants=["acme"], decisions=["deny"])
    follower = Follower(bus.url, bus.keys, "siem", JsonlSink(str(path)), passes=passes)
    await follow_until(follower, lambda: follower.filtered == 9)
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["ev-0002"]
    assert await acknowledged(bus)
    by_agent = Follower(
        bus.url,
        bus.keys,
        "agents",
        JsonlSink(str(tmp_path / "a.jsonl")),
        passes=RecordFilter.of(agents=["GEMINI"], events=["PreToolUse"]),
    )
    await follow_until(by_agent, lambda: by_agent.filtered == 8)
    assert [json.loads(line)["id"] for line in (tmp_path / "a.jsonl").read_text().splitlines()] == [
        "ev-0001",
        "ev-0006",
    ]


def lines_of(path: Path) -> list[str]:
    """The ids of every line in the rotated files and the current one, in order."""
    return [json.loads(line)["id"] for file in [*rotated_files(path), path] for line in file.read_text().splitlines()]


def items(numbers: range) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{1000 + i}-0", {"log_id": f"{1000 + i}-0", "id": f"ev-{i:04d}", "pad": "x" * 200}) for i in numbers]


async def test_the_jsonl_sink_rotates_by_size_losing_and_repeating_nothing(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlSink(str(path), rotate_bytes=2000)
    for start in range(0, 100, 10):
        await sink.deliver(items(range(start, start + 10)), asyncio.Event())
    await sink.aclose()
    assert len(rotated_files(path)) >= 9
    assert all(file.stat().st_size < 2000 + 10 * 300 for file in rotated_files(path))
    assert lines_of(path) == [f"ev-{i:04d}" for i in range(100)]


async def test_the_jsonl_sink_rotates_on_each_period(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    now = [7200.5]
    sink = JsonlSink(str(path), rotate_every_s=3600, clock=lambda: now[0])
    await sink.deliver(items(range(3)), asyncio.Event())
    now[0] = 7300.0  # the same hour: the same file
    await sink.deliver(items(range(3, 6)), asyncio.Event())
    assert rotated_files(path) == []
    now[0] = 10800.0  # the next hour
    await sink.deliver(items(range(6, 9)), asyncio.Event())
    await sink.aclose()
    (closed,) = rotated_files(path)
    assert closed.name == "audit.19700101T030000.000Z.jsonl"
    assert [json.loads(line)["id"] for line in closed.read_text().splitlines()] == [f"ev-{i:04d}" for i in range(6)]
    assert lines_of(path) == [f"ev-{i:04d}" for i in range(9)]


async def test_a_crash_just_after_a_rotation_writes_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    sink = JsonlSink(str(path))
    await sink.deliver(items(range(10)), asyncio.Event())
    await sink.aclose()
    os.rename(path, tmp_path / "audit.20250101T000000.000Z.jsonl")  # rotated, then killed before the next write
    again = JsonlSink(str(path), rotate_bytes=1 << 20)
    await again.deliver(items(range(5, 15)), asyncio.Event())  # 5-9 were never acknowledged: delivered again
    await again.aclose()
    assert lines_of(path) == [f"ev-{i:04d}" for i in range(15)]


async def test_a_failed_write_is_retried_counted_and_leaves_no_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    m = Metrics()
    sink = JsonlSink(str(path), counters=m.audit().sink("siem", "jsonl"))
    await sink.deliver(items(range(2)), asyncio.Event())
    good = sink._file
    sink._file = open(path, "rb", buffering=0)
    task = asyncio.create_task(sink.deliver(items(range(2, 4)), asyncio.Event()))
    await async_wait_for(
        lambda: m.value("hookbus_audit_sink_errors_total", group="siem", sink="jsonl", error="io") >= 2
    )
    sink._file.close()
    sink._file = good
    await asyncio.wait_for(task, 10)
    await sink.aclose()
    assert lines_of(path) == [f"ev-{i:04d}" for i in range(4)]
    assert m.value("hookbus_audit_sink_records_total", group="siem", sink="jsonl") == 4


@pytest.mark.timeout(60)
async def test_a_follower_process_serves_its_sink_metrics(
    bus: BusProbe, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    await ten(bus)
    port = free_port()
    receiver = OtlpReceiver()
    async with LoopbackServer(receiver) as server:
        args = [sys.executable, "-m", "hookbus", "audit", "follow", "--redis-url", bus.url, "--group", "siem"]
        args += ["--sink", f"otlp:http://127.0.0.1:{server.port}", "--allow-network", "127.0.0.0/8"]
        args += ["--tenant", "acme", "--metrics-port", str(port), "--dead-letter", str(tmp_path / "dead.jsonl")]
        child = subprocess.Popen(args, cwd=REPO, env=clean_env(), stdin=subprocess.DEVNULL, stderr=subprocess.PIPE)
        children.append(child)
        await async_wait_for(lambda: len(receiver.records) == 5, timeout_s=30)

        async def scraped() -> dict[Any, float] | None:
            try:
                async with httpx.AsyncClient() as client:
                    answer = await client.get(f"http://127.0.0.1:{port}/metrics")
            except httpx.HTTPError:
                return None
            samples = exposition_samples(answer.text)
            key = ("hookbus_audit_sink_records_total", frozenset({("group", "siem"), ("sink", "otlp")}))
            return samples if samples.get(key) == 5 else None

        samples = await async_wait_for(scraped, timeout_s=20)
        child.terminate()
        await asyncio.to_thread(child.wait, 10)
    assert {r["hookbus.tenant"] for r in receiver.records} == {"acme"}
    labels = frozenset({("group", "siem"), ("sink", "otlp"), ("error", "no_answer")})
    assert samples[("hookbus_audit_sink_errors_total", labels)] == 0
    assert samples[("hookbus_audit_sink_lag_seconds", frozenset({("group", "siem"), ("sink", "otlp")}))] == 0
    assert child.returncode == 0
