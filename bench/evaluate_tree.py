"""Evaluating the example policy with another checkout's engine, for a before/after in one run.

``python bench/evaluate_tree.py TREE [--corpus mix|unique] [--rounds N]``: imports ``bus`` and
``workers`` from ``TREE`` (a ``git worktree add /tmp/before <commit>``; this repository by
default) and times :meth:`workers.engine.evaluation.Engine.evaluate` over the same tool calls as
``bench/evaluate.py`` (its corpus comes from this checkout, so an older tree needs none of its
own), in CPU time of this process. Run it for both trees in turn, alternating, to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


async def main(args: argparse.Namespace, tree: str) -> None:
    sys.path[:0] = [tree, str(HERE)]  # the tree's engine, this checkout's corpus
    import orjson

    from bus.policy.loading import load_policy
    from bus.redis.keys import Keyspace
    from bus.stream.protocol import Request
    from workers.engine.evaluation import Engine
    from workers.handlers.runners import default_runners

    # Only now: bench/run.py puts this checkout first on sys.path.
    corpus = importlib.import_module("corpus")
    bodies_of_run: list[bytes] = importlib.import_module("run").BODIES
    policy = load_policy([f"{tree}/examples/policy.yaml"])
    # No Redis: rule handlers need none, and the events ask for no pending context.
    engine = Engine(policy, None, Keyspace(), default_runners(), async_handlers="jobs")  # type: ignore[arg-type]

    def requests(seed: int) -> list[Request]:
        count = args.events
        if args.corpus == "mix":
            bodies = corpus.events(count, seed)
        else:
            bodies = [bodies_of_run[(seed * count + i) % len(bodies_of_run)] for i in range(count)]
        return [
            Request(event_id=str(i), event="PreToolUse", tenant="default", payload=b, received_ms=0)
            for i, b in enumerate(bodies)
        ]

    async def evaluate(batch: list[Request]) -> None:
        for request in batch:
            await engine.evaluate(request, orjson.loads(request.payload), policy)

    await evaluate(requests(0))  # warm-up
    us = []
    for round_ in range(args.rounds):
        batch = requests(round_ + 1)
        started = time.process_time()
        await evaluate(batch)
        us.append((time.process_time() - started) / len(batch) * 1e6)
    print(f"{tree} ({args.corpus}): {statistics.median(us):.1f} µs / event (min {min(us):.1f}, max {max(us):.1f})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", default=str(HERE.parent))
    parser.add_argument("--corpus", choices=("mix", "unique"), default="mix")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    asyncio.run(main(arguments, str(Path(arguments.tree).resolve())))
