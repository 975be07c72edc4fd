"""What each handler type costs: ``python bench/handlers.py``.

The same PreToolUse traffic through the gateway with a one-handler policy of each type:
``rule`` (in-process), ``function`` (a Python callable in a worker thread), ``http`` (a POST
to a loopback server in a process of its own, ``bench/hook_server.py``) and ``command`` (a
Python script spawned per event, run centrally). p50/p99 at a steady rate and throughput at saturation for each.

A Markdown table to stdout; the same figures to ``bench/results/handlers.json`` (``null`` where
there is none: ``command`` is not saturated, so it has no throughput and no CPU per decision).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import BODIES, CpuMeter, hook_caller, saturate, start_roles, steady_rate, summarize
from platform_cost import run_wrk, wrk_script

from hookbus.platform.redis_server import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
HEAD = "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n"
POLICIES = {
    "rule": HEAD + "        - {type: rule, deny: ['Bash(rm -rf *)', 'Bash(sudo *)'], reason: denied}\n",
    "function": HEAD + "        - {type: function, function: 'bench.funcs:deny_rm'}\n",
    "http": "hookbus: {http: {allowedNetworks: ['127.0.0.0/8']}}\n"
    + HEAD
    + "        - {type: http, url: 'http://127.0.0.1:{port}/hook'}\n",
    "command": HEAD + f"        - {{type: command, command: '{sys.executable} {ROOT / 'bench' / 'local_hook.py'}'}}\n",
}


async def measure(
    port: int,
    rate: float,
    duration_s: float,
    saturate_s: float,
    concurrency: int,
    meter: CpuMeter | None = None,
    wrk_script_path: Path | None = None,
) -> dict[str, Any]:
    make_call = hook_caller(port)
    await saturate(make_call, 8, 0.5)
    steady = summarize(await steady_rate(make_call, rate, duration_s))
    if meter is not None:
        meter.start()
    if saturate_s and wrk_script_path is not None:  # wrk: the load generator's own CPU stays small
        found = await asyncio.to_thread(run_wrk, port, wrk_script_path, concurrency, saturate_s)
        done, seconds = int(found["requests"]), saturate_s
    else:
        done, seconds, _ = await saturate(make_call, concurrency, saturate_s) if saturate_s else (0, 1.0, [])
    cpu_us = meter.per_request_us(done) if meter is not None and meter.stop() and done else {}
    return {"steady": steady, "throughput_per_s": done / seconds, "cpu_us": cpu_us}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run each of ``args.types``, print the table and return what ``handlers.json`` holds."""
    loader = "wrk -t1" if args.wrk else "the Python load generator"
    found: dict[str, dict[str, Any]] = {}
    hook_port = free_port()
    hook_server = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, str(ROOT / "bench" / "hook_server.py"), str(hook_port)]
    )
    rows = [
        "| handler type | p50 (ms) | p99 (ms) | throughput at saturation (decisions/s) | dispatcher CPU µs "
        "/ decision | gateway CPU µs / decision | Redis CPU µs / decision |",
        "|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as redis_server:
        for name in args.types:
            policy = Path(state) / f"{name}.yaml"
            policy.write_text(POLICIES[name].replace("{port}", str(hook_port)))
            port = free_port()
            roles = start_roles(redis_server.url, port, 1, policy)
            try:
                slow = name == "command"
                meter = CpuMeter({"gateway": roles[0].pid, "dispatcher": roles[1].pid, "redis": redis_server.pid or 0})
                script = wrk_script(Path(state) / "post.lua", BODIES[:600]) if args.wrk and not slow else None
                rate, saturate_s = (args.rate / 10, 0) if slow else (args.rate, args.saturate_s)
                result = await measure(
                    port, rate, args.duration, saturate_s, 16 if slow else args.concurrency, meter, script
                )
            finally:
                for role in roles:
                    role.send_signal(signal.SIGTERM)
                for role in roles:
                    role.wait(10)
            s = result["steady"]
            throughput = f"{result['throughput_per_s']:,.0f}" if result["throughput_per_s"] else "-"
            cpu = result["cpu_us"]
            rows.append(
                f"| `{name}` | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {throughput} | "
                f"{cpu.get('dispatcher', 0):.0f} | {cpu.get('gateway', 0):.0f} | {cpu.get('redis', 0):.0f} |"
            )
            print(rows[-1], file=sys.stderr)
            found[name] = {
                "p50_ms": s["p50_ms"],
                "p99_ms": s["p99_ms"],
                "per_s": result["throughput_per_s"] or None,
                **{f"{role}_cpu_us": cpu.get(role) for role in ("dispatcher", "gateway", "redis")},
                "rate_per_s": rate,
                "saturate_s": saturate_s,
                "steady_decisions": s["n"],
            }
    hook_server.terminate()
    hook_server.wait()
    print(
        f"Steady rate {args.rate}/s ({args.rate / 10}/s for `command`) for {args.duration} s; saturation "
        f"{args.concurrency} connections for {args.saturate_s} s ({loader}).\n"
    )
    print("\n".join(rows))
    return {
        "args": {
            "rate_per_s": args.rate,
            "command_rate_per_s": args.rate / 10,
            "duration_s": args.duration,
            "saturate_s": args.saturate_s,
            "concurrency": args.concurrency,
            "loader": loader,
            "types": args.types,
        },
        "handlers": found,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200)
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--saturate-s", type=float, default=4)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument(
        "--wrk",
        action=argparse.BooleanOptionalAction,
        default=shutil.which("wrk") is not None,
        help="saturate with wrk (default: when installed)",
    )
    parser.add_argument("--types", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    result = uvloop.run(main(parser.parse_args()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "handlers.json").write_text(json.dumps(result, indent=2, allow_nan=False))
