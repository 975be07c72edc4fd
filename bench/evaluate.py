"""What deciding one event costs the dispatcher's CPU, in-process: ``python bench/evaluate.py``.

Tool calls against the example policy (``examples/policy.yaml``, or ``--policy``), timed in this
process. ``--corpus mix`` (the default) is :mod:`bench.corpus`'s realistic mix of tools and
commands, drawn afresh each round (so one-off commands stay one-offs); ``--corpus unique`` is
the Bash calls of ``bench/run.py``, every one a different command (no cache helps). Three ways:

* **parse**: ``orjson.loads`` of the hook input, what any JSON endpoint does per request (the
  baseline the other two are divided by);
* **select**: parse, then pick the handlers that run (:class:`bus.policy.compiled.CompiledPolicy`);
* **evaluate**: parse, then :meth:`workers.engine.evaluation.Engine.evaluate`: the rule handlers, the
  merge into one hook output, who decided, the metrics. Pending context (a Redis round trip,
  and only with async hooks in the policy) is left out.

Timed in CPU time of this process (``time.process_time``: what a dispatcher spends, and less
moved by other load on the host than wall time). Each is run ``--rounds`` times over
``--events`` events, alternating, so that the host's speed cancels out of the ratios;
reported: the median µs per event of each and the ratios, and how many Bash calls found their
command in the caches keyed by command text (the commands' texts a shell rule matches, then
the split itself, which sees only the first one's misses).
For where the time goes: ``py-spy record -o profile.svg -- python bench/evaluate.py --rounds 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import corpus
from harness import BODIES

from bus.policy.compiled import compiled
from bus.policy.loading import Policy, load_policy
from bus.redis.keys import Keyspace
from bus.rules import bashsplit, shellread
from bus.stream.protocol import Request
from workers.engine.evaluation import Engine
from workers.handlers.runners import default_runners

ROOT = Path(__file__).resolve().parent.parent


def requests(kind: str, count: int, seed: int) -> list[Request]:
    if kind == "mix":
        bodies = corpus.events(count, seed)
    else:
        bodies = [BODIES[(seed * count + i) % len(BODIES)] for i in range(count)]
    return [
        Request(event_id=f"bench-{i}", event="PreToolUse", tenant="default", payload=body, received_ms=0)
        for i, body in enumerate(bodies)
    ]


async def parse(batch: list[Request], engine: Engine, policy: Policy) -> None:
    for request in batch:
        orjson.loads(request.payload)


async def select(batch: list[Request], engine: Engine, policy: Policy) -> None:
    for request in batch:
        compiled(policy).select(request.event, orjson.loads(request.payload), request.agent)


async def evaluate(batch: list[Request], engine: Engine, policy: Policy) -> None:
    for request in batch:
        await engine.evaluate(request, orjson.loads(request.payload), policy)


Way = Callable[[list[Request], Engine, Policy], Awaitable[None]]
WAYS: dict[str, Way] = {"parse": parse, "select": select, "evaluate": evaluate}


async def main(args: argparse.Namespace) -> None:
    policy = load_policy([args.policy])
    # No Redis: rule handlers need none, and the events ask for no pending context.
    engine = Engine(policy, None, Keyspace(), default_runners(), async_handlers="jobs")  # type: ignore[arg-type]
    us: dict[str, list[float]] = {name: [] for name in WAYS}
    warm = requests(args.corpus, args.events, 0)
    for way in WAYS.values():  # warm-up: caches, the first metric children
        await way(warm, engine, policy)
    hits = misses = shell_calls = 0
    first: tuple[int, int] = (0, 0)
    for round_ in range(args.rounds):
        batch = requests(args.corpus, args.events, round_ + 1)
        for name, way in WAYS.items():
            before, texts_before = bashsplit.split_cache_info(), shellread.texts_cache_info()
            started = time.process_time()
            await way(batch, engine, policy)
            us[name].append((time.process_time() - started) / len(batch) * 1e6)
            if name == "evaluate":
                after, texts_after = bashsplit.split_cache_info(), shellread.texts_cache_info()
                hits, misses = hits + after.hits - before.hits, misses + after.misses - before.misses
                first = (
                    first[0] + texts_after.hits - texts_before.hits,
                    first[1] + texts_after.misses - texts_before.misses,
                )
                shell_calls += sum(b'"tool_name":"Bash"' in request.payload for request in batch)
    median = {name: statistics.median(values) for name, values in us.items()}
    print(f"{args.events} PreToolUse events ({args.corpus}) x {args.rounds} rounds, policy {args.policy}")
    looked = first[0] + first[1]
    found = shell_calls - first[1]
    print(
        f"Bash calls whose command was found in the caches: {found / max(1, shell_calls):.0%} "
        f"({found} of {shell_calls}; the commands' texts cache {first[0]} hits of {looked} lookups, "
        f"every deny and ask list looks; then the split cache {hits} hits of {hits + misses})\n"
    )
    print("| way | µs / event (median; min-max) | ÷ parse |")
    print("|---|---|---|")
    for name, values in us.items():
        print(
            f"| {name} | {median[name]:.1f} ({min(values):.1f}-{max(values):.1f}) | "
            f"{median[name] / median['parse']:.1f}x |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=str(ROOT / "examples" / "policy.yaml"))
    parser.add_argument("--corpus", choices=("mix", "unique"), default="mix")
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    asyncio.run(main(parser.parse_args()))
