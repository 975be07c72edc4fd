"""Flat memory under a long run: ``python bench/soak.py`` (a few minutes; ``--requests 1000000 --sessions 100000``).

One gateway, one dispatcher and one async worker on an embedded Redis, as ``hookbus up`` runs
them, with a policy that creates every kind of per-session key: a ``once: true`` hook (the
``once`` marker), a Stop hook that blocks (the Stop guard's counter) and an async PostToolUse
hook that leaves context for the next turn (the session's context list), next to Bash rules.
A closed loop of ``--connections`` keep-alive connections sends events round-robin over
``--sessions`` sessions until ``--requests`` are answered or ``--duration`` seconds pass.

Every ``--sample-s`` seconds: the RSS and open file descriptors of each role, Redis's
``used_memory``, its number of keys and the length of the decision log. At the end: RSS
growth of the gateway and the dispatcher from the end of warm-up (``--warmup`` of the
requests) to the end (target < 10 %), Redis memory over the second half (bounded: the
decision log is capped at ``--log-max`` entries here), and every per-session key checked for
a TTL. Everything on 127.0.0.1; bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Connection, fd_count, percentile, rss_bytes, start_roles
from mixed import stop_all

from bus.redis.keys import Keyspace
from bus.runtime.children import kill_with_parent
from hookbus.platform.redis_server import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent


POLICY = """\
hookbus:
  decisionLog: {maxLength: LOGMAX}
hooks:
  PreToolUse:
    - matcher: Bash
      hooks: [{type: rule, deny: ['Bash(rm -rf *)', 'Bash(sudo *)'], reason: dangerous}]
    - matcher: Read
      hooks: [{type: function, function: 'bench.funcs:greet_once', once: true}]
  PostToolUse:
    - matcher: '*'
      hooks: [{type: function, function: 'bench.funcs:remember_context', async: true}]
  Stop:
    - hooks: [{type: function, function: 'bench.funcs:block_stop'}]
"""
#: Per 10 events: 6 Bash, 1 Read (once), 2 PostToolUse (async, context), 1 Stop (blocked).
KINDS = ["bash", "read", "bash", "post", "bash", "bash", "stop", "bash", "post", "bash"]
#: Per-session key families (bus.redis.keys) that must always carry a TTL.
PER_SESSION = ("once:", "stopguard:", "context:", "outcome:")


def hook_input(i: int, sessions: int) -> bytes:
    kind = KINDS[i % len(KINDS)]
    base: dict[str, Any] = {
        "session_id": f"soak-{(i // len(KINDS)) % sessions}",
        "cwd": "/home/dev/project",
        "transcript_path": "/home/dev/.claude/projects/soak/session.jsonl",
        "permission_mode": "default",
        "tool_use_id": f"toolu_{i:09d}",
    }
    if kind == "bash":
        command = "rm -rf /tmp/x" if i % 13 == 0 else f"ls -la src/mod{i}"
        base |= {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": command}}
    elif kind == "read":
        base |= {"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {"file_path": f"/src/{i}.py"}}
    elif kind == "post":
        base |= {
            "hook_event_name": "PostToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": f"make t{i}"},
            "tool_response": {"stdout": "ok\n", "stderr": "", "interrupted": False},
        }
    else:
        base |= {"hook_event_name": "Stop", "stop_hook_active": False}
    return orjson.dumps(base)


async def check_ttls(client: aioredis.Redis, keys: Keyspace) -> dict[str, dict[str, int]]:
    """Per key family: how many keys, and how many without a TTL (scanned, bounded)."""
    found: dict[str, dict[str, int]] = {}
    seen = 0
    async for raw in client.scan_iter(match=keys.all_keys_pattern, count=1000):
        seen += 1
        if seen > 2_000_000:
            break
        name = raw.decode()[len(keys.prefix) :]
        family = next((f for f in PER_SESSION if name.startswith(f)), name.split(":")[0] + ":*")
        row = found.setdefault(family, {"keys": 0, "no_ttl": 0})
        row["keys"] += 1
        if family in PER_SESSION and await client.ttl(raw) == -1:  # -2: expired since the scan saw it
            row["no_ttl"] += 1
    return found


async def main(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"args": vars(args), "samples": []}
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as redis_server:
        policy = Path(state) / "soak.yaml"
        policy.write_text(POLICY.replace("LOGMAX", str(args.log_max)))
        port = free_port()
        roles = start_roles(redis_server.url, port, 1, policy)
        env = {**os.environ, "HOOKBUS_REDIS_URL": redis_server.url, "HOOKBUS_LOG_LEVEL": "warning"}
        roles.append(
            subprocess.Popen(  # noqa: ASYNC220
                [sys.executable, "-m", "hookbus", "worker", "--config", str(policy)],
                env=env,
                cwd=ROOT,
                preexec_fn=kill_with_parent,
            )
        )
        pids = {"gateway": roles[0].pid, "dispatcher": roles[1].pid, "worker": roles[2].pid}
        client = aioredis.Redis.from_url(redis_server.url)
        keys = Keyspace()
        sent = answered = failures = 0
        latencies: list[float] = []
        stop_at = time.monotonic() + args.duration
        started = time.monotonic()

        async def worker(n: int) -> None:
            nonlocal sent, answered, failures
            connection = await Connection("127.0.0.1", port).open()
            try:
                while sent < args.requests and time.monotonic() < stop_at:
                    i = sent
                    sent += 1
                    t0 = time.perf_counter()
                    status, _ = await connection.post("/v1/hooks", hook_input(i, args.sessions))
                    if len(latencies) < 200_000:
                        latencies.append(time.perf_counter() - t0)
                    answered += 1
                    failures += status != 200
            finally:
                await connection.close()

        async def sampler() -> None:
            while True:
                await sampler_once(out, client, keys, pids, answered, started)
                print(json.dumps(out["samples"][-1]), file=sys.stderr)
                await asyncio.sleep(args.sample_s)

        sampling = asyncio.create_task(sampler())
        try:
            await asyncio.gather(*(worker(n) for n in range(args.connections)))
            elapsed = time.monotonic() - started
            sampling.cancel()
            await asyncio.gather(sampling, return_exceptions=True)
            await sampler_once(out, client, keys, pids, answered, started)
            out["ttl_check"] = await check_ttls(client, keys)
            out["summary"] = {
                "answered": answered,
                "non_200": failures,
                "seconds": elapsed,
                "per_s": answered / elapsed,
                "p50_ms": percentile(latencies, 0.5) * 1000,
                "p99_ms": percentile(latencies, 0.99) * 1000,
            }
        finally:
            await client.aclose()
            stop_all(roles)
    return out


async def sampler_once(
    out: dict[str, Any], client: aioredis.Redis, keys: Keyspace, pids: dict[str, int], answered: int, started: float
) -> None:
    """One sample of memory, keys and each role's RSS and fds (also the last, after the load stopped)."""
    info = await client.info("memory")
    sample = {
        "t_s": round(time.monotonic() - started, 1),
        "answered": answered,
        "redis_used_memory": info["used_memory"],
        "redis_keys": await client.dbsize(),
        "decision_log": await client.xlen(keys.decision_log()),
    }
    for name, pid in pids.items():
        sample[f"{name}_rss"] = rss_bytes(pid)
        sample[f"{name}_fds"] = fd_count(pid)
    out["samples"].append(sample)


