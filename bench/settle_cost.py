"""What settling costs: one Lua script per event (record + ack + PUBLISH) vs the batched writes before it.

``python bench/settle_cost.py``: the dispatcher's writes for N blocking events, in pipelines of
B events (B is how many events finish while the previous pipeline is in flight: 1 at low
load, tens at saturation), two ways, against one Redis:

* **settle script, one call per pipeline** (now, :mod:`bus.stream.settle` through
  :class:`workers.dispatcher.outbox.Outbox`): one ``EVALSHA`` for the whole pipeline that, per event,
  reads the outcome key, appends the record and sets the outcome key, then acknowledges the
  entries with one ``XACK`` and publishes the replies as one message per gateway;
* **settle script, one call per event** (the outbox before, ``Outbox._flush(max_events=1)``);
* **batched** (before the settle script): per pipeline one ``PUBLISH`` per gateway carrying
  every reply as a JSON array, one ``XADD`` per record, one ``XACK`` per stream.

Reported per event: Redis CPU, the writer's CPU (the dispatcher's side) and the CPU of a
subscriber that reads and decodes the replies like a gateway's reply reader (a process of
its own), and the writer's wall time.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import BODIES, cpu_s

from bus.hooks.decisions import RecordOutcome
from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.replykey import key_or_process
from bus.stream.protocol import LogRecord, Reply, Request, now_ms
from bus.stream.settle import SETTLE_MAX_EVENTS
from hookbus.platform.redis_server import EmbeddedRedis
from workers.dispatcher.outbox import Outbox, Settle, Write

CHANNEL = "hookbus:reply:bench-gateway"
#: The key the outbox seals with when it is given none (this process's).
REPLY_KEY = key_or_process(None)
ROOT = Path(__file__).resolve().parent.parent
SUBSCRIBER = """
import sys, time, redis
from bus.runtime.replykey import reply_json
from bus.stream.protocol import Reply
expected, deadline = int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
client = redis.Redis.from_url(sys.argv[1])
pubsub = client.pubsub(ignore_subscribe_messages=True)
pubsub.subscribe(sys.argv[4])
print("ready", flush=True)
seen = 0
cpu0 = time.process_time()
while seen < expected and time.monotonic() < deadline:
    message = pubsub.get_message(timeout=1.0)
    if message and message["type"] == "message":
        for sealed in message["data"].split(b"\\n"):  # one sealed reply per line
            Reply.decode(reply_json(sealed))
            seen += 1
