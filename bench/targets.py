"""Every speed target of the "fast on every path" goals, in one run: ``python bench/targets.py``.

First measures how long an idle process takes to wake up on this host (``bench/wake.py``,
in this process: Redis PING round trips back to back and after 10 ms idle), a second
calibration figure in the header: at low rates each decision crosses about five such
wake-ups, so the p50 targets depend on it. Then drives the other benches as subprocesses
(each in a process group of its own, killed on timeout), reads the figures each wrote to
``bench/results/<bench>.json`` and puts each next to its target:

* ``bench/platform_cost.py --rounds RUNS``: hookbus decisions/s ÷ a bare Starlette endpoint's
  requests/s (≥ 0.4x) and CPU µs per request of each process; the bare endpoint's requests/s
  is also the calibration figure in the header (how fast this host is);
* ``bench/handlers.py --types rule http --rate 500``, ``--runs`` times: the ``http`` handler's
  p50 at 500/s (≤ 1.5 ms) and decisions/s at saturation with one dispatcher (≥ 3,000/s), the
  ``rule`` handler for reference and the http/rule throughput ratio;
* ``bench/mixed.py --rate R`` once per ``--rates`` rate (default 2000 and 500; one run each: a
  run's p99 already spans ``rate * duration`` events): p99 ≤ 5 ms with no fail-open at
  2,000 events/s, the other rates for reference (where this machine stands);
* with ``--soak``: ``bench/soak.py`` (its defaults, or ``--soak-requests`` and
  ``--soak-sessions``): RSS growth of the gateway and the dispatcher after warm-up < 10 %.

Ranges are min to max over the runs; "met" means every run met the target. ``--quick`` shrinks
every duration for a smoke check (and ``--runs`` to 1 unless given). A bench that fails or
times out shows as failed and the others still run. Markdown to stdout, the numbers to
``bench/results/targets.json`` (a figure a bench could not measure is ``null`` there). Everything on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wake import measure as measure_wake

from bus.errors import RedisServerError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


@dataclasses.dataclass
class Row:
    figure: str
    target: str
    measured: str
    met: str


def run_bench(name: str, argv: list[str], timeout_s: float) -> str:
    """Run ``bench/<name>.py`` and return its stdout (its stderr passes through as progress).
    On timeout or interruption its whole process group goes (the roles, Redis, hook servers)."""
    command = [sys.executable, str(ROOT / "bench" / f"{name}.py"), *argv]
    print(f"$ {' '.join(command[1:])}  (timeout {timeout_s:.0f} s)", file=sys.stderr)
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, _ = process.communicate(timeout=timeout_s)
    except BaseException as exc:
        for sig, grace_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
                process.wait(grace_s)
                break
            except (ProcessLookupError, subprocess.TimeoutExpired):
                continue
        if isinstance(exc, subprocess.TimeoutExpired):
            raise RuntimeError(f"{name}: timed out after {timeout_s:.0f} s") from exc
        raise
    if process.returncode:
        raise RuntimeError(f"{name}: exited with status {process.returncode}")
    return stdout


def fresh(name: str, since: float) -> dict[str, Any]:
    """``bench/results/<name>.json``, if a bench wrote it after ``since`` (a ``time.time()``)."""
    path = RESULTS / f"{name}.json"
    if not path.exists() or path.stat().st_mtime < since:
        raise RuntimeError(f"{name}: no {path.relative_to(ROOT)} from this run")
    return dict(json.loads(path.read_text()))


def figures(found: dict[str, Any], names: tuple[str, ...]) -> dict[str, float]:
    """``names`` of a bench's JSON object as floats, ``null`` (not measured) as NaN."""
    return {name: math.nan if found[name] is None else float(found[name]) for name in names}


