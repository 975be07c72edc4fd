"""A fleet-like traffic mix, open loop at a fixed rate: ``python bench/mixed.py``.

The mix (per 20 events): 2 PreToolUse WebFetch to an ``http`` hook (a loopback hook server in
a process of its own, ``bench/hook_server.py``), 2 PreToolUse Write to a ``function`` hook,
6 PreToolUse Bash under ``rule`` lists, 1 UserPromptSubmit whose ``http`` hook adds context
(``additionalContext``), 6 PostToolUse and 2 Notification with ``async`` http hooks (run by the
arq worker, off the agent's path), 1 Stop blocked by a ``function`` hook.
Sessions are spread over ``--sessions`` ids. One gateway, ``--dispatchers`` dispatchers and one
async worker, as ``hookbus up`` runs them, on an embedded Redis.

Requests leave on a fixed schedule (open loop; a free keep-alive connection is taken from a
pool of ``--connections``) and latency counts from each request's *scheduled* send time, so
queueing anywhere, in the load generator included, shows. Reported: p50/p99/max overall and
per kind, fail-opens (``X-Hookbus-Outcome: fail-open``) and errors, the generator's own lag,
each role's CPU per event, and with ``--profile`` the top costs of the gateway and the
dispatcher from py-spy. Every loop is bounded in count and time; everything is on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import COMMANDS, Connection, CpuMeter, percentile, spy_record, spy_report, start_roles

from bus.redis.keys import DISPATCH_GROUP, Keyspace
from bus.runtime.children import kill_with_parent
from hookbus.platform.redis_server import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
#: Kinds per 20 events: 10 % WebFetch, 10 % Write, 30 % Bash, 5 % UserPromptSubmit, 30 % PostToolUse,
#: 10 % Notification, 5 % Stop.
MIX = {"webfetch": 2, "write": 2, "bash": 6, "prompt": 1, "post": 6, "notification": 2, "stop": 1}
POLICY = """\
hookbus:
  http: {allowedNetworks: ['127.0.0.0/8']}
hooks:
  PreToolUse:
    - matcher: WebFetch
      hooks: [{type: http, url: 'http://127.0.0.1:PORT/hook', timeout: 5}]
    - matcher: Write
      hooks: [{type: function, function: 'bench.funcs:check_write'}]
    - matcher: Bash
      hooks:
        - {type: rule, deny: ['Bash(rm -rf *)', 'Bash(sudo *)', 'Bash(git push --force*)'], reason: dangerous}
  UserPromptSubmit:
    - hooks: [{type: http, url: 'http://127.0.0.1:PORT/hook', timeout: 5}]
  PostToolUse:
    - matcher: '*'
      hooks: [{type: http, url: 'http://127.0.0.1:PORT/hook', async: true}]
  Notification:
    - hooks: [{type: http, url: 'http://127.0.0.1:PORT/hook', async: true}]
  Stop:
    - hooks: [{type: function, function: 'bench.funcs:block_stop'}]
