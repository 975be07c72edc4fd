"""What one ``hookbus hook`` costs an agent: start-up plus round trip, per tool call.

Claude Code spawns a command hook once per event, so the shim's whole cost is process
start-up, imports and one HTTP round trip. This runs, interleaved round-robin on one
machine with the same interpreter (the venv's, which the ``hookbus`` console script uses):

* ``python -c pass``: the floor every Python hook pays (the target: the installed command's deny
  at most 0.5x of it);
* ``python -S -c pass``: the same without ``site`` (shows what site-packages' .pth files,
  e.g. an editable install's import finder, add to *every* Python start-up);
* a typical local Python hook (``bench/local_hook.py``: ``json`` + ``re`` on stdin);
* ``hookbus hook`` against a live ``hookbus up`` (examples/policy.yaml): an allowed
  command (``{}``, nothing printed) and a denied one (decision JSON printed);
* ``hookbus hook --agent gemini`` on a Gemini CLI ``BeforeTool`` input (the dialect's
  translation both ways, on the gateway) that is denied;
* the installed command with ``--agent AGENT`` for every agent the shim knows, each on its own
  agent's shell call of ``rm -rf /`` (:func:`tests.bus.dialects.test_one_policy.shell_call`),
  denied in that agent's form (exit 2 for the agents that read no JSON decision);
* ``hookbus hook`` with the gateway down (start-up and a refused connect, no round trip);
* the same through the command the installers write (``PYTHON -I -S .../hookbus/shim_start.py
  hook``: no ``site``, no package ``__init__``), next to ``python -I -S -c pass``, its floor;
* the HTTP round trip alone, measured in-process with the shim's own client.

Before measuring, ``bus/`` and ``hookbus/`` are byte-compiled (``compileall``), as ``pip install`` does: with
``PYTHONDONTWRITEBYTECODE=1`` (common in dev shells and CI) an editable checkout would
otherwise recompile ``hookbus.cli`` and ``hookbus.shim`` on every run (~9 ms) and measure that.

Each case is timed in wall time and in CPU time (user + system of the child, which another
process's load inflates less). ``--before DIR`` also times the installed command of another
checkout (``DIR/hookbus/shim_start.py``, e.g. ``git archive REV hookbus | tar -x -C DIR``) in the
same rounds.

Usage: ``python bench/shim.py [--runs 200] [--before DIR]``. Prints a markdown table (``--json`` for JSON).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from hookbus.install.settings_file import default_hook_command
from hookbus.platform.redis_server import free_port
from hookbus.shim import AGENTS, EXIT_CODE_AGENTS, post

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.bus.dialects.test_one_policy import shell_call  # noqa: E402

PY = sys.executable
HOOKBUS = str(Path(PY).with_name("hookbus"))
INSTALLED = [*shlex.split(default_hook_command(PY)), "hook"]
POLICY = ROOT / "examples" / "policy.yaml"


def hook_input(command: str) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "bench-shim",
            "transcript_path": "/t",
            "cwd": "/tmp",
            "permission_mode": "default",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
    ).encode()


def start_platform(port: int, state: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    process = subprocess.Popen(
        [HOOKBUS, "up", "--config", str(POLICY), "--port", str(port), "--state-dir", state],
        cwd=state,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as reply:
                if json.load(reply)["checks"].get("dispatchers", {}).get("ok"):
                    return process
        except OSError:
            pass
        if process.poll() is not None:
            raise SystemExit("hookbus up exited early")
        time.sleep(0.1)
    process.terminate()
    raise SystemExit("hookbus up did not become ready with a dispatcher in 30s")


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed(argv: list[str], stdin: bytes, expect_out: bool | None, exit_code: int = 0) -> tuple[float, float]:
    """``(wall s, CPU s)`` of one run of ``argv``; exits on an unexpected answer."""
    cpu = children_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != exit_code or (expect_out is not None and bool(done.stdout.strip()) != expect_out):
        raise SystemExit(f"unexpected result from {argv}: {done.returncode} {done.stdout!r} {done.stderr!r}")
    return elapsed, children_cpu_s() - cpu


def times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="runs per case (default 200)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    parser.add_argument("--before", type=Path, help="also time the installed command of this checkout")
    args = parser.parse_args()
    for package in ("bus", "hookbus"):
        compileall.compile_dir(str(ROOT / package), quiet=1)
    if args.before:
        compileall.compile_dir(str(args.before / "hookbus"), quiet=1)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    dead = f"http://127.0.0.1:{free_port()}"
    allow, deny = hook_input("ls -la"), hook_input("rm -rf /")
    gemini = json.dumps(
        {
            "hook_event_name": "BeforeTool",
            "session_id": "bench-shim",
            "cwd": "/tmp",
            "timestamp": "2026-12-02T00:00:00.000Z",
            "tool_name": "run_shell_command",
            "tool_input": {"command": "rm -rf /", "description": "clean up"},
        }
    ).encode()
    cases: dict[str, tuple[list[str], bytes, bool | None] | tuple[list[str], bytes, bool | None, int]] = {
        "python -c pass": ([PY, "-c", "pass"], b"", None),
        "python -S -c pass": ([PY, "-S", "-c", "pass"], b"", None),
        "python -I -S -c pass": ([PY, "-I", "-S", "-c", "pass"], b"", None),
        "local Python hook (json+re)": ([PY, str(ROOT / "bench" / "local_hook.py")], allow, False),
        "hookbus hook, allowed ({})": ([HOOKBUS, "hook", "--url", url], allow, False),
        "hookbus hook, denied (JSON out)": ([HOOKBUS, "hook", "--url", url], deny, True),
        "hookbus hook, gateway down": ([HOOKBUS, "hook", "--url", dead], allow, False),
        "hookbus hook --agent gemini, denied": ([HOOKBUS, "hook", "--agent", "gemini", "--url", url], gemini, True),
        "installed command, allowed ({})": ([*INSTALLED, "--url", url], allow, False),
        "installed command, denied (JSON out)": ([*INSTALLED, "--url", url], deny, True),
        "installed command, gateway down": ([*INSTALLED, "--url", dead], allow, False),
    }
    for agent in AGENTS:
        denied = json.dumps(shell_call(agent, "rm -rf /", "bench-shim")).encode()
        argv = [*INSTALLED, "--agent", agent, "--url", url]
        exit_code = 2 if agent in EXIT_CODE_AGENTS else 0  # its deny: exit 2, the reason on stderr
        cases[f"installed command --agent {agent}, denied"] = (argv, denied, None if exit_code else True, exit_code)
    if args.before:
        before = [PY, "-I", "-S", str(args.before.resolve() / "hookbus" / "shim_start.py"), "hook", "--url", url]
        cases[f"installed command of {args.before}, denied (JSON out)"] = (before, deny, True)
    with tempfile.TemporaryDirectory(prefix="hookbus-bench-") as state:
        platform = start_platform(port, state)
        try:
            for case in cases.values():  # warm up caches, connections, the dispatcher
                for _ in range(5):
                    timed(*case)
            samples: dict[str, list[float]] = {name: [] for name in cases}
            cpu: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.runs):
                for name, case in cases.items():
                    elapsed, used = timed(*case)
                    samples[name].append(elapsed)
                    cpu[name].append(used)
            round_trips = []
            for _ in range(args.runs):
                started = time.perf_counter()
                status, _, _ = post(f"{url}/v1/hooks", deny, None, 5.0)
                round_trips.append(time.perf_counter() - started)
                assert status == 200
        finally:
            platform.terminate()
            platform.wait(timeout=30)
    floor = statistics.median(samples["python -c pass"])
    cpu_floor = statistics.median(cpu["python -c pass"])
    rows: list[tuple[str, float, float, float | None, float | None, float | None]] = [
        (
            name,
            statistics.median(v),
            percentile(v, 0.99),
            statistics.median(v) / floor,
            statistics.median(cpu[name]),
            statistics.median(cpu[name]) / cpu_floor,
        )
        for name, v in samples.items()
    ]
    rows.append(
        (
            "HTTP round trip only (in-process)",
            statistics.median(round_trips),
            percentile(round_trips, 0.99),
            None,
            None,
            None,
        )
    )
    if args.json:
        table = [
            {
                "case": n,
                "p50_ms": p50 * 1e3,
                "p99_ms": p99 * 1e3,
                "ratio_to_python_pass": r,
                "cpu_p50_ms": None if c is None else c * 1e3,
                "cpu_ratio_to_python_pass": cr,
            }
            for n, p50, p99, r, c, cr in rows
        ]
        print(json.dumps({"runs": args.runs, "python": sys.version.split()[0], "rows": table}, indent=2))
        return 0
    print(
        f"`hookbus hook` cost per event, {args.runs} interleaved runs each, Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n"
    )
    print("| case | p50 ms | p99 ms | p50 / `python -c pass` | CPU p50 ms | CPU / `python -c pass` |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, p50, p99, ratio, cpu_p50, cpu_ratio in rows:
        cells = [
            f"{p50 * 1e3:.1f}",
            f"{p99 * 1e3:.1f}",
            times(ratio),
            "-" if cpu_p50 is None else f"{cpu_p50 * 1e3:.1f}",
        ]
        print(f"| {name} | {' | '.join(cells)} | {times(cpu_ratio)} |")
    shim = statistics.median(samples["installed command, denied (JSON out)"]) / floor
    print(
        f"\ntarget: the installed command <= 0.5x `python -c pass` at p50: {'met' if shim <= 0.5 else 'NOT met'} "
        f"({shim:.2f}x for a deny; the `hookbus` console script "
        f"{statistics.median(samples['hookbus hook, denied (JSON out)']) / floor:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
