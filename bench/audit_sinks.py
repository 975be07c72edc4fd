"""The audit follower's sinks: records/s to a loopback OTLP receiver, and no loss across its outage:
``python bench/audit_sinks.py``.

An embedded Redis, a real ``hookbus audit follow`` process, and an OTLP/HTTP receiver in a
process of its own (this script with ``--receiver PORT``) that decodes every request as an
``ExportLogsServiceRequest`` and counts the records by their ``hookbus.event_id``.

1. **Throughput.** ``--records`` records are written to an empty decision log, then a follower
   is started; the time from its first read to its last acknowledgement gives records/s. The same run with a
   ``jsonl`` sink (a file, synced per batch) is the baseline: the ratio says what OTLP
   encoding and HTTP cost against the follower's own reading and acknowledging.
2. **Outage.** The receiver is stopped (its port refuses connections) for ``--outage-s``
   seconds while records keep arriving at ``--rate`` a second; then it comes back. Reported:
   records written, records the receiver holds (each event id once), drops (written and never
   received), duplicates, the dead-letter file (must not exist), and how long the catch-up took.
3. **The decision path.** A gateway and a dispatcher answer ``--decision-rate`` blocking calls a
   second, in ``--decision-rounds`` rounds of four states: no follower, an OTLP follower with
   ``--linger 0``, one with the default linger, and ``hookbus audit archive --every 1``: the
   p50/p99 of each state, and each follower's CPU per record.

Everything runs on 127.0.0.1 and stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bus.redis.connection import connect
from bus.redis.keys import Keyspace
from bus.runtime.children import die_with_parent
from bus.stream.protocol import LogRecord, now_ms
from hookbus.platform.redis_server import EmbeddedRedis, free_port

REPO = Path(__file__).resolve().parent.parent
GROUP = "bench"


# -- the receiver (its own process) --------------------------------------------------------------


class _Receiver(asyncio.Protocol):
    """One keep-alive connection of the receiver: POST /v1/logs decoded and counted, GET /stats."""

    seen: set[str] = set()  # shared by every connection of the process
    stats: dict[str, int] = {"records": 0, "requests": 0, "duplicates": 0}

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).lower()
            at = head.find(b"\r\ncontent-length:")
            length = int(head[at + 17 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            if head.startswith(b"get"):
                answer = json.dumps({**self.stats, "unique": len(self.seen)}).encode()
            else:
                request = ExportLogsServiceRequest.FromString(body)
                self.stats["requests"] += 1
                for logs in request.resource_logs:
                    for scope in logs.scope_logs:
                        for log in scope.log_records:
                            event_id = next(a.value.string_value for a in log.attributes if a.key == "hookbus.event_id")
                            self.stats["records"] += 1
                            if event_id in self.seen:
                                self.stats["duplicates"] += 1
                            self.seen.add(event_id)
                answer = b""
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(answer)
                + answer
            )


def serve_receiver(port: int) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(_Receiver, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def start_receiver(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, __file__, "--receiver", str(port)], preexec_fn=die_with_parent, cwd=REPO
    )
    deadline = time.monotonic() + 20
    while receiver_stats(port) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the receiver did not start")
        time.sleep(0.05)
    return process


def receiver_stats(port: int) -> dict[str, int] | None:
    import httpx

    try:
        stats: dict[str, int] = httpx.get(f"http://127.0.0.1:{port}/stats", timeout=5).json()
    except httpx.HTTPError:
        return None
    return stats


# -- the bench ---------------------------------------------------------------------------------


def record_fields(i: int) -> Any:
    return LogRecord(
        event_id=f"ev-{i:08d}",
        event="PreToolUse",
        tenant="acme",
        session_id=f"s-{i % 50}",
        outcome="decided",
        decision="deny" if i % 10 == 0 else "allow",
        output={},
        payload=json.dumps(
            {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": f"ls -la /tmp/{i}"}}
        ).encode(),
        received_ms=now_ms() - 3,
        decided_ms=now_ms(),
        tool_name="Bash",
        tool_use_id=f"toolu_{i:08d}",
        revision="rev1",
        agent="claude",
        trace_id=f"{i:032x}",
    ).encode()


async def write_records(url: str, first: int, count: int, rate: float | None = None) -> None:
    """``count`` records from number ``first``: pipelined as fast as Redis takes them, or at ``rate`` a second."""
    redis = connect(url, socket_timeout_s=30)
    log = Keyspace().decision_log()
    started = time.monotonic()
    try:
        step = 1000 if rate is None else max(1, int(rate // 20))
        for start in range(first, first + count, step):
            async with redis.pipeline(transaction=False) as pipe:
                for i in range(start, min(first + count, start + step)):
                    pipe.xadd(log, record_fields(i))  # type: ignore[arg-type]
                await pipe.execute()
            if rate is not None:
                due = started + (start + step - first) / rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
    finally:
        await redis.aclose()


async def group_done(url: str, group_name: str = GROUP) -> bool:
    """Whether the group has every record of the log delivered and acknowledged."""
    redis = connect(url, socket_timeout_s=30)
    log = Keyspace().decision_log()
    try:
        groups = await redis.xinfo_groups(log)
        last = await redis.xrevrange(log, count=1)
    finally:
        await redis.aclose()
    group = next((g for g in groups if g["name"] == group_name.encode()), None)
    return bool(group and last and group["last-delivered-id"] == last[0][0] and group["pending"] == 0)


async def poll(check: Callable[[], Awaitable[bool]], timeout_s: float, failed: str, every_s: float = 0.02) -> None:
    """Until ``check()`` is true, or RuntimeError(``failed``) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise RuntimeError(failed)
        await asyncio.sleep(every_s)