"""


def stop_all(processes: list[subprocess.Popen[bytes]], timeout_s: float = 15) -> None:
    """SIGTERM each, then SIGKILL what has not exited within ``timeout_s``."""
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


@dataclasses.dataclass
class Platform:
    """The processes of a mixed-profile run: the roles as ``hookbus up`` runs them, the loopback
    hook server and the embedded Redis."""

    port: int
    redis: EmbeddedRedis
    roles: list[subprocess.Popen[bytes]]  # the gateway, the dispatchers, the async worker
    hook_server: subprocess.Popen[bytes]

    def pids(self) -> dict[str, int]:
        """Process ids by role name (``dispatcher0``, ``dispatcher1``, ...)."""
        return {
            "gateway": self.roles[0].pid,
            **{f"dispatcher{n}": r.pid for n, r in enumerate(self.roles[1:-1])},
            "worker": self.roles[-1].pid,
            "redis": self.redis.pid or 0,
            "hook server": self.hook_server.pid,
        }


@contextlib.contextmanager
def platform(
    dispatchers: int, settings: str = "", functions: str = "sync", worker_cpu: str = "idle"
) -> Iterator[Platform]:
    """Start the hook server, an embedded Redis and the roles with :data:`POLICY` (``functions``:
    ``async`` for its ``function`` hooks written as coroutine functions; ``settings``:
    extra YAML lines under its ``hookbus:`` key); stop all of them on exit."""
    hook_port = free_port()
    hook_server = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "hook_server.py"), str(hook_port)], preexec_fn=kill_with_parent
    )
    try:
        with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as redis_server:
            policy = Path(state) / "mixed.yaml"
            text = POLICY.replace("PORT", str(hook_port)).replace("hookbus:\n", "hookbus:\n" + settings, 1)
            if functions == "async":
                for name in ("check_write", "block_stop"):
                    text = text.replace(f":{name}'", f":{name}_async'")
            policy.write_text(text)
            port = free_port()
            roles = start_roles(redis_server.url, port, dispatchers, policy)
            env = {
                "HOOKBUS_REDIS_URL": redis_server.url,
                "HOOKBUS_LOG_LEVEL": "warning",
                "HOOKBUS_WORKER_CPU": worker_cpu,
            }
            roles.append(
                subprocess.Popen(
                    [sys.executable, "-m", "hookbus", "worker", "--config", str(policy)],
                    env={**os.environ, **env},
                    cwd=ROOT,
                    preexec_fn=kill_with_parent,
                )
            )
            try:
                yield Platform(port, redis_server, roles, hook_server)
            finally:
                stop_all(roles)
    finally:
        hook_server.terminate()
        hook_server.wait(10)


def hook_input(kind: str, i: int, sessions: int) -> bytes:
    base: dict[str, Any] = {
        "session_id": f"mixed-{i % sessions}",
        "cwd": "/home/dev/project",
        "transcript_path": "/home/dev/.claude/projects/mixed/session.jsonl",
        "permission_mode": "default",
    }
    if kind == "webfetch":  # the hook server denies a body holding "rm -rf": one in seven
        url = f"https://docs.example.com/{'rm -rf' if i % 7 == 0 else 'page'}{i}"
        base |= {
            "hook_event_name": "PreToolUse",
            "tool_name": "WebFetch",
            "tool_use_id": f"toolu_{i:08d}",
            "tool_input": {"url": url, "prompt": "summarise"},
        }
    elif kind == "write":
        path = f"/etc/cron.d/job{i}" if i % 9 == 0 else f"/home/dev/project/src/mod{i}.py"
        base |= {
            "hook_event_name": "PreToolUse",
            "tool_name": "Write",
            "tool_use_id": f"toolu_{i:08d}",
            "tool_input": {"file_path": path, "content": "print('hello')\n" * 8},
        }
    elif kind == "bash":
        base |= {
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_use_id": f"toolu_{i:08d}",
            "tool_input": {"command": COMMANDS[i % len(COMMANDS)].format(i=i), "description": "mixed"},
        }
    elif kind == "prompt":  # the hook server answers with additionalContext
        base |= {"hook_event_name": "UserPromptSubmit", "prompt": f"fix the failing test in tests/test_{i}.py"}
    elif kind == "post":
        base |= {
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_use_id": f"toolu_{i:08d}",
            "tool_input": {"command": f"pytest -q tests/test_{i}.py"},
            "tool_response": {"stdout": "1 passed in 0.01s\n", "stderr": "", "interrupted": False},
        }
    elif kind == "notification":
        base |= {
            "hook_event_name": "Notification",
            "message": "Claude needs your permission to use Bash",
            "notification_type": "permission_prompt",
        }
    else:
        base |= {"hook_event_name": "Stop", "stop_hook_active": False}
    return orjson.dumps(base)


def schedule(total: int, seed: int = 7, only: list[str] | None = None) -> list[str]:
    """``total`` kinds in the mix's proportions (of the ``only`` kinds), shuffled per block (deterministic)."""
    block = [kind for kind, count in MIX.items() for _ in range(count) if not only or kind in only]
    rng = random.Random(seed)
    kinds: list[str] = []
    while len(kinds) < total:
        rng.shuffle(block)
        kinds += block
    return kinds[:total]


class HeadConnection(Connection):
    """A keep-alive connection whose :meth:`post_head` also returns the response head (for
    ``X-Hookbus-Outcome``)."""