def jsonable(value: Any) -> Any:
    """``value`` with every NaN replaced by ``None``: NaN is not JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    return value


def wake_run() -> dict[str, Any]:
    try:
        return measure_wake()
    except (redis.RedisError, RedisServerError) as exc:
        raise RuntimeError(f"wake: {exc}") from exc


def handlers_run(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    duration_s, saturate_s = (1.0, 1.0) if args.quick else (5.0, 4.0)
    started = time.time()
    run_bench(
        "handlers",
        ["--types", "rule", "http", "--rate", "500", "--duration", str(duration_s), "--saturate-s", str(saturate_s)],
        180 + 4 * (duration_s + saturate_s),
    )
    found = fresh("handlers", started)["handlers"]
    return {name: figures(found[name], ("p50_ms", "p99_ms", "per_s", "dispatcher_cpu_us")) for name in ("rule", "http")}


def mixed_run(rate: float, args: argparse.Namespace) -> dict[str, Any]:
    duration_s, started = 2.0 if args.quick else 10.0, time.time()
    run_bench("mixed", ["--rate", f"{rate:g}", "--duration", str(duration_s)], duration_s + 240)
    out = fresh("mixed", started)
    return {"overall": out["overall"], "cpu_us_per_event": out["cpu_us_per_event"]}


def platform_run(args: argparse.Namespace) -> list[dict[str, float]]:
    seconds, started = 2.0 if args.quick else 8.0, time.time()
    run_bench(
        "platform_cost", ["--rounds", str(args.runs), "--seconds", str(seconds)], 60 + args.runs * (2 * seconds + 90)
    )
    names = (
        "bare_per_s",
        "hookbus_per_s",
        "ratio",
        "fail_open",
        "non_2xx",
        "bare_cpu_us",
        "gateway_cpu_us",
        "dispatcher_cpu_us",
        "redis_cpu_us",
    )
    rounds = [figures(found, names) for found in fresh("platform_cost", started)["rounds"]]
    if not rounds:
        raise RuntimeError("platform_cost: no rounds in bench/results/platform_cost.json")
    return rounds


def soak_run(args: argparse.Namespace) -> dict[str, float]:
    if args.quick:
        argv, duration_s = ["--requests", "3000", "--duration", "20", "--sample-s", "1", "--sessions", "500"], 20.0
    elif args.soak_requests:
        argv, duration_s = ["--requests", str(args.soak_requests), "--duration", "3600"], 3600.0
    else:
        argv, duration_s = [], 180.0  # soak.py's own bound
    if args.soak_sessions and not args.quick:
        argv += ["--sessions", str(args.soak_sessions)]
    started = time.time()
    run_bench("soak", argv, duration_s + 300)
    out = fresh("soak", started)
    samples, total = out["samples"], out["summary"]["answered"]
    warm = next((s for s in samples if s["answered"] >= out["args"]["warmup"] * total), samples[0])
    growth = {
        role: (samples[-1][f"{role}_rss"] - warm[f"{role}_rss"]) / warm[f"{role}_rss"]
        for role in ("gateway", "dispatcher", "worker")
    }
    return {"answered": total, "per_s": out["summary"]["per_s"], **{f"{k}_rss_growth": v for k, v in growth.items()}}


def span(values: list[float], fmt: Callable[[float], str]) -> str:
    low, high = min(values), max(values)
    return fmt(low) if fmt(low) == fmt(high) else f"{fmt(low)} to {fmt(high)}"


def judged(
    figure: str,
    target: str,
    values: list[float],
    fmt: Callable[[float], str],
    ok: Callable[[float], bool] | None = None,
) -> Row:
    """A row; with ``ok`` (a target) "met" when every run met it, without it a reference figure."""
    if not values:
        return Row(figure, target, "failed", "—")
    if ok is None:
        return Row(figure, "(reference)", span(values, fmt), "")
    passed = sum(ok(v) for v in values)
    met = "met" if passed == len(values) else "not met" if not passed else f"met in {passed} of {len(values)}"
    return Row(figure, target, span(values, fmt), met)


def ms(v: float) -> str:
    return f"{v:.2f} ms"


def per_s(v: float) -> str:
    return f"{v:,.0f}/s"


def rows_for(res: dict[str, Any], args: argparse.Namespace) -> list[Row]:
    handlers, plat, mixed = res["handlers"], res["platform_cost"], res["mixed"]
    http, rule = [h["http"] for h in handlers], [h["rule"] for h in handlers]
    rows = [
        judged("`http` handler p50 at 500/s", "≤ 1.5 ms", [h["p50_ms"] for h in http], ms, lambda v: v <= 1.5),
        judged(
            "`http` handler decisions/s at saturation, 1 dispatcher",
            "≥ 3,000/s",
            [h["per_s"] for h in http],
            per_s,
            lambda v: v >= 3000,
        ),
        judged("`rule` handler p50 at 500/s", "(reference)", [h["p50_ms"] for h in rule], ms),
        judged("`rule` handler decisions/s at saturation", "(reference)", [h["per_s"] for h in rule], per_s),
        judged(
            "`http` / `rule` throughput",
            "(reference)",
            [h["http"]["per_s"] / (h["rule"]["per_s"] or math.nan) for h in handlers],
            lambda v: f"{v:.2f}x",
        ),
    ]
    for rate in args.rates:
        run = mixed.get(f"{rate:g}")
        at = f"{rate:,.0f} events/s"
        judge = rate == 2000  # the target's rate; the others show where this machine stands
        overall = [run["overall"]] if run else []
        rows.append(
            judged(
                f"mixed traffic p99 at {at}",
                "≤ 5 ms" if judge else "(reference)",
                [o["p99_ms"] for o in overall],
                ms,
                (lambda v: v <= 5) if judge else None,
            )
        )
        rows.append(
            judged(
                f"mixed traffic fail-opens + errors at {at}",
                "0" if judge else "(reference)",
                [o["fail_open"] + o["errors"] for o in overall],
                lambda v: f"{v:.0f}",
                (lambda v: v == 0) if judge else None,
            )
        )
        if run:
            o = run["overall"]
            cpu = " · ".join(f"{name} {us:.0f}" for name, us in run["cpu_us_per_event"].items())
            rows.append(
                Row(
                    f"mixed at {at}: p50, load generator lag p99, CPU µs/event",
                    "(reference)",
                    f"p50 {o['p50_ms']:.2f} ms, lag p99 {o['lag_p99_ms']:.2f} ms; {cpu}",
                    "",
                )
            )
    rows.append(
        judged(
            "hookbus decisions/s ÷ bare Starlette requests/s",
            "≥ 0.4x",
            [p["ratio"] for p in plat],
            lambda v: f"{v:.2f}x",
            lambda v: v >= 0.4,
        )
    )
    rows.append(
        judged(
            "hookbus fail-opens + non-2xx at saturation",
            "0",
            [p["fail_open"] + p["non_2xx"] for p in plat],
            lambda v: f"{v:.0f}",
            lambda v: v == 0,
        )
    )
    if plat:
        cpu = " · ".join(
            f"{name} {span([p[f'{name}_cpu_us'] for p in plat], lambda v: f'{v:.0f}')}"
            for name in ("bare", "gateway", "dispatcher", "redis")
        )
        rows.append(Row("CPU µs per request (bare server; hookbus gateway, dispatcher, Redis)", "(reference)", cpu, ""))
    if args.soak:
        soak = [res["soak"]] if res.get("soak") else []
        for role in ("gateway", "dispatcher"):
            rows.append(
                judged(
                    f"soak: {role} RSS growth after warm-up",
                    "< 10 %",
                    [s[f"{role}_rss_growth"] for s in soak],
                    lambda v: f"{v:+.1%}",
                    lambda v: v < 0.10,
                )
            )
    return rows


def host() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "?")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
    ).stdout.strip()
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="minutes"),
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "commit": commit,
        "loadavg_1m": os.getloadavg()[0],
        "load_generator": "wrk -t1" if shutil.which("wrk") else "the Python load generator",
    }


def main(args: argparse.Namespace) -> None:
    res: dict[str, Any] = {
        "host": host(),
        "args": vars(args),
        "wake": None,
        "handlers": [],
        "mixed": {},
        "platform_cost": [],
        "errors": [],
    }

    def attempt(call: Callable[..., Any], *call_args: Any) -> Any:
        try:
            return call(*call_args)
        except (RuntimeError, OSError, ValueError, KeyError, IndexError) as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            res["errors"].append(str(exc).splitlines()[0])
            return None

    res["wake"] = attempt(wake_run)  # first, on a quiet host: nothing else of this run is going yet
    res["platform_cost"] = attempt(platform_run, args) or []
    res["handlers"] = [found for _ in range(args.runs) if (found := attempt(handlers_run, args))]
    for rate in args.rates:
        if (run := attempt(mixed_run, rate, args)) is not None:
            res["mixed"][f"{rate:g}"] = run
    if args.soak:
        res["soak"] = attempt(soak_run, args)
    rows = rows_for(res, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "targets.json").write_text(
        json.dumps(jsonable({**res, "rows": [dataclasses.asdict(r) for r in rows]}), indent=2, allow_nan=False)
    )
    h = res["host"]
    bare = span([p["bare_per_s"] for p in res["platform_cost"]], per_s) if res["platform_cost"] else "failed"
    wake = res["wake"]
    woken = (
        (
            f"Redis PING p50 {wake['back_to_back']['p50_us']:.0f} µs back to back, "
            f"{wake['after_idle']['p50_us']:.0f} µs after {wake['idle_gap_ms']:g} ms idle (p90 "
            f"{wake['back_to_back']['p90_us']:.0f} and {wake['after_idle']['p90_us']:.0f} µs; one decision crosses "
            f"about five such wake-ups at low load); client CPU per PING {wake['back_to_back']['client_cpu_us']:.0f}"
            f" µs back to back, {wake['after_idle']['client_cpu_us']:.0f} µs after idle"
        )
        if wake
        else "failed"
    )
    print(
        f"{h['date']}, commit {h['commit']}: {h['nproc']} x {h['cpu']}, Python {h['python']}, load average "
        f"{h['loadavg_1m']:.2f} at start; saturation by {h['load_generator']}"
        f"{', quick (smoke check, not a measurement)' if args.quick else ''}, {args.runs} run(s).\n"
        f"Calibration (how fast this host is): the bare Starlette endpoint answers {bare} at saturation.\n"
        f"Wake-up latency: {woken}.\n"
    )
    print("| figure | target | measured | met |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row.figure} | {row.target} | {row.measured} | {row.met} |")
    for error in res["errors"]:
        print(f"\nFailed: {error}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, help="repeats of handlers and platform_cost (default 3; 1 with --quick)")
    parser.add_argument("--rates", type=float, nargs="+", default=[2000, 500], help="mixed.py rates (events/s)")
    parser.add_argument("--quick", action="store_true", help="short durations: a smoke check, not a measurement")
    parser.add_argument("--soak", action="store_true", help="also bench/soak.py (many minutes without --quick)")
    parser.add_argument("--soak-requests", type=int, help="soak.py --requests (default: its own)")
    parser.add_argument("--soak-sessions", type=int, help="soak.py --sessions (default: its own)")
    parsed = parser.parse_args()
    if parsed.runs is None:
        parsed.runs = 1 if parsed.quick else 3
    main(parsed)
