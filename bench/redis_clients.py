"""What a Redis client costs the process that calls it, per command: ``python bench/redis_clients.py``.

The gateway's hot command, a stream append (``XADD stream MAXLEN ~ N * m <meta> p <hook input>``
of §1's Bash calls), sent in pipelines of ``--batch`` commands, ``--concurrency`` pipelines in
flight, on one embedded Redis over TCP. CPU seconds of this process (``time.process_time``,
every thread, so a client's own threads count) per command, best of ``--rounds``:

* **redis-py**: as the gateway sends appends (``bus.redis.connection.connect``, a pipeline per
  batch, ``execute(raise_on_error=False)``; commands packed by hiredis);
* **redis-py connection**: a connection of redis-py's pool, the batch packed by hiredis and sent
  at once, its replies read with ``read_response`` (redis-py still connects, authenticates and
  reconnects; no pipeline object, no response callbacks);
* **LeanLink**: what the gateway's appends and the dispatcher's settles use on a single Redis
  (:mod:`bus.redis.lean`): a connection redis-py made, held, the batch framed by hiredis;
* **own protocol**: the floor of that: hiredis framing in an asyncio protocol of its own (no
  redis-py connection, no lock); batches queue on the one connection;
* **coredis**, **valkey-glide**: the well-kept alternatives, when importable (``--site DIR``
  adds a folder where they are installed, e.g. ``pip install --target DIR coredis valkey-glide``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import hiredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import BODIES

from bus.redis.connection import connect
from bus.redis.lean import LeanLink
from bus.stream.protocol import Request
from hookbus.platform.redis_server import EmbeddedRedis, free_port

STREAM = "bench:clients"
MAXLEN = 100_000
ENTRIES = [
    Request(f"e{i}", "PreToolUse", "default", body, 1, deadline_ms=2, reply_to="r").encode()
    for i, body in enumerate(BODIES[:1024])
]
Send = Callable[[list[dict[str, Any]]], Awaitable[object]]


def xadd(fields: dict[str, Any]) -> list[Any]:
    command: list[Any] = ["XADD", STREAM, "MAXLEN", "~", MAXLEN, "*"]
    for key, value in fields.items():
        command += (key, value)
    return command


class _Lean(asyncio.Protocol):
    """One connection; replies matched to batches in order (Redis answers in order)."""

    def __init__(self) -> None:
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[tuple[int, list[Any], asyncio.Future[list[Any]]]] = collections.deque()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while self.waiting:
            reply = self.reader.gets()
            if reply is False:
                return
            count, replies, future = self.waiting[0]
            replies.append(reply)
            if len(replies) == count:
                self.waiting.popleft()
                future.set_result(replies)

    def send(self, batch: list[dict[str, Any]]) -> asyncio.Future[list[Any]]:
        assert self.transport is not None
        out = [hiredis.pack_command(tuple(xadd(fields))) for fields in batch]
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.waiting.append((len(batch), [], future))
        self.transport.write(b"".join(out))
        return future


async def redis_py(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    client = connect(f"redis://127.0.0.1:{port}/0")

    async def send(batch: list[dict[str, Any]]) -> object:
        async with client.pipeline(transaction=False) as pipe:
            for fields in batch:
                pipe.xadd(STREAM, fields, maxlen=MAXLEN, approximate=True)  # type: ignore[arg-type]
            return await pipe.execute(raise_on_error=False)

    return send, client.aclose


async def redis_py_connection(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    client = connect(f"redis://127.0.0.1:{port}/0")
    pool = client.connection_pool

    async def send(batch: list[dict[str, Any]]) -> object:
        packed = [hiredis.pack_command(tuple(xadd(fields))) for fields in batch]
        connection = await pool.get_connection()
        try:
            await connection.send_packed_command(b"".join(packed), check_health=False)
            return [await connection.read_response(disable_decoding=True) for _ in batch]
        finally:
            await pool.release(connection)

    return send, client.aclose


async def lean_link(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    client = connect(f"redis://127.0.0.1:{port}/0")
    link = LeanLink(client)

    async def send(batch: list[dict[str, Any]]) -> object:
        return await link.execute([xadd(fields) for fields in batch])

    async def close() -> None:
        await link.aclose()
        await client.aclose()

    return send, close


async def lean(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    _, protocol = await asyncio.get_running_loop().create_connection(_Lean, "127.0.0.1", port)

    async def close() -> None:
        assert protocol.transport is not None
        protocol.transport.close()

    return protocol.send, close


async def coredis_client(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    import coredis

    client = coredis.Redis(host="127.0.0.1", port=port)
    await client.__aenter__()

    async def send(batch: list[dict[str, Any]]) -> object:
        async with client.pipeline(transaction=False) as pipe:
            for fields in batch:
                pipe.xadd(STREAM, fields, trim_strategy=coredis.PureToken.MAXLEN, threshold=MAXLEN, trim_operator="~")
        return None

    async def close() -> None:
        await client.__aexit__(None, None, None)

    return send, close


async def glide(port: int) -> tuple[Send, Callable[[], Awaitable[None]]]:
    from glide import Batch, GlideClient, GlideClientConfiguration, NodeAddress, StreamAddOptions, TrimByMaxLen

    client = await GlideClient.create(GlideClientConfiguration([NodeAddress("127.0.0.1", port)]))
    options = StreamAddOptions(trim=TrimByMaxLen(exact=False, threshold=MAXLEN))

    async def send(batch: list[dict[str, Any]]) -> object:
        pipe = Batch(is_atomic=False)
        for fields in batch:
            pipe.xadd(STREAM, list(fields.items()), options)
        return await client.exec(pipe, raise_on_error=False)

    return send, client.close


async def measure(send: Send, args: argparse.Namespace) -> float:
    """CPU µs of this process per command over ``args.commands`` commands."""
    batches = [[ENTRIES[(b * args.batch + n) % len(ENTRIES)] for n in range(args.batch)] for b in range(64)]
    per_worker = args.commands // args.batch // args.concurrency

    async def worker(offset: int) -> None:
        for b in range(per_worker):
            await send(batches[(offset + b) % len(batches)])

    await asyncio.gather(*(worker(w) for w in range(args.concurrency)))  # warm-up, same size
    started = time.process_time()
    await asyncio.gather(*(worker(w) for w in range(args.concurrency)))
    return (time.process_time() - started) / (per_worker * args.concurrency * args.batch) * 1e6


CLIENTS = {
    "redis-py": redis_py,
    "redis-py connection": redis_py_connection,
    "LeanLink": lean_link,
    "own protocol": lean,
    "coredis": coredis_client,
    "valkey-glide": glide,
}


async def main(args: argparse.Namespace) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False, port=free_port()) as server:
        for _ in range(args.rounds):
            for name, make in CLIENTS.items():
                try:
                    send, close = await make(server.port)
                except ImportError:
                    continue
                try:
                    found.setdefault(name, []).append(await measure(send, args))
                finally:
                    await close()
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32, help="commands per pipeline (default 32)")
    parser.add_argument("--concurrency", type=int, default=4, help="pipelines in flight (default 4)")
    parser.add_argument("--commands", type=int, default=40_000, help="commands per measurement (default 40,000)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--site", help="a folder to import coredis and valkey-glide from")
    args = parser.parse_args()
    if args.site:
        sys.path.append(args.site)
    results = uvloop.run(main(args))
    print(f"XADD of §1's entries, pipelines of {args.batch}, {args.concurrency} in flight;", end=" ")
    print("client CPU µs per command:\n")
    print("| client | best | median | rounds |\n|---|---|---|---|")
    for name, values in results.items():
        ordered = sorted(values)
        print(f"| {name} | {ordered[0]:.2f} | {ordered[len(ordered) // 2]:.2f} | {len(values)} |")
