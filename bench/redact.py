"""What masking secrets costs a decision: ``python bench/redact.py``.

The §1 traffic of BENCHMARKS.md (blocking PreToolUse Bash decisions with the example rule
policy, through the gateway) at a steady rate, with redaction off (``hookbus.redact.builtins:
false``, nothing to mask), with the default (every built-in detector) and with the default
plus policy masks (a pointer, masking ``tool_input.description`` in every record, and a regex),
all three running at once on one Redis (each with its own key prefix), with one steady stream
of requests dealt to them in turn: whatever else loads the machine loads all three alike. Two
mixes: the §1 commands (no secret: the common case, every string still scanned) and the same
commands each carrying a secret (every record re-serialised). Then the cost of
:func:`bus.decisionlog.masking.redact_record` alone, in-process, on the same inputs, for a figure that the
±15 % run-to-run noise of the end-to-end p50 cannot hide. Results: stdout (markdown) and
``bench/results/redact.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import BODIES, POLICY, Connection, cpu_s, hook_input, saturate, start_roles, steady_rate, summarize

from bus.decisionlog.masking import redact_record
from bus.redaction.redact import Redactor
from bus.stream.protocol import LogRecord
from hookbus.platform.redis_server import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
MASKS: dict[str, Any] = {
    "pointers": ["/tool_input/description"],
    "patterns": [{"name": "employee-id", "regex": "EMP-[0-9]{6}"}],
}
SECRET_COMMANDS = [
    "curl -H 'Authorization: Bearer Q7xLm2Vr9Tb4Wc8Yz1Hd6Jf3Gs0Pk{i:05d}' https://api.acme.dev/v2/items",
    "GITHUB_TOKEN=ghp_Zq8Lm2Vx7Rt4Wn3Bc5Yz1Hd6Jf0Gs9P{i:05d} gh pr list",
    "psql postgres://app:pg-Pa55w0rd-{i}@db.internal:5432/shop -c 'select 1'",
    "aws s3 ls --profile ci && export AWS_ACCESS_KEY_ID=AKIAQ3EGW2VJ7X{i:06d}",
]
SECRET_BODIES = [hook_input(SECRET_COMMANDS[i % len(SECRET_COMMANDS)].format(i=i), i) for i in range(8192)]


def write_policy(folder: Path, name: str, redact: dict[str, Any]) -> Path:
    policy = yaml.safe_load(POLICY.read_text())
    policy.setdefault("hookbus", {})["redact"] = redact
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(policy))
    return path


def start_platform(url: str, port: int, policy: Path, prefix: str) -> list[subprocess.Popen[bytes]]:
    """A gateway and a dispatcher on ``port`` with their own key prefix (several share one Redis)."""
    os.environ["HOOKBUS_KEY_PREFIX"] = prefix  # start_roles passes this process's environment on
    try:
        return start_roles(url, port, 1, policy)
    finally:
        del os.environ["HOOKBUS_KEY_PREFIX"]


async def interleaved(
    ports: dict[str, int], dispatchers: dict[str, int], bodies: list[bytes], rate: float, duration_s: float, shift: int
) -> dict[str, dict[str, float]]:
    """One steady stream of requests dealt round-robin to the platforms: all see the same load at once.
    Also each dispatcher's CPU per decision (``cpu_us``), which does not depend on what else runs."""
    modes = list(ports)
    latencies: dict[str, list[float]] = {mode: [] for mode in modes}

    async def make_call() -> Any:
        connections = {mode: await Connection("127.0.0.1", port).open() for mode, port in ports.items()}

        async def call(i: int) -> None:
            mode = modes[(i + shift) % len(modes)]
            started = time.perf_counter()
            status, body = await connections[mode].post("/v1/hooks", bodies[i % len(bodies)])
            latencies[mode].append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"gateway answered {status}: {body[:200]!r}")

        return call

    await saturate(make_call, 8, 1.0)  # warm-up
    for found in latencies.values():
        found.clear()
    cpu_before = {mode: cpu_s(pid) for mode, pid in dispatchers.items()}
    await steady_rate(make_call, rate, duration_s)
    cpu_us = {mode: (cpu_s(pid) - cpu_before[mode]) * 1e6 / len(latencies[mode]) for mode, pid in dispatchers.items()}
    return {mode: {**summarize(found), "cpu_us": cpu_us[mode]} for mode, found in latencies.items()}


def record_for(body: bytes) -> tuple[LogRecord, dict[str, Any]]:
    parsed = orjson.loads(body)
    reason = "hookbus dangerous-commands pack (rule: Bash(rm -rf /))"
    deny = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    return LogRecord(
        event_id="e",
        event="PreToolUse",
        tenant="default",
        session_id=parsed["session_id"],
        outcome="decided",
        decision="deny",
        output=deny,
        payload=body,
        received_ms=0,
        decided_ms=1,
        hooks=[{"id": "h", "type": "rule", "outcome": "ok", "duration_ms": 0.01, "shadow": False}],
        tool_name="Bash",
        tool_use_id=parsed["tool_use_id"],
    ), parsed