print(seen, time.process_time() - cpu0, flush=True)
"""


def event(keys: Keyspace, i: int) -> tuple[Request, LogRecord, Reply]:
    payload = BODIES[i % len(BODIES)]
    received = now_ms()
    request = Request(f"bench{i:010d}", "PreToolUse", "default", payload, received, received + 60_000, CHANNEL)
    output = (
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "dangerous command",
            }
        }
        if i % 3 == 0
        else {}
    )
    record = LogRecord(
        event_id=request.event_id,
        event="PreToolUse",
        tenant="default",
        session_id=f"s{i % 50}",
        outcome=RecordOutcome.DECIDED,
        decision="deny" if output else "none",
        output=output,
        payload=payload,
        received_ms=received,
        decided_ms=received + 1,
        tool_name="Bash",
        hooks=[{"id": "h0", "type": "rule", "outcome": "ok", "duration_ms": 0.01, "shadow": False}],
    )
    reply = Reply(request.event_id, output, record.decision, None, [("rule", 1e-05, "ok")])
    return request, record, reply


async def pending_entries(client: aioredis.Redis, stream: str, count: int) -> list[bytes]:
    """``count`` entries added and read by the group, so that there is something to acknowledge."""
    await client.delete(stream)
    await client.xgroup_create(stream, DISPATCH_GROUP, id="0", mkstream=True)
    ids: list[bytes] = []
    for start in range(0, count, 1000):
        async with client.pipeline(transaction=False) as pipe:
            for _ in range(start, min(count, start + 1000)):
                pipe.xadd(stream, {"p": b"x"})
            ids += await pipe.execute()
    read = 0
    while read < count:
        got = await client.xreadgroup(DISPATCH_GROUP, "bench", {stream: ">"}, count=10_000)
        read += sum(len(entries) for _, entries in got)
    return ids


async def batched(client: aioredis.Redis, keys: Keyspace, stream: str, ids: list[bytes], batch: int) -> None:
    """The writes as they were before the settle script (one round trip per batch)."""
    for start in range(0, len(ids), batch):
        chunk = range(start, min(len(ids), start + batch))
        events = [event(keys, i) for i in chunk]
        async with client.pipeline(transaction=False) as pipe:
            replies = [REPLY_KEY.seal(request.meta(), request.payload, reply.encode()) for request, _, reply in events]
            pipe.publish(CHANNEL, b"\n".join(replies))
            for _, record, _ in events:
                pipe.xadd(keys.decision_log(), record.encode(), maxlen=100_000, approximate=True)  # type: ignore[arg-type]
            pipe.xack(stream, DISPATCH_GROUP, *(ids[i] for i in chunk))
            await pipe.execute()


async def scripted(
    client: aioredis.Redis,
    keys: Keyspace,
    stream: str,
    ids: list[bytes],
    batch: int,
    max_events: int = SETTLE_MAX_EVENTS,
) -> None:
    """The writes as the :class:`Outbox` sends them: settle calls of at most ``max_events``."""
    outbox = Outbox(client, keys)
    for start in range(0, len(ids), batch):
        ops: list[Settle | Write] = []
        for i in range(start, min(len(ids), start + batch)):
            request, record, reply = event(keys, i)
            ops.append(Settle(stream, ids[i], request, record, reply, 100_000))
        failed = await outbox._flush(ops, max_events)  # one pipeline, as the outbox's writer task sends it
        if failed:
            raise RuntimeError(f"{len(failed)} settles failed: {outbox.last_error}")


async def scripted_per_event(client: aioredis.Redis, keys: Keyspace, stream: str, ids: list[bytes], batch: int) -> None:
    """The outbox before: one settle call per event, in one pipeline."""
    await scripted(client, keys, stream, ids, batch, max_events=1)


async def one_case(url: str, pid: int, how: str, batch: int, count: int) -> dict[str, float]:
    client = aioredis.Redis.from_url(url)
    keys = Keyspace("hookbus:")
    stream = keys.blocking_stream()
    await client.flushall()
    ids = await pending_entries(client, stream, count)
    subscriber = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-c", SUBSCRIBER, url, str(count), "60", CHANNEL],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert subscriber.stdout is not None
    subscriber.stdout.readline()  # "ready"
    redis_cpu0, cpu0, t0 = cpu_s(pid), time.process_time(), time.perf_counter()
    write = {"script": scripted, "batched": batched, "per event": scripted_per_event}[how]
    await write(client, keys, stream, ids, batch)
    wall, writer_cpu, redis_cpu = time.perf_counter() - t0, time.process_time() - cpu0, cpu_s(pid) - redis_cpu0
    seen_text, sub_cpu_text = subscriber.stdout.readline().split()
    subscriber.wait(10)
    logged = await client.xlen(keys.decision_log())
    pending = (await client.xpending(stream, DISPATCH_GROUP))["pending"]
    await client.aclose()
    if int(seen_text) != count or logged != count or pending:
        raise RuntimeError(f"{how}: {seen_text} replies, {logged} records, {pending} still pending of {count}")
    return {
        "redis_us": redis_cpu / count * 1e6,
        "writer_us": writer_cpu / count * 1e6,
        "subscriber_us": float(sub_cpu_text) / count * 1e6,
        "wall_us": wall / count * 1e6,
    }


async def main(args: argparse.Namespace) -> None:
    rows = [
        "| events per pipeline | writes | Redis CPU µs / event | writer CPU µs / event | "
        "reply reader CPU µs / event | writer wall µs / event |",
        "|---|---|---|---|---|---|",
    ]
    results: dict[tuple[int, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as server:
        assert server.pid is not None
        for batch in args.batches:
            for _ in range(args.runs):
                for how in ("batched", "per event", "script"):  # interleaved, so drift hits all alike
                    results.setdefault((batch, how), []).append(
                        await one_case(server.url, server.pid, how, batch, args.events)
                    )
    for (batch, how), runs in results.items():

        def span(key: str, runs: list[dict[str, Any]] = runs) -> str:
            values = sorted(run[key] for run in runs)
            return f"{values[0]:.1f}" if len(values) == 1 else f"{values[0]:.1f} to {values[-1]:.1f}"

        label = {
            "script": "settle script, one call per pipeline (now)",
            "per event": "settle script, one call per event (before)",
            "batched": "batched PUBLISH + XADD + XACK (before the script)",
        }[how]
        rows.append(
            f"| {batch} | {label} | {span('redis_us')} | {span('writer_us')} | {span('subscriber_us')} | "
            f"{span('wall_us')} |"
        )
    print(f"{args.events} events per case, {args.runs} run(s) each (ranges are min to max).\n")
    print("\n".join(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--runs", type=int, default=3)
    uvloop.run(main(parser.parse_args()))