async def open_loop(
    port: int,
    bodies: Iterable[tuple[str, bytes]],
    rate_per_s: float,
    connections: int,
    timeout_s: float,
    record: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Send ``bodies`` on a fixed schedule; one result per request (latency from its scheduled time,
    ``at_s`` that time from the first request's). With ``record`` each result goes there instead
    of the returned list, so a long run keeps nothing per request."""
    pool: asyncio.Queue[HeadConnection] = asyncio.Queue()
    for _ in range(connections):
        connection = HeadConnection("127.0.0.1", port)
        await connection.open()
        pool.put_nowait(connection)
    results: list[dict[str, Any]] = []
    keep = record or results.append
    pending: set[asyncio.Task[None]] = set()

    async def one(kind: str, body: bytes, scheduled: float) -> None:
        connection = await pool.get()
        sent = time.perf_counter()
        try:
            status, head, answer = await connection.post_head("/v1/hooks", body)
            outcome = next(
                (
                    line.split(b":", 1)[1].strip().decode()
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"x-hookbus-outcome:")
                ),
                "",
            )
            pool.put_nowait(connection)
        except (OSError, asyncio.IncompleteReadError) as exc:
            status, outcome, answer = 0, f"error: {exc!r}", b""
        done = time.perf_counter()
        keep(
            {
                "kind": kind,
                "status": status,
                "outcome": outcome,
                "latency_s": done - scheduled,
                "lag_s": sent - scheduled,
                "service_s": done - sent,
                "at_s": scheduled - start,
                "decided": b'"deny"' in answer or b'"block"' in answer,
                "context": b'"additionalContext"' in answer,
            }
        )

    start = time.perf_counter() + 0.05
    for i, (kind, body) in enumerate(bodies):
        scheduled = start + i / rate_per_s
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(kind, body, scheduled))
        pending.add(task)
        task.add_done_callback(pending.discard)
    _, late = await asyncio.wait(pending, timeout=timeout_s) if pending else (set(), set())
    for task in late:
        task.cancel()
    while not pool.empty():
        await pool.get_nowait().close()
    return results


async def queue_depths(client: aioredis.Redis, keys: Keyspace) -> dict[str, int]:
    """Where events wait: entries not yet read by a dispatcher (per stream), entries read but
    not settled (in a dispatcher), and jobs on the arq queue."""
    sample: dict[str, int] = {}
    for name, stream in (("blocking", keys.blocking_stream()), ("events", keys.events_stream())):
        groups = await client.xinfo_groups(stream)
        group = next((g for g in groups if g["name"] == DISPATCH_GROUP.encode()), None)
        last = group["last-delivered-id"] if group else b"0-0"
        sample[f"{name}_unread"] = len(await client.xrange(stream, f"({last.decode()}", "+", count=100_000))
        sample[f"{name}_in_dispatcher"] = int(group["pending"]) if group else 0
    sample["arq_queued"] = int(await client.zcard(keys.arq_queue))
    return sample


async def watch_queues(url: str, samples: list[dict[str, int]], every_s: float = 0.25) -> None:
    """:func:`queue_depths` every ``every_s`` until cancelled."""
    keys = Keyspace()
    client = aioredis.Redis.from_url(url)
    try:
        while True:
            samples.append(await queue_depths(client, keys))
            await asyncio.sleep(every_s)
    finally:
        await client.aclose()


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    latencies = [r["latency_s"] for r in results]
    return {
        "n": len(results),
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
        "fail_open": sum(r["outcome"] == "fail-open" for r in results),
        "errors": sum(r["status"] != 200 for r in results),
        "decided_deny_or_block": sum(r["decided"] for r in results),
        "with_context": sum(r["context"] for r in results),
        "lag_p99_ms": percentile([r["lag_s"] for r in results], 0.99) * 1000,
        "service_p99_ms": percentile([r["service_s"] for r in results], 0.99) * 1000,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    total = int(args.rate * args.duration)
    kinds = schedule(total + int(args.rate), only=args.kinds)
    bodies = [(kind, hook_input(kind, i, args.sessions)) for i, kind in enumerate(kinds)]
    warm, steady = bodies[total:], bodies[:total]
    out: dict[str, Any] = {"args": vars(args)}
    RESULTS.mkdir(exist_ok=True)
    with platform(args.dispatchers, functions=args.functions, worker_cpu=args.worker_cpu) as running:
        port, redis_server = running.port, running.redis
        print(f"warm-up: {len(warm)} events at {args.rate / 4:g}/s", file=sys.stderr)
        await open_loop(port, warm, args.rate / 4, args.connections, 30)
        pids = {**running.pids(), "load generator": os.getpid()}
        meter = CpuMeter(pids)
        spies = []
        if args.profile:
            for name in ("gateway", "dispatcher0", "worker"):
                spy = spy_record(pids[name], args.duration, RESULTS / f"mixed-{name}.raw")
                if spy is not None:
                    spies.append((name, spy))
        meter.start()
        started = time.perf_counter()
        print(f"steady: {len(steady)} events at {args.rate:g}/s", file=sys.stderr)
        watching = asyncio.create_task(watch_queues(redis_server.url, out.setdefault("queues", [])))
        try:
            results = await open_loop(port, steady, args.rate, args.connections, args.duration + 30)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        wall_s = time.perf_counter() - started
        meter.stop()
        out["overall"] = summary(results)
        out["kinds"] = {
            kind: summary([r for r in results if r["kind"] == kind])
            for kind in MIX
            if not args.kinds or kind in args.kinds
        }
        out["cpu_us_per_event"] = meter.per_request_us(len(results))
        out["switches_per_event"] = meter.per_request_switches(len(results))
        out["cpu_share"] = {name: used / wall_s for name, used in meter.used_s.items()}
        out["profiles"] = {}
        for name, spy in spies:
            spy.wait(args.duration + 30)
            path = RESULTS / f"mixed-{name}.raw"
            if path.exists():
                out["profiles"][name] = spy_report(path, f"{name} (py-spy, steady phase)", args.top)
    return out


def markdown(out: dict[str, Any]) -> str:
    args, overall = out["args"], out["overall"]
    lines = [
        f"Open loop at {args['rate']:g} events/s for {args['duration']:g} s ({overall['n']} events), "
        f"{args['dispatchers']} dispatcher(s), {args['connections']} connections; latency from the scheduled "
        f"send time.",
        "",
        "| kind | events | p50 ms | p99 ms | max ms | fail-open | errors | denied/blocked | with context |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, s in [("**all**", overall), *out["kinds"].items()]:
        lines.append(
            f"| {kind} | {s['n']} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {s['max_ms']:.1f} | "
            f"{s['fail_open']} | {s['errors']} | {s['decided_deny_or_block']} | {s['with_context']} |"
        )
    lines += [
        "",
        f"Load generator lag p99: {overall['lag_p99_ms']:.2f} ms; p99 from the write: "
        f"{overall['service_p99_ms']:.2f} ms.",
        "",
        "| process | CPU µs / event | share of one core | waits / event | preemptions / event |",
        "|---|---|---|---|---|",
    ]
    for name, us in out["cpu_us_per_event"].items():
        waits, preempted = out["switches_per_event"][name]
        lines.append(f"| {name} | {us:.0f} | {out['cpu_share'][name]:.0%} | {waits:.2f} | {preempted:.2f} |")
    lines += [
        "",
        "Waits are voluntary context switches (each a later wake-up), preemptions involuntary ones, "
        "of all the process's threads.",
    ]
    queues = out.get("queues") or [{}]
    lines += [
        "",
        "Where events waited (sampled every 0.25 s during the steady phase; mean / max):",
        "",
        "| queue | mean | max |",
        "|---|---|---|",
    ]
    for name in queues[0]:
        values = [q[name] for q in queues]
        lines.append(f"| {name.replace('_', ' ')} | {sum(values) / len(values):.0f} | {max(values)} |")
    for text in out.get("profiles", {}).values():
        lines += ["", text]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=2000, help="events/s (default 2000)")
    parser.add_argument("--duration", type=float, default=10, help="steady seconds (default 10)")
    parser.add_argument("--dispatchers", type=int, default=1)
    parser.add_argument("--connections", type=int, default=256, help="keep-alive connections (default 256)")
    parser.add_argument("--sessions", type=int, default=500, help="distinct session ids (default 500)")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway, a dispatcher and the worker")
    parser.add_argument(
        "--worker-cpu",
        choices=["idle", "normal"],
        default="idle",
        help="the async worker's HOOKBUS_WORKER_CPU (default idle, as hookbus up runs it)",
    )
    parser.add_argument(
        "--functions",
        choices=["sync", "async"],
        default="sync",
        help="the function hooks as plain functions (a worker thread each call) or as async def",
    )
    parser.add_argument("--kinds", nargs="+", choices=list(MIX), help="only these kinds (same proportions)")
    parser.add_argument("--top", type=int, default=12, help="functions per profile table (default 12)")
    parsed = parser.parse_args()
    result = uvloop.run(main(parsed))
    (RESULTS / "mixed.json").write_text(json.dumps(result, indent=2))
    print(markdown(result))