def micro(bodies: list[bytes], redactor: Redactor, runs: int = 7) -> float:
    """Microseconds of :func:`redact_record` per event (best of ``runs`` passes over ``bodies``)."""
    best = float("inf")
    for _ in range(runs):
        prepared = [record_for(body) for body in bodies[:2000]]  # fresh: records are masked in place
        started = time.perf_counter()
        for record, parsed in prepared:
            redact_record(redactor, record, parsed)
        best = min(best, (time.perf_counter() - started) / len(prepared))
    return best * 1e6


async def main(args: argparse.Namespace) -> dict[str, Any]:
    mixes = {"no secret (§1 commands)": BODIES, "a secret in every command": SECRET_BODIES}
    modes = ("off", "default", "masks")
    runs: dict[str, dict[str, list[dict[str, float]]]] = {mix: {mode: [] for mode in modes} for mix in mixes}
    with tempfile.TemporaryDirectory() as state:
        folder = Path(state)
        policies = {
            "off": write_policy(folder, "off", {"builtins": False}),
            "default": write_policy(folder, "default", {}),
            "masks": write_policy(folder, "masks", MASKS),
        }
        with EmbeddedRedis(state, persistent=False) as redis_server:
            ports = {mode: free_port() for mode in modes}
            platforms = {
                mode: start_platform(redis_server.url, ports[mode], policies[mode], f"bench-{mode}:") for mode in modes
            }
            roles = [role for started in platforms.values() for role in started]
            dispatchers = {mode: started[1].pid for mode, started in platforms.items()}
            try:
                for round_ in range(args.rounds):
                    for mix, bodies in mixes.items():
                        print(f"round {round_ + 1}: {mix} ...", file=sys.stderr)
                        found = await interleaved(ports, dispatchers, bodies, args.rate, args.duration, round_)
                        for mode in modes:
                            runs[mix][mode].append(found[mode])
            finally:
                for role in roles:
                    role.send_signal(signal.SIGTERM)
                for role in roles:
                    role.wait(10)
    redactors = {
        "default": Redactor(),
        "masks": Redactor(MASKS["pointers"], [(p["name"], p["regex"]) for p in MASKS["patterns"]]),
    }
    write = [
        orjson.dumps(
            {
                **orjson.loads(BODIES[0]),
                "tool_name": "Write",
                "tool_input": {
                    "file_path": "src/app.py",
                    "content": (ROOT / "bus" / "runtime" / "retry.py").read_text()[:4096],
                },
            }
        )
    ]
    return {
        "args": vars(args),
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}",
        "end_to_end": runs,
        "micro_us": {
            mode: {mix: micro(bodies, redactor) for mix, bodies in mixes.items()}
            for mode, redactor in redactors.items()
        },
        "micro_4kb_write_us": micro(write, redactors["default"]),
    }


def report(results: dict[str, Any]) -> str:
    rows = [
        "| traffic | redaction | p50 (ms) | p50 vs off (median of the rounds' ratios) | p99 (ms) | "
        "dispatcher CPU (µs/decision) | `redact_record` (µs/event) | that / p50 off |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mix, modes in results["end_to_end"].items():
        p50 = {mode: statistics.median(r["p50_ms"] for r in runs) for mode, runs in modes.items()}
        p99 = {mode: statistics.median(r["p99_ms"] for r in runs) for mode, runs in modes.items()}
        for mode in modes:
            cost_us = results["micro_us"].get(mode, {}).get(mix)
            # Each round's platforms saw the same load at the same time: compare within rounds.
            paired = [on["p50_ms"] / off["p50_ms"] - 1 for on, off in zip(modes[mode], modes["off"], strict=True)]
            change = "-" if mode == "off" else f"{100 * statistics.median(paired):+.1f} %"
            cost = "-" if cost_us is None else f"{cost_us:.1f}"
            share = "-" if cost_us is None else f"{cost_us / 10 / p50['off']:.1f} %"
            cpu = statistics.median(r["cpu_us"] for r in modes[mode])
            rows.append(
                f"| {mix} | {mode} | {p50[mode]:.3f} | {change} | {p99[mode]:.3f} | {cpu:.0f} | {cost} | {share} |"
            )
    each = "; ".join(
        f"{mix} {mode} {[round(r['p50_ms'], 3) for r in runs]}"
        for mix, modes in results["end_to_end"].items()
        for mode, runs in modes.items()
    )
    args = results["args"]
    return "\n".join(
        [
            f"{args['rounds']} rounds, {args['rate']}/s dealt in turn to the three platforms for {args['duration']} s; "
            "medians of the rounds; "
            f"{results['machine']}",
            "",
            *rows,
            "",
            f"- p50 of each round (ms): {each}",
            "- `redact_record` on a PreToolUse Write with 4 KB of content (default): "
            f"{results['micro_4kb_write_us']:.0f} µs",
        ]
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500, help="steady rate, requests/s (default 500)")
    parser.add_argument("--duration", type=float, default=10, help="seconds per steady run (default 10)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    results = uvloop.run(main(parser.parse_args()))
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "redact.json").write_text(json.dumps(results, indent=2))
    print(report(results))
