"""What the console costs, and whether it keeps up: ``python bench/console.py [--skip-page]``.

1. **The log tail** (``gateway/decisionlog/tail.py``): K subscribers follow the decision log while
   another process writes N records. *Shared*: one tail per gateway, fanned out (what the
   gateway does). *Per connection*: one tail, one ``XREAD`` loop and one decode per
   subscriber (the simple design it replaced). Reported: the reader process's CPU time per
   delivered record and the Redis commands the readers sent, as ratios per-connection/shared
   measured in the same run.
2. **The page at 500 decisions/s** (``gateway/ui``): headless Chromium (Debian's
   ``/usr/bin/chromium``) shows ``/ui`` of a real gateway while records are written into the
   log at 500/s for 10 s. Reported: animation-frame gaps (p50, p95, max) and long tasks
   (> 50 ms), against the same page idle for 5 s in the same run.

Results: stdout (markdown) and ``bench/results/console.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import redis as redis_sync

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord, now_ms
from gateway.decisionlog.tail import LogTail, Subscriber
from hookbus.platform.redis_server import EmbeddedRedis, free_port

KEYS = Keyspace()
RESULTS = Path(__file__).resolve().parent / "results" / "console.json"


def records(count: int, start: int = 0) -> list[dict[str, Any]]:
    """Realistic decision-log entries (a Bash PreToolUse each, ~600 bytes)."""
    out = []
    for i in range(start, start + count):
        session, use = f"sess-{i % 40:03d}", f"toolu_{i:012d}"
        hook_input = {
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "tool_name": "Bash",
            "tool_input": {"command": f"pytest -q tests/test_{i % 97}.py -k case_{i}"},
            "cwd": "/srv/app",
            "transcript_path": "/home/agent/.claude/projects/app/x.jsonl",
            "tool_use_id": use,
        }
        decision = ("deny", "allow", "none", "ask")[i % 4]
        record = LogRecord(
            event_id=f"ev-{i}",
            event="PreToolUse",
            tenant=f"team-{i % 3}",
            session_id=session,
            tool_name="Bash",
            outcome="decided",
            decision=decision,
            output={},
            payload=orjson.dumps(hook_input),
            received_ms=now_ms(),
            decided_ms=now_ms(),
            revision="bench",
            tool_use_id=use,
            hooks=[{"id": "4f2a9c1b7d4e", "type": "rule", "outcome": "ok", "duration_ms": 0.05, "shadow": False}],
        )
        out.append({k: v for k, v in record.encode().items()})
    return out


_WRITER = r"""
import sys, orjson, redis
url, count, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
entries = orjson.loads(sys.stdin.buffer.read())
client = redis.Redis.from_url(url)
for start in range(0, count, 100):
    with client.pipeline(transaction=False) as pipe:
        for fields in entries[start:start + 100]:
            pipe.xadd(log, {k: (v.encode() if isinstance(v, str) else v) for k, v in fields.items()})
        pipe.execute()
"""


def reader_calls(client: redis_sync.Redis) -> int:
    """XREAD, XRANGE and XREVRANGE calls Redis has served (the readers' commands; the writer only XADDs)."""
    stats: dict[str, Any] = client.info("commandstats")  # type: ignore[assignment]
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("xread", "xrange", "xrevrange"))


async def tail_case(url: str, mode: str, subscribers: int, count: int) -> dict[str, Any]:
    client = redis_sync.Redis.from_url(url)
    client.delete(KEYS.decision_log())
    tails = [LogTail(url, KEYS)] if mode == "shared" else [LogTail(url, KEYS) for _ in range(subscribers)]
    subs = [Subscriber(lambda item: True) for _ in range(subscribers)]
    for i, sub in enumerate(subs):
        await tails[0 if mode == "shared" else i].join(sub)
    got = [0] * subscribers

    async def drain(i: int) -> None:
        while got[i] < count:
            await subs[i].queue.get()
            got[i] += 1

    payload = orjson.dumps(
        [{k: (v.decode() if isinstance(v, bytes) else v) for k, v in r.items()} for r in records(count)]
    )
    commands_before = reader_calls(client)
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _WRITER, url, str(count), KEYS.decision_log(), stdin=asyncio.subprocess.PIPE
    )
    await asyncio.wait_for(asyncio.gather(writer.communicate(payload), *(drain(i) for i in range(subscribers))), 120)
    cpu_s, wall_s = time.process_time() - cpu_before, time.perf_counter() - wall_before
    commands = reader_calls(client) - commands_before
    lags = sum(sub.lags for sub in subs)
    for i, sub in enumerate(subs):
        await tails[0 if mode == "shared" else i].leave(sub)
    client.close()
    return {
        "mode": mode,
        "subscribers": subscribers,
        "records": count,
        "cpu_s": round(cpu_s, 4),
        "cpu_us_per_delivery": round(cpu_s / (count * subscribers) * 1e6, 2),
        "wall_s": round(wall_s, 3),
        "reader_commands": commands,
        "lagged": lags,
    }


