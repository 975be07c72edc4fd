"""The platform's own cost: hookbus decisions/s against a bare JSON endpoint, same server, same load.

``python bench/platform_cost.py``: in one run, alternately,

* **bare**: ``bench/bare_endpoint.py``, a Starlette ``POST /v1/hooks`` that parses the JSON and
  answers ``{}`` (uvicorn, uvloop, httptools, one process, no Redis);
* **hookbus**: one gateway and one dispatcher with the example ``rule`` policy
  (``examples/policy.yaml``) on an embedded Redis: every request is appended to a stream,
  decided, logged and answered;

each loaded the same way: ``wrk`` (one thread, ``--connections`` keep-alive connections,
``--seconds`` per run; every request a different Bash command from ``bench/run.py``) when
it is installed (``apt-get install wrk``), else this repo's Python load generator (closed
loop). Reported: requests/s of each and their ratio per round; for hookbus also the
fail-opens the gateway counted (``hookbus_fail_open_total``) and non-2xx answers.
``--event Notification`` sends the same bodies as an event hookbus records without a decision
(appended, answered at once, logged by the dispatcher): what the decision's round trip costs is
the difference.

A Markdown table to stdout; the same figures, one object per round, to
``bench/results/platform_cost.json`` (``hookbus_p50_ms`` is ``null`` under the Python load
generator, which measures none).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import BODIES, CpuMeter, hook_caller, saturate, spy_record, spy_report, start_roles

from hookbus.platform.redis_server import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
_FAIL_OPEN = re.compile(r"^hookbus_fail_open_total\{[^}]*\} ([0-9.e+]+)$", re.MULTILINE)


def wrk_script(path: Path, bodies: list[bytes]) -> Path:
    """A wrk Lua script that POSTs ``bodies`` in turn."""
    quoted = ",\n".join(f"[==[{body.decode()}]==]" for body in bodies)
    path.write_text(
        f"local bodies = {{\n{quoted}\n}}\nlocal i = 0\n"
        "request = function()\n  i = i + 1\n"
        '  return wrk.format("POST", "/v1/hooks", {["Content-Type"] = "application/json"}, bodies[(i % #bodies) + 1])\n'
        "end\n"
    )
    return path


def run_wrk(port: int, script: Path, connections: int, seconds: float) -> dict[str, float]:
    wrk = shutil.which("wrk")
    assert wrk is not None
    done = subprocess.run(
        [
            wrk,
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-s",
            str(script),
            f"http://127.0.0.1:{port}/v1/hooks",
        ],
        capture_output=True,
        text=True,
        timeout=seconds + 30,
        check=True,
    )
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", done.stdout)
    total = re.search(r"(\d+) requests in", done.stdout)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", done.stdout)
    p50 = re.search(r"50%\s+([0-9.]+)(us|ms|s)", done.stdout)
    if rate is None or total is None:
        raise RuntimeError(f"unexpected wrk output:\n{done.stdout}\n{done.stderr}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    return {
        "per_s": float(rate[1]),
        "requests": float(total[1]),
        "non_2xx": float(bad[1]) if bad else 0.0,
        "p50_ms": float(p50[1]) * scale[p50[2]] if p50 else float("nan"),
    }


async def run_python(port: int, connections: int, seconds: float, bodies: list[bytes]) -> dict[str, float]:
    done, elapsed, _ = await saturate(hook_caller(port, bodies), connections, seconds)
    return {"per_s": done / elapsed, "requests": float(done), "non_2xx": 0.0, "p50_ms": float("nan")}


def fail_opens(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(float(value) for value in _FAIL_OPEN.findall(text))


def bodies_for(event: str) -> list[bytes]:
    """The Bash tool calls of ``bench/run.py``, sent as ``event``."""
    return (
        BODIES
        if event == "PreToolUse"
        else [
            body.replace(b'"hook_event_name":"PreToolUse"', b'"hook_event_name":' + orjson.dumps(event))
            for body in BODIES
        ]
    )


async def load(port: int, args: argparse.Namespace, script: Path | None) -> dict[str, float]:
    if script is not None:
        run_wrk(port, script, args.connections, 1)  # warm-up
        return await asyncio.to_thread(run_wrk, port, script, args.connections, args.seconds)
    await run_python(port, args.connections, 1, args.bodies)
    return await run_python(port, args.connections, args.seconds, args.bodies)


async def bare_round(args: argparse.Namespace, script: Path | None) -> dict[str, float]:
    port = free_port()
    server = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bare_endpoint.py"), str(port)])  # noqa: ASYNC220
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        meter = CpuMeter({"server": server.pid})
        meter.start()
        result = await load(port, args, script)
        meter.stop()
        result["server_cpu_us"] = meter.per_request_us(int(result["requests"]))["server"]
        return result
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)


async def hookbus_round(args: argparse.Namespace, script: Path | None) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as state, EmbeddedRedis(state, persistent=False) as redis_server:
        port = free_port()
        roles = start_roles(redis_server.url, port, 1)
        try:
            meter = CpuMeter({"gateway": roles[0].pid, "dispatcher": roles[1].pid, "redis": redis_server.pid or 0})
            before = fail_opens(port)
            spies = []
            if args.profile:  # the first round only: py-spy costs CPU of its own
                args.profile = False
                RESULTS.mkdir(exist_ok=True)
                for name, pid in (("gateway", roles[0].pid), ("dispatcher", roles[1].pid)):
                    spy = spy_record(pid, args.seconds - 1, RESULTS / f"platform-{name}.raw")
                    if spy is not None:
                        spies.append((name, spy))
            meter.start()
            result = await load(port, args, script)
            meter.stop()
            for name, spy in spies:
                spy.wait(30)
                print(spy_report(RESULTS / f"platform-{name}.raw", f"{name} (py-spy, round 1)", args.top) + "\n")
            result["fail_open"] = fail_opens(port) - before
            for name, us in meter.per_request_us(int(result["requests"])).items():
                result[f"{name}_cpu_us"] = us
            return result
        finally:
            for role in roles:
                role.send_signal(signal.SIGTERM)
            for role in roles:
                role.wait(10)


async def main(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``args.rounds`` alternating rounds, print the table and return what ``platform_cost.json`` holds."""
    found = []
    with tempfile.TemporaryDirectory() as scratch:
        use_wrk = shutil.which("wrk") is not None and not args.python
        args.bodies = bodies_for(args.event)
        script = wrk_script(Path(scratch) / "post.lua", args.bodies[:600]) if use_wrk else None
        loader = "wrk -t1" if script else "the Python load generator"
        rows = [
            "| round | bare endpoint (requests/s) | hookbus (decisions/s) | ratio | hookbus p50 ms | "
            "fail-open | non-2xx | CPU µs / request: bare server · gateway · dispatcher · Redis | "
            "CPU per decision ÷ bare |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        ratios, cpu_ratios = [], []
        for n in range(1, args.rounds + 1):
            bare = await bare_round(args, script)
            hb = await hookbus_round(args, script)
            ratio = hb["per_s"] / bare["per_s"]
            ratios.append(ratio)
            cpu_us = hb["gateway_cpu_us"] + hb["dispatcher_cpu_us"] + hb["redis_cpu_us"]
            cpu_ratios.append(cpu_us / bare["server_cpu_us"])
            p50_text = "n/a" if math.isnan(hb["p50_ms"]) else f"{hb['p50_ms']:.2f}"  # the Python generator has none
            rows.append(
                f"| {n} | {bare['per_s']:,.0f} | {hb['per_s']:,.0f} | {ratio:.2f}x | {p50_text} | "
                f"{hb['fail_open']:.0f} | {hb['non_2xx']:.0f} | {bare['server_cpu_us']:.0f} · "
                f"{hb['gateway_cpu_us']:.0f} · {hb['dispatcher_cpu_us']:.0f} · {hb['redis_cpu_us']:.0f} | "
                f"{cpu_ratios[-1]:.2f}x |"
            )
            print(rows[-1], file=sys.stderr)
            found.append(
                {
                    "round": n,
                    "bare_per_s": bare["per_s"],
                    "hookbus_per_s": hb["per_s"],
                    "ratio": ratio,
                    "hookbus_p50_ms": None if math.isnan(hb["p50_ms"]) else hb["p50_ms"],
                    "fail_open": round(hb["fail_open"]),
                    "non_2xx": round(hb["non_2xx"]),
                    "bare_cpu_us": bare["server_cpu_us"],
                    "gateway_cpu_us": hb["gateway_cpu_us"],
                    "dispatcher_cpu_us": hb["dispatcher_cpu_us"],
                    "redis_cpu_us": hb["redis_cpu_us"],
                    "cpu_ratio": cpu_ratios[-1],
                    "bare_requests": round(bare["requests"]),
                    "hookbus_requests": round(hb["requests"]),
                }
            )
    print(
        f"Load: {loader}, {args.connections} connections, {args.seconds:g} s per run, rounds alternate; "
        f"every request a {args.event} event.\n"
    )
    print("\n".join(rows))
    print(f"\nratio: min {min(ratios):.2f}x, max {max(ratios):.2f}x (target >= 0.4x)")
    print(f"CPU per decision ÷ bare: min {min(cpu_ratios):.2f}x, max {max(cpu_ratios):.2f}x (target <= 2.7x)")
    return {
        "loader": loader,
        "event": args.event,
        "connections": args.connections,
        "seconds": args.seconds,
        "rounds": found,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway and the dispatcher (round 1)")
    parser.add_argument("--top", type=int, default=15, help="functions per profile table (default 15)")
    parser.add_argument("--python", action="store_true", help="use the Python load generator even if wrk is there")
    parser.add_argument(
        "--event",
        default="PreToolUse",
        help="hook_event_name of every request (default PreToolUse, decided by the rules; "
        "Notification: recorded, no decision to wait for)",
    )
    result = uvloop.run(main(parser.parse_args()))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "platform_cost.json").write_text(json.dumps(result, indent=2, allow_nan=False))