async def wait_group(url: str, timeout_s: float, group: str = GROUP) -> None:
    await poll(lambda: group_done(url, group), timeout_s, "the follower did not acknowledge every record in time")


def start_follower(
    url: str, sink: str, workdir: Path, start: str = "now", group: str = GROUP, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "hookbus", "audit", "follow", "--redis-url", url, "--group", group, "--sink", sink]
    args += extra
    args += ["--allow-network", "127.0.0.0/8", "--start", start, "--dead-letter", str(workdir / "dead.jsonl")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    return subprocess.Popen(args, cwd=REPO, env=env, preexec_fn=die_with_parent, stderr=subprocess.DEVNULL)


def start_archiver(url: str, workdir: Path, group: str) -> subprocess.Popen[bytes]:
    """``hookbus audit archive`` from the log's end, writing each second's records (``--every 1``)."""
    args = [sys.executable, "-m", "hookbus", "audit", "archive", "--redis-url", url, "--group", group]
    args += ["--to", str(workdir / f"archive-{group}"), "--start", "now", "--every", "1"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    return subprocess.Popen(args, cwd=REPO, env=env, preexec_fn=die_with_parent, stderr=subprocess.DEVNULL)


async def group_exists(url: str, group: str = GROUP) -> bool:
    redis = connect(url, socket_timeout_s=30)
    try:
        return any(g["name"] == group.encode() for g in await redis.xinfo_groups(Keyspace().decision_log()))
    except Exception:
        return False
    finally:
        await redis.aclose()


async def first_delivered(url: str) -> bool:
    redis = connect(url, socket_timeout_s=30)
    try:
        groups = await redis.xinfo_groups(Keyspace().decision_log())
    except Exception:
        return False
    finally:
        await redis.aclose()
    return any(g["name"] == GROUP.encode() and g["last-delivered-id"] != b"0-0" for g in groups)


async def throughput(url: str, sink: str, records: int, workdir: Path, first: int) -> float:
    """Records/s from the follower's first read to its last acknowledgement, over ``records``
    written beforehand (the writer is not what is measured)."""
    redis = connect(url, socket_timeout_s=30)
    await redis.delete(Keyspace().decision_log())
    await redis.aclose()
    await write_records(url, first, records)
    follower = start_follower(url, sink, workdir, start="oldest")
    try:
        await poll(lambda: first_delivered(url), 60, "the follower did not start", every_s=0.005)
        started = time.monotonic()
        await wait_group(url, 600)
        return records / (time.monotonic() - started)
    finally:
        follower.send_signal(signal.SIGTERM)
        follower.wait(30)


async def outage(url: str, port: int, outage_s: float, rate: float, workdir: Path, first: int) -> dict[str, Any]:
    redis = connect(url, socket_timeout_s=30)
    await redis.delete(Keyspace().decision_log())
    await redis.aclose()
    follower = start_follower(url, f"otlp:http://127.0.0.1:{port}", workdir)
    try:
        await poll(lambda: group_exists(url), 60, "the follower did not start")
        during = int(outage_s * rate)
        await write_records(url, first, during, rate)  # the receiver is down all this time
        receiver = start_receiver(port)
        came_back = time.monotonic()
        after = int(5 * rate)
        await write_records(url, first + during, after, rate)
        await wait_group(url, 600)
        caught_up_s = time.monotonic() - came_back
        stats = receiver_stats(port) or {}
        receiver.terminate()
        receiver.wait(10)
    finally:
        follower.send_signal(signal.SIGTERM)
        follower.wait(30)
    written = during + after
    return {
        "written": written,
        "received_unique": stats.get("unique", 0),
        "dropped": written - stats.get("unique", 0),
        "duplicates": stats.get("duplicates", 0),
        "requests": stats.get("requests", 0),
        "dead_letter_file": (workdir / "dead.jsonl").exists(),
        "catch_up_s": round(caught_up_s, 2),
    }


async def decision_path(url: str, rate: float, seconds: float, rounds: int, workdir: Path) -> dict[str, Any]:
    """Blocking decisions' p50/p99 through a gateway and a dispatcher, in rounds of four states:
    no follower, an OTLP follower sending at once (``--linger 0``), one lingering 0.2 s to fill a
    batch (the default), and the archiver (``hookbus audit archive --every 1``); and each
    follower's CPU per record delivered."""
    from harness import cpu_s, hook_caller, percentile, start_roles, steady_rate, stop_roles

    gateway_port, receiver_port = free_port(), free_port()
    roles = start_roles(url, gateway_port, 1)
    receiver = start_receiver(receiver_port)
    states = {"without": None, "linger_0": "0", "linger_0.2": "0.2", "archiver": "archive"}
    found: dict[str, list[float]] = {state: [] for state in states}
    cpu: dict[str, float] = {state: 0.0 for state in states}
    delivered = None
    try:
        await steady_rate(hook_caller(gateway_port), rate, 2.0)  # warm-up, not counted
        for round_ in range(rounds):
            for state, linger in states.items():
                follower, group = None, f"live-{round_}-{state}"
                if linger == "archive":
                    follower = start_archiver(url, workdir, group)
                elif linger is not None:
                    sink = f"otlp:http://127.0.0.1:{receiver_port}"
                    follower = start_follower(url, sink, workdir, group=group, extra=("--linger", linger))
                if follower is not None:
                    await poll(lambda group=group: group_exists(url, group), 60, "the follower did not start")
                    started_cpu = cpu_s(follower.pid)
                found[state] += await steady_rate(hook_caller(gateway_port), rate, seconds)
                if follower is not None:
                    await wait_group(url, 120, group)  # it kept up: every record delivered
                    cpu[state] += cpu_s(follower.pid) - started_cpu
                    follower.send_signal(signal.SIGTERM)
                    follower.wait(30)
        delivered = (receiver_stats(receiver_port) or {}).get("unique")
    finally:
        stop_roles(roles)
        receiver.terminate()
        receiver.wait(10)
    report: dict[str, Any] = {"rate": rate, "seconds_per_round": seconds, "rounds": rounds}
    base = found["without"]
    for state, latencies in found.items():
        report[state] = {
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 3),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
            "p99_vs_without": round(percentile(latencies, 0.99) / percentile(base, 0.99), 2),
        }
        if states[state] is not None:
            report[state]["follower_cpu_us_per_record"] = round(cpu[state] / (rounds * rate * seconds) * 1e6, 1)
    report["records_delivered"] = delivered
    return report


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="hookbus-audit-sinks-"))
    redis = EmbeddedRedis(workdir / "redis", persistent=False, port=free_port())
    redis.start()
    port = free_port()
    receiver = start_receiver(port)
    try:
        results: dict[str, Any] = {"records": args.records}
        otlp, jsonl = [], []
        for run in range(args.runs):
            base = run * 2 * args.records
            jsonl.append(await throughput(redis.url, f"jsonl:{workdir / 'audit.jsonl'}", args.records, workdir, base))
            otlp.append(
                await throughput(redis.url, f"otlp:http://127.0.0.1:{port}", args.records, workdir, base + args.records)
            )
        stats = receiver_stats(port) or {}
        results["otlp_records_per_s"] = [round(x) for x in otlp]
        results["jsonl_records_per_s"] = [round(x) for x in jsonl]
        results["otlp_over_jsonl"] = round(max(otlp) / max(jsonl), 2)
        results["throughput_receiver"] = stats
        receiver.terminate()
        receiver.wait(10)
        if args.decisions_s > 0:
            results["decision_path"] = await decision_path(
                redis.url, args.decision_rate, args.decisions_s, args.decision_rounds, workdir
            )
        if args.outage_s > 0:
            results["outage"] = {"outage_s": args.outage_s, "rate": args.rate}
            results["outage"].update(
                await outage(redis.url, port, args.outage_s, args.rate, workdir, 2 * args.runs * args.records)
            )
        return results
    finally:
        if receiver.poll() is None:
            receiver.terminate()
        redis.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per throughput run (default 100000)")
    parser.add_argument("--runs", type=int, default=2, help="throughput runs of each sink (default 2)")
    parser.add_argument("--outage-s", type=float, default=60.0, help="how long the receiver is down (0: skip)")
    parser.add_argument("--rate", type=float, default=500.0, help="records/s written during the outage")
    parser.add_argument("--decisions-s", type=float, default=10.0, help="seconds per decision-path round (0: skip)")
    parser.add_argument("--decision-rate", type=float, default=300.0, help="blocking decisions/s (default 300)")
    parser.add_argument("--decision-rounds", type=int, default=2, help="rounds without and with a follower")
    parser.add_argument("--receiver", type=int, metavar="PORT", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.receiver:
        serve_receiver(options.receiver)
    else:
        print(json.dumps(asyncio.run(main(options)), indent=2))