def markdown(out: dict[str, Any], warmup: float) -> str:
    samples, summary = out["samples"], out["summary"]
    total = summary["answered"]
    warm = next((s for s in samples if s["answered"] >= warmup * total), samples[0])
    last = samples[-1]
    half = [s for s in samples if s["answered"] >= total / 2]
    mib = 1 / (1 << 20)
    lines = [
        f"{total:,} requests over {args_sessions(out)} sessions in {summary['seconds']:.0f} s "
        f"({summary['per_s']:,.0f}/s, p50 {summary['p50_ms']:.2f} ms, p99 {summary['p99_ms']:.2f} ms, "
        f"{summary['non_200']} non-200); warm-up ends at {warm['answered']:,} requests.",
        "",
        "| role | RSS after warm-up (MiB) | RSS at the end (MiB) | growth | fds after warm-up → last sample |",
        "|---|---|---|---|---|",
    ]
    for role in ("gateway", "dispatcher", "worker"):
        before, after = warm[f"{role}_rss"], last[f"{role}_rss"]
        lines.append(
            f"| {role} | {before * mib:.1f} | {after * mib:.1f} | {(after - before) / before:+.1%} | "
            f"{warm[f'{role}_fds']} → {last[f'{role}_fds']} |"
        )
    used = [s["redis_used_memory"] for s in half] or [last["redis_used_memory"]]
    lines += [
        "",
        f"Redis used_memory over the second half: {min(used) * mib:.1f} to {max(used) * mib:.1f} MiB "
        f"(end {last['redis_used_memory'] * mib:.1f} MiB, {last['redis_keys']:,} keys, decision log "
        f"{last['decision_log']:,} entries, cap {out['args']['log_max']:,}).",
        "",
        "| key family | keys at the end | without a TTL |",
        "|---|---|---|",
    ]
    for family, row in sorted(out["ttl_check"].items()):
        ttl = str(row["no_ttl"]) if family in PER_SESSION else "(not per-session)"
        lines.append(f"| `{family}` | {row['keys']:,} | {ttl} |")
    lines += [
        "",
        "| t (s) | answered | gateway RSS MiB | dispatcher RSS MiB | worker RSS MiB | Redis MiB | keys | "
        "fds gateway · dispatcher · worker |",
        "|---|---|---|---|---|---|---|---|",
    ]
    step = max(1, len(samples) // 12)
    for s in samples[::step] + ([last] if (len(samples) - 1) % step else []):
        lines.append(
            f"| {s['t_s']} | {s['answered']:,} | {s['gateway_rss'] * mib:.1f} | "
            f"{s['dispatcher_rss'] * mib:.1f} | {s['worker_rss'] * mib:.1f} | "
            f"{s['redis_used_memory'] * mib:.1f} | {s['redis_keys']:,} | "
            f"{s['gateway_fds']} · {s['dispatcher_fds']} · {s['worker_fds']} |"
        )
    return "\n".join(lines)


def args_sessions(out: dict[str, Any]) -> str:
    return f"{out['args']['sessions']:,}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000, help="stop after this many (default 1,000,000)")
    parser.add_argument("--duration", type=float, default=180, help="or after this many seconds (default 180)")
    parser.add_argument("--sessions", type=int, default=10_000, help="distinct sessions (default 10,000)")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--sample-s", type=float, default=5)
    parser.add_argument("--warmup", type=float, default=0.2, help="share of the requests counted as warm-up")
    parser.add_argument("--log-max", type=int, default=50_000, help="decisionLog.maxLength for the run")
    parsed = parser.parse_args()
    result = uvloop.run(main(parsed))
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "soak.json").write_text(json.dumps(result, indent=2))
    print(markdown(result, parsed.warmup))