def page_case(url: str, rate: int, seconds: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    client = redis_sync.Redis.from_url(url)
    monitor = """() => {
      window.__gaps = []; let last = performance.now();
      const tick = (t) => { window.__gaps.push(t - last); last = t; requestAnimationFrame(tick); };
      requestAnimationFrame(tick);
      window.__long = [];
      new PerformanceObserver((list) => list.getEntries().forEach((e) => window.__long.push(e.duration)))
        .observe({ entryTypes: ["longtask"] });
    }"""

    def window(page: Any, seconds_: float, writer: threading.Thread | None) -> dict[str, Any]:
        page.evaluate("() => { window.__gaps = []; window.__long = []; }")
        if writer is not None:
            writer.start()
        page.wait_for_timeout(seconds_ * 1000)
        if writer is not None:
            writer.join()
        gaps = sorted(page.evaluate("window.__gaps")[1:])
        long_tasks = page.evaluate("window.__long")
        return {
            "frames": len(gaps),
            "gap_p50_ms": round(statistics.median(gaps), 1),
            "gap_p95_ms": round(gaps[int(len(gaps) * 0.95) - 1], 1),
            "gap_max_ms": round(gaps[-1], 1),
            "long_tasks": len(long_tasks),
            "long_task_ms": round(sum(long_tasks), 1),
        }

    def write() -> None:
        batch = rate // 10
        entries = records(int(rate * seconds))
        started = time.perf_counter()
        for n, start in enumerate(range(0, len(entries), batch)):
            with client.pipeline(transaction=False) as pipe:
                for fields in entries[start : start + batch]:
                    pipe.xadd(KEYS.decision_log(), fields)  # type: ignore[arg-type]
                pipe.execute()
            time.sleep(max(0.0, started + (n + 1) * 0.1 - time.perf_counter()))  # pacing the load, not syncing

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1500, "height": 960})
        page.goto(f"{os.environ['CONSOLE_URL']}/ui")
        page.wait_for_selector("#status.live")
        page.evaluate(monitor)
        idle = window(page, 5, None)
        load = window(page, seconds, threading.Thread(target=write))
        shown = page.inner_text("#shown")
        browser.close()
    client.close()
    return {
        "rate": rate,
        "seconds": seconds,
        "idle": idle,
        "load": load,
        "shown": shown,
        "p95_ratio": round(load["gap_p95_ms"] / idle["gap_p95_ms"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--subscribers", type=int, nargs="+", default=[1, 10, 50])
    parser.add_argument("--skip-page", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {"tail": [], "page": None}
    with tempfile.TemporaryDirectory() as folder:
        server = EmbeddedRedis(Path(folder) / "redis", persistent=False, port=free_port()).start()
        try:
            for k in args.subscribers:
                for mode in ("shared", "per-connection"):
                    results["tail"].append(asyncio.run(tail_case(server.url, mode, k, args.records)))
            if not args.skip_page:
                port = free_port()
                env = {
                    **{k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")},
                    "HOOKBUS_REDIS_URL": server.url,
                }
                gateway = subprocess.Popen(
                    [sys.executable, "-m", "hookbus", "gateway", "--port", str(port)],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                os.environ["CONSOLE_URL"] = f"http://127.0.0.1:{port}"
                try:
                    deadline = time.monotonic() + 30
                    while (
                        subprocess.run(
                            ["curl", "-sf", f"http://127.0.0.1:{port}/healthz"], capture_output=True
                        ).returncode
                        != 0
                    ):
                        if time.monotonic() > deadline:
                            raise SystemExit("the gateway did not start")
                        time.sleep(0.1)
                    results["page"] = page_case(server.url, 500, 10)
                finally:
                    gateway.terminate()
                    gateway.wait(10)
        finally:
            server.stop()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print("| subscribers | mode | CPU µs / delivery | reader Redis commands | wall s |")
    print("|---|---|---|---|---|")
    for row in results["tail"]:
        print(
            f"| {row['subscribers']} | {row['mode']} | {row['cpu_us_per_delivery']} | {row['reader_commands']} | "
            f"{row['wall_s']} |"
        )
    for k in args.subscribers:
        shared, per = (
            next(r for r in results["tail"] if r["subscribers"] == k and r["mode"] == m)
            for m in ("shared", "per-connection")
        )
        print(
            f"{k} subscribers: per-connection/shared CPU {per['cpu_s'] / shared['cpu_s']:.2f}x, "
            f"Redis commands {per['reader_commands'] / max(1, shared['reader_commands']):.1f}x"
        )
    if results["page"]:
        page = results["page"]
        print(
            f"\npage at {page['rate']}/s for {page['seconds']} s: idle {page['idle']}, load {page['load']}; "
            f"frame-gap p95 load/idle {page['p95_ratio']}x; {page['shown']}"
        )


if __name__ == "__main__":
    main()
