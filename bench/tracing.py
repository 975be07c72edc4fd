"""What tracing costs a rule decision, in-process: ``python bench/tracing.py``.

One event's hot path as the gateway and a dispatcher run it, in this process and without Redis:
the request (its :class:`~gateway.tracing.GatewayTrace`), the stream entry written and read
back, the dispatcher's read (:class:`~workers.dispatcher.tracing.DispatchTraces`), the rule
evaluation of ``examples/policy.yaml`` (:meth:`workers.engine.evaluation.Engine.evaluate`,
with its evaluation and handler spans), the settle and the end of the request. Three ways, in
the same process, alternating round by round so the host's speed cancels out of the ratios:

* **untraced**: the engine as it was before tracing (``workers/engine/evaluation.py`` at
  ``--before``, read from git) and no tracing call at all: the code path with no tracing;
* **off**: today's code with tracing off (every guard taken, no SDK involved);
* **on 1 %**: tracing on with the SDK's parent-based ratio sampler at ``--ratio`` (0.01) and
  its batch span processor; the exporter drops what it gets (the network is not measured).

Reported: the median decisions per CPU second of each (this process's CPU time, the span
processor's thread included, so that other load on the host does not count) and its ratio to
**untraced**.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import BODIES

from bus.policy.loading import Policy, load_policy
from bus.redis.keys import Keyspace
from bus.runtime import tracing
from bus.runtime.metrics import Metrics
from bus.stream.protocol import LogRecord, Request
from gateway.tracing import ForcedTraces, GatewayTrace
from workers.dispatcher.tracing import DispatchTraces
from workers.engine.evaluation import Engine
from workers.handlers.runners import default_runners

ROOT = Path(__file__).resolve().parent.parent
HEADERS: dict[bytes, bytes] = {}


class Dropping:
    """A span exporter that drops every batch (what it costs to export is the collector's side)."""

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def untraced_engine_module(before: str) -> ModuleType:
    """``workers/engine/evaluation.py`` as it was at ``before``, loaded under a name of its own."""
    source = subprocess.run(
        ["git", "show", f"{before}:workers/engine/evaluation.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert "tracing" not in source, f"{before} already traces: pass an older --before"
    spec = importlib.util.spec_from_loader("bench_untraced_evaluation", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(source, "untraced_evaluation.py", "exec"), module.__dict__)
    return module


def requests(count: int) -> list[Request]:
    return [
        Request(
            event_id=f"bench-{i}",
            event="PreToolUse",
            tenant="default",
            payload=BODIES[i % len(BODIES)],
            received_ms=0,
            reply_to="hookbus:reply:bench",
            deadline_ms=1 << 62,
        )
        for i in range(count)
    ]


def as_read(fields: dict[str, Any]) -> dict[bytes, bytes]:
    return {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in fields.items()}


async def traced(batch: list[Request], engine: Any, policy: Policy, metrics: Metrics) -> None:
    """Each event as :mod:`gateway.hooks` and :mod:`workers.dispatcher.answering` run it (a task
    for the dispatcher's part); with tracing off, and the untraced engine, the untraced path."""
    traces = DispatchTraces(frozenset())
    forced = ForcedTraces(tracing.TraceSettings().forced_per_s, metrics.traces_forced_ignored)
    for sent in batch:
        started = time.perf_counter()
        trace = GatewayTrace.begin(HEADERS, sent, "claude", started, forced) if tracing.on else None
        if trace is not None:
            trace.appending()
        fields = as_read(sent.encode())
        if trace is not None:
            trace.appended()
        await asyncio.create_task(_dispatch(fields, engine, policy, traces))
        if trace is not None:
            trace.replied()
        latency_s = time.perf_counter() - started
        metrics.decision_latency.labels("PreToolUse").observe(latency_s)
        if trace is not None:
            trace.finish(metrics, "PreToolUse", latency_s, "none", "decided", None, frozenset())
        sent.trace = ""


async def _dispatch(fields: dict[bytes, bytes], engine: Any, policy: Policy, traces: DispatchTraces) -> None:
    request = Request.decode(fields)
    span = traces.read("stream", b"1-0", request) if tracing.on else None
    evaluation = await engine.evaluate(request, orjson.loads(request.payload), policy)
    if span is not None:
        record = LogRecord(request.event_id, request.event, "default", "s", "decided", "none", {}, b"", 0, 0)
        traces.settling("stream", b"1-0", span, record)
    assert evaluation.merged is not None
    if tracing.on:
        traces.settled("stream", b"1-0")


Way = Callable[[list[Request], Any, Policy, Metrics], Awaitable[None]]


async def main(args: argparse.Namespace) -> None:
    policy = load_policy([args.policy])
    metrics = Metrics()
    old = untraced_engine_module(args.before)
    # No Redis: rule handlers need none, and the events ask for no pending context.
    engines = {
        "untraced": old.Engine(policy, None, Keyspace(), default_runners(), async_handlers="jobs", metrics=metrics),
        "current": Engine(policy, None, Keyspace(), default_runners(), async_handlers="jobs", metrics=metrics),  # type: ignore[arg-type]
    }
    os.environ["OTEL_TRACES_SAMPLER_ARG"] = str(args.ratio)
    os.environ.pop("OTEL_TRACES_SAMPLER", None)
    tracing.configure(tracing.TraceSettings(enabled=True), "bench", exporter=Dropping())
    ways: dict[str, tuple[Way, str, bool]] = {
        "untraced": (traced, "untraced", False),
        "off": (traced, "current", False),
        f"on {args.ratio:.0%}": (traced, "current", True),
    }
    batch = requests(args.events)
    per_s: dict[str, list[float]] = {name: [] for name in ways}
    for rnd in range(args.rounds + 1):
        order = list(ways.items())
        for name, (way, engine, on) in order[rnd % len(order) :] + order[: rnd % len(order)]:
            tracing.on = on
            started = time.process_time()
            await way(batch if rnd else batch[:500], engines[engine], policy, metrics)
            if rnd:  # round 0 warms up caches and the first metric children
                per_s[name].append(len(batch) / (time.process_time() - started))
    tracing.on = True
    tracing.shutdown()
    median = {name: statistics.median(values) for name, values in per_s.items()}
    print(f"{args.events} PreToolUse Bash events x {args.rounds} rounds, policy {args.policy}, ratio {args.ratio}\n")
    print("| way | decisions per CPU second (median; min-max) | ÷ untraced |")
    print("|---|---|---|")
    for name, values in per_s.items():
        print(
            f"| {name} | {median[name]:,.0f} ({min(values):,.0f}-{max(values):,.0f}) | "
            f"{median[name] / median['untraced']:.3f} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=str(ROOT / "examples" / "policy.yaml"))
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--ratio", type=float, default=0.01)
    parser.add_argument("--before", default="791279d~1", help="a commit from before tracing (the untraced engine)")
    asyncio.run(main(parser.parse_args()))
