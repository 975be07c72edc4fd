"""What one tenant's flood of costly commands does to another tenant: ``python bench/tenants.py``.

A real ``hookbus up`` (examples/policy.yaml, two tenants) on 127.0.0.1. Tenant ``alice`` sends
``rm -rf /`` one request at a time, first alone (the baseline), then while tenant ``mallory``
sends 64 KiB commands that are the costliest to judge (subcommands ending in an expansion,
backticks, pipelines) on ``--connections`` connections. For each phase: alice's p50 and p99
latency, how many of her requests were not denied (failed open), and mallory's requests
answered. Bounded in count: ``--requests`` of alice's per phase. Results: stdout and
``bench/results/tenants.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.hostile.test_tenants import mallory_commands  # noqa: E402
from tests.up import running_up  # noqa: E402

TOKENS = {"HOOKBUS_TOKENS": "alice:tok-alice,mallory:tok-mallory"}


def body(session: str, command: str) -> bytes:
    return orjson.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "cwd": "/work",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
    )


def alice(url: str, requests: int) -> dict[str, Any]:
    latencies_ms, not_denied = [], 0
    with httpx.Client(base_url=url, timeout=30, headers={"Authorization": "Bearer tok-alice"}) as client:
        for i in range(requests):
            started = time.perf_counter()
            reply = client.post("/v1/hooks", content=body(f"a-{i % 8}", "rm -rf /"))
            latencies_ms.append((time.perf_counter() - started) * 1000)
            answer = reply.json() if reply.is_success else {}
            if answer.get("hookSpecificOutput", {}).get("permissionDecision") != "deny":
                not_denied += 1
    cuts = statistics.quantiles(latencies_ms, n=100)
    return {"p50_ms": round(cuts[49], 2), "p99_ms": round(cuts[98], 2), "not_denied": not_denied}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--connections", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_up(Path(tmp), REPO / "examples" / "policy.yaml", TOKENS) as up:
        alice(up.url, 50)  # warm up
        quiet = alice(up.url, args.requests)
        stop = threading.Event()
        answered = [0]

        def flood(k: int) -> None:
            with httpx.Client(base_url=up.url, timeout=30, headers={"Authorization": "Bearer tok-mallory"}) as client:
                n = k
                while not stop.is_set() and n < 100_000:
                    client.post("/v1/hooks", content=body(f"m-{k}", mallory_commands(n)))
                    answered[0] += 1
                    n += args.connections

        flooders = [threading.Thread(target=flood, args=(k,), daemon=True) for k in range(args.connections)]
        for thread in flooders:
            thread.start()
        try:
            flooded = alice(up.url, args.requests)
        finally:
            stop.set()
            for thread in flooders:
                thread.join(timeout=60)
    result = {"quiet": quiet, "flooded": flooded, "mallory_answered": answered[0], "connections": args.connections}
    print(json.dumps(result, indent=1))
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "tenants.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
