"""What handing a synchronous ``function`` hook to a thread costs: ``python bench/handoff.py``.

The same trivial function, awaited ``--calls`` times from the event loop (uvloop, as the
dispatcher runs) in groups of ``--concurrency`` at once, four ways, interleaved over
``--rounds``:

* **inline**: called on the loop (the floor: what ``asyncio.gather`` itself costs);
* **run_in_executor**: ``loop.run_in_executor`` with a ``ThreadPoolExecutor`` of 32 threads
  (what the dispatcher did before);
* **ThreadHandoff**: :class:`workers.handlers.threads.ThreadHandoff` (what it does now);
* **anyio.to_thread**: ``anyio.to_thread.run_sync`` with a limiter of 32.

Reported per way: process CPU µs per call (both threads) and its ratio to ``run_in_executor``
in the same run. Markdown to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.handlers.threads import ThreadHandoff

MAX_THREADS = 32


def check(n: int) -> int:
    return n + 1


def ways() -> dict[str, Callable[[int], Awaitable[Any]]]:
    pool = ThreadPoolExecutor(MAX_THREADS)
    handoff = ThreadHandoff(MAX_THREADS, "bench")
    limiter = anyio.CapacityLimiter(MAX_THREADS)

    async def inline(n: int) -> Any:
        return check(n)

    async def executor(n: int) -> Any:
        bound = functools.partial(contextvars.copy_context().run, check, n)  # as the dispatcher called it
        return await asyncio.get_running_loop().run_in_executor(pool, bound)

    async def threads(n: int) -> Any:
        return await handoff.run(check, n)

    async def to_thread(n: int) -> Any:
        return await anyio.to_thread.run_sync(check, n, limiter=limiter)

    return {"inline": inline, "run_in_executor": executor, "ThreadHandoff": threads, "anyio.to_thread": to_thread}


async def cpu_us_per_call(call: Callable[[int], Awaitable[Any]], calls: int, concurrency: int) -> float:
    for n in range(concurrency * 10):  # threads started, caches warm
        await call(n)
    started = time.process_time()
    for first in range(0, calls, concurrency):
        await asyncio.gather(*(call(n) for n in range(first, first + concurrency)))
    return (time.process_time() - started) / calls * 1e6


async def main(args: argparse.Namespace) -> None:
    found: dict[str, list[float]] = {}
    candidates = ways()
    for _ in range(args.rounds):
        for name, call in candidates.items():
            found.setdefault(name, []).append(await cpu_us_per_call(call, args.calls, args.concurrency))
    base = statistics.median(found["run_in_executor"])
    print(f"{args.calls:,} calls in groups of {args.concurrency}, {args.rounds} interleaved rounds (median)\n")
    print("| way | CPU µs per call | ratio to run_in_executor |\n|---|---|---|")
    for name, samples in found.items():
        median = statistics.median(samples)
        print(f"| {name} | {median:.1f} | {median / base:.2f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=4, help="calls awaited at once (default 4)")
    parser.add_argument("--rounds", type=int, default=3)
    uvloop.run(main(parser.parse_args()))
