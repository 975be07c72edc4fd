"""Mixed traffic for ten minutes, figures per minute: ``python bench/soak_mixed.py``.

The mixed profile of ``bench/mixed.py`` (same policy, same mix of events, same processes: one
gateway, ``--dispatchers`` dispatchers and one async worker on an embedded Redis, a loopback
http hook server), open loop at ``--rate`` events/s for ``--minutes`` periods of ``--minute-s``
seconds. Per period: p50/p99/max latency of the requests *scheduled* in it (from the scheduled
send time, as ``bench/mixed.py`` measures), events, fail-opens, errors, the load generator's own
lag, and the async queue (arq) and blocking backlog sampled every ``--queue-every-s``. At the
end of each period (and once after the warm-up, "minute 0"): RSS and open fds of each role
process (gateway, every dispatcher, worker, redis-server), Redis ``used_memory``, ``DBSIZE``
and the queue depths.

Verdicts: **p99 flat** when no period's p99 is above 2x the first period's; **plateau** for
each figure when the largest of the last three period-end samples is within ``--tolerance``
(5 %) of the sample three periods before the end (for 10 minutes: minute 7 against the
largest of minutes 8-10; in shorter runs, the first period's), plus 2 for fd counts and one
second of traffic for queue depths, which are small numbers that jitter; a role that exits
during the run fails it. The decision log is capped at ``--log-max`` entries (as
``bench/soak.py`` does; the default cap of 1,000,000 would not fill in 10 minutes at 500/s and
Redis memory would climb for the whole run).

How to run: ``.venv/bin/python bench/soak_mixed.py`` on a quiet machine is the soak for
BENCHMARKS.md (10 x 60 s at 500/s, about 11 minutes with set-up and warm-up). A short check
that everything works: ``--minutes 4 --minute-s 20`` (its verdicts say little). Writes
``bench/results/soak_mixed.json`` and prints Markdown tables to paste. Traffic goes to
127.0.0.1 only; the run stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import percentile, usage
from mixed import RESULTS, hook_input, open_loop, platform, queue_depths, schedule

from bus.redis.keys import Keyspace

MIB = 1 / (1 << 20)
#: How many period-end samples the plateau verdict compares with the one before them.
PLATEAU_PERIODS = 3


@dataclasses.dataclass
class Period:
    """What happened to the requests scheduled in one period, and the queues sampled during it."""

    latencies_s: list[float] = dataclasses.field(default_factory=list)
    lags_s: list[float] = dataclasses.field(default_factory=list)
    fail_open: int = 0
    errors: int = 0
    queues: list[dict[str, int]] = dataclasses.field(default_factory=list)

    def add(self, result: dict[str, Any]) -> None:
        self.latencies_s.append(result["latency_s"])
        self.lags_s.append(result["lag_s"])
        self.fail_open += result["outcome"] == "fail-open"
        self.errors += result["status"] != 200

    def summary(self) -> dict[str, Any]:
        latencies = self.latencies_s or [0.0]
        out: dict[str, Any] = {
            "events": len(self.latencies_s),
            "fail_open": self.fail_open,
            "errors": self.errors,
            "p50_ms": percentile(latencies, 0.5) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "max_ms": max(latencies) * 1000,
            "lag_p99_ms": percentile(self.lags_s or [0.0], 0.99) * 1000,
        }
        for name in self.queues[0] if self.queues else ():
            values = [q[name] for q in self.queues]
            out[f"{name}_mean"] = sum(values) / len(values)
            out[f"{name}_max"] = max(values)
        return out


class Soak:
    """Per-period figures of one run: :meth:`record` takes :func:`mixed.open_loop`'s results,
    :meth:`watch` samples the processes and Redis."""

    def __init__(self, periods: int, period_s: float, pids: dict[str, int], queue_every_s: float) -> None:
        self.periods = [Period() for _ in range(periods)]
        self.period_s = period_s
        self.pids = pids
        self.queue_every_s = queue_every_s
        self.samples: list[dict[str, Any]] = []  # after the warm-up, then at the end of each period
        self.keys = Keyspace()

    def record(self, result: dict[str, Any]) -> None:
        index = min(int(result["at_s"] // self.period_s), len(self.periods) - 1)
        self.periods[index].add(result)

    async def sample(self, client: aioredis.Redis, t_s: float) -> dict[str, Any]:
        """Resources now: RSS and fds of each role, Redis memory and keys, queue depths."""
        info = await client.info("memory")
        queues = await queue_depths(client, self.keys)
        sample = {
            "t_s": round(t_s, 1),
            **usage(self.pids),
            "redis_used_memory": int(info["used_memory"]),
            "redis_keys": int(await client.dbsize()),
            "async_queued": queues["arq_queued"],
            "blocking_waiting": queues["blocking_unread"] + queues["blocking_in_dispatcher"],
        }
        self.samples.append(sample)
        return sample

    async def watch(self, client: aioredis.Redis, started: float) -> None:
        """Queue depths every ``queue_every_s`` into the running period, a full sample at the end
        of each; returns after the last period's."""
        ends = 1
        while ends <= len(self.periods):
            now_s = time.perf_counter() - started
            if now_s >= ends * self.period_s:
                sample = await self.sample(client, now_s)
                print(f"minute {ends}: " + json.dumps(sample), file=sys.stderr)
                ends += 1
                continue
            self.periods[min(int(now_s // self.period_s), len(self.periods) - 1)].queues.append(
                await queue_depths(client, self.keys)
            )
            await asyncio.sleep(max(0.0, min(self.queue_every_s, ends * self.period_s - now_s)))


def plateau(samples: list[dict[str, Any]], tolerance: float, rate: float) -> list[dict[str, Any]]:
    """Per figure: the largest of the last :data:`PLATEAU_PERIODS` samples against the one before them
    (in a short run, against the end of the first period: after the warm-up, connections still open)."""
    reference_index = max(min(1, len(samples) - 2), len(samples) - 1 - PLATEAU_PERIODS)
    reference, window = samples[reference_index], samples[reference_index + 1 :]
    rows = []
    for figure in reference:
        if figure == "t_s":
            continue
        slack = 2.0 if figure.endswith("_fds") else rate if figure in ("async_queued", "blocking_waiting") else 0.0
        top = max(s[figure] for s in window)
        gone = figure.endswith(("_rss", "_fds")) and any(s[figure] == 0 for s in window)  # the process exited
        growth = (top - reference[figure]) / reference[figure] if reference[figure] else 0.0 if top == 0 else None
        rows.append(
            {
                "figure": figure,
                "from_minute": reference_index,
                "to_minutes": [reference_index + 1, len(samples) - 1],
                "reference": reference[figure],
                "largest": top,
                "growth": growth,
                "gone": gone,
                "met": not gone and top <= reference[figure] * (1 + tolerance) + slack,
            }
        )
    return rows


async def main(args: argparse.Namespace) -> dict[str, Any]:
    total = int(args.rate * args.minutes * args.minute_s)
    warm_n = int(args.rate)
    kinds = schedule(total + warm_n)
    warm = [(kind, hook_input(kind, i, args.sessions)) for i, kind in enumerate(kinds[total:], start=total)]
    steady = ((kind, hook_input(kind, i, args.sessions)) for i, kind in enumerate(kinds[:total]))
    settings = f"  decisionLog: {{maxLength: {args.log_max}}}\n" if args.log_max else ""
    RESULTS.mkdir(exist_ok=True)
    with platform(args.dispatchers, settings) as running:
        pids = {name: pid for name, pid in running.pids().items() if name != "hook server"}
        soak = Soak(args.minutes, args.minute_s, pids, args.queue_every_s)
        client = aioredis.Redis.from_url(running.redis.url)
        try:
            print(f"warm-up: {len(warm)} events at {args.rate / 4:g}/s", file=sys.stderr)
            await open_loop(running.port, warm, args.rate / 4, args.connections, 30)
            await soak.sample(client, 0.0)
            print(
                f"steady: {total} events at {args.rate:g}/s over {args.minutes} x {args.minute_s:g} s", file=sys.stderr
            )
            started = time.perf_counter()
            load = asyncio.create_task(open_loop(running.port, steady, args.rate, args.connections, 30, soak.record))
            watching = asyncio.create_task(soak.watch(client, started))
            await asyncio.wait({load, watching}, return_when=asyncio.FIRST_EXCEPTION)
            for task, other in ((load, watching), (watching, load)):
                error = task.exception() if task.done() else None
                if error is not None:
                    other.cancel()
                    await asyncio.gather(other, return_exceptions=True)
                    raise error
        finally:
            await client.aclose()
        # A role that exits mid-run is not restarted here (hookbus up would): say so.
        exited = {
            name: process.returncode
            for name, process in zip(running.pids(), running.roles, strict=False)
            if process.poll() is not None
        }
    minutes = [period.summary() for period in soak.periods]
    everything = [latency for period in soak.periods for latency in period.latencies_s] or [0.0]
    p99s = [m["p99_ms"] for m in minutes]
    worst = max(range(len(p99s)), key=p99s.__getitem__)
    return {
        "args": vars(args),
        "minutes": minutes,
        "samples": soak.samples,
        "exited": exited,
        "overall": {
            "events": len(everything),
            "p50_ms": percentile(everything, 0.5) * 1000,
            "p99_ms": percentile(everything, 0.99) * 1000,
            "max_ms": max(everything) * 1000,
            "fail_open": sum(m["fail_open"] for m in minutes),
            "errors": sum(m["errors"] for m in minutes),
        },
        "p99_flat": {
            "first_ms": p99s[0],
            "worst_minute": worst + 1,
            "worst_ms": p99s[worst],
            "ratio": p99s[worst] / p99s[0] if p99s[0] else None,
            "met": bool(p99s[0]) and p99s[worst] <= 2 * p99s[0],
        },
        "plateau": plateau(soak.samples, args.tolerance, args.rate),
    }


def roles(sample: dict[str, Any]) -> list[str]:
    return [key[:-4] for key in sample if key.endswith("_rss")]


def markdown(out: dict[str, Any]) -> str:
    args, overall, flat = out["args"], out["overall"], out["p99_flat"]
    cap = f"decision log capped at {args['log_max']:,}" if args["log_max"] else "decision log at its default cap"
    lines = [
        f"Mixed profile (`bench/mixed.py`) open loop at {args['rate']:g} events/s for {args['minutes']} x "
        f"{args['minute_s']:g} s ({overall['events']:,} events), {args['dispatchers']} dispatcher(s), "
        f"{args['connections']} connections, {args['sessions']} sessions, {cap}; latency from the scheduled "
        f"send time. Whole run: p50 {overall['p50_ms']:.2f} ms, p99 {overall['p99_ms']:.2f} ms, max "
        f"{overall['max_ms']:.1f} ms, {overall['fail_open']} fail-open, {overall['errors']} errors.",
        "",
        "| minute | events | p50 ms | p99 ms | max ms | fail-open | errors | generator lag p99 ms | "
        "async queue mean / max | blocking waiting max |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, m in enumerate(out["minutes"], start=1):
        blocking = m.get("blocking_unread_max", 0) + m.get("blocking_in_dispatcher_max", 0)
        lines.append(
            f"| {n} | {m['events']:,} | {m['p50_ms']:.2f} | {m['p99_ms']:.2f} | {m['max_ms']:.1f} | "
            f"{m['fail_open']} | {m['errors']} | {m['lag_p99_ms']:.2f} | "
            f"{m.get('arq_queued_mean', 0):.0f} / {m.get('arq_queued_max', 0)} | {blocking} |"
        )
    names = roles(out["samples"][0])
    lines += [
        "",
        "At the end of each minute (0: after the warm-up); RSS in MiB · open fds:",
        "",
        "| minute | " + " | ".join(names) + " | Redis used_memory MiB | keys | async queue |",
        "|---" * (len(names) + 4) + "|",
    ]
    for n, s in enumerate(out["samples"]):
        cells = [f"{s[f'{name}_rss'] * MIB:.1f} · {s[f'{name}_fds']}" for name in names]
        lines.append(
            f"| {n} | " + " | ".join(cells) + f" | {s['redis_used_memory'] * MIB:.1f} | "
            f"{s['redis_keys']:,} | {s['async_queued']} |"
        )
    rows = out["plateau"]
    first, last = rows[0]["to_minutes"] if rows else (0, 0)
    ratio = f"{flat['ratio']:.2f}x" if flat["ratio"] is not None else "n/a"
    lines += [
        "",
        f"Targets. **p99 flat** (no minute above 2x the first): worst minute {flat['worst_minute']}, "
        f"{flat['worst_ms']:.2f} ms = {ratio} minute 1's {flat['first_ms']:.2f} ms: "
        f"**{'met' if flat['met'] else 'not met'}**. **Plateau**: the largest value at the end of minutes "
        f"{first}-{last} against the end of minute {rows[0]['from_minute'] if rows else 0}, growth within "
        f"{args['tolerance']:.0%} (+2 for fds, +{args['rate']:g} for queue depths):",
        "",
        "| figure | reference | largest after | growth | plateau |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        scale, unit = (MIB, " MiB") if row["figure"].endswith(("_rss", "_memory")) else (1, "")
        growth = f"{row['growth']:+.1%}" if row["growth"] is not None else "from 0"
        verdict = "process gone" if row["gone"] else "met" if row["met"] else "**not met**"
        lines.append(
            f"| {row['figure'].replace('_', ' ')} | {row['reference'] * scale:,.1f}{unit} | "
            f"{row['largest'] * scale:,.1f}{unit} | {growth} | {verdict} |"
        )
    met = flat["met"] and all(row["met"] for row in rows) and not out["exited"]
    if out["exited"]:
        lines += [
            "",
            "Exited during the run (exit code; negative: the signal): "
            + ", ".join(f"{name} {code}" for name, code in out["exited"].items())
            + ".",
        ]
    lines += ["", f"All targets: **{'met' if met else 'not met'}**."]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500, help="events/s (default 500)")
    parser.add_argument("--minutes", type=int, default=10, help="periods (default 10)")
    parser.add_argument("--minute-s", type=float, default=60, help="seconds per period (default 60; less for checks)")
    parser.add_argument("--dispatchers", type=int, default=1)
    parser.add_argument("--connections", type=int, default=256, help="keep-alive connections (default 256)")
    parser.add_argument("--sessions", type=int, default=500, help="distinct session ids (default 500)")
    parser.add_argument("--log-max", type=int, default=50_000, help="decisionLog.maxLength (0: the default)")
    parser.add_argument("--tolerance", type=float, default=0.05, help="plateau: allowed growth (default 0.05)")
    parser.add_argument("--queue-every-s", type=float, default=1.0, help="queue sampling period (default 1 s)")
    parsed = parser.parse_args()
    if parsed.minutes < 1 or parsed.rate * parsed.minute_s < 1:
        parser.error("need at least one minute holding at least one event")
    result = uvloop.run(main(parsed))
    (RESULTS / "soak_mixed.json").write_text(json.dumps(result, indent=2))
    print(markdown(result))
