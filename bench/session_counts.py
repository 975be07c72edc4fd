"""What session policy adds per event, counted by cachegrind: instructions and cache misses, which
a noisy host does not move. ``python bench/session_counts.py`` (needs Debian's ``valgrind``).

``bench/session_policy.py`` times its two runners; on a shared host the figure moves by more than
what is measured. Here each runner of that bench runs alone under ``valgrind --tool=cachegrind
--cache-sim=yes`` (``PYTHONHASHSEED=0``): one process decides ``--warm`` events with it, another
``--warm + --events``, after the same setup (both policies, a session state of 10,000 earlier
events, both runners warmed); the difference between the two is that runner's cost of
``--events`` events. Reported per event: instructions (``I refs``), L1 instruction-cache misses
(``I1 misses``) and L1 data-cache misses (``D1 misses``) of each runner, and what the session
runner adds. The counts include the bench's stand-in for the settle script's answer (made in
Python between its timed parts). Four processes, two at a time: about 10 minutes for
``--policy rules``. ``--policy example-under-budget`` is the example with its ``tool_calls``
budget out of reach (:func:`bench.session_policy.example_policies`): no measured call asks;
``example-100`` adds the 100 session rules of ``rules`` (50 facts, 100 windowed counters, 100
budgets) to the example, and ``example-100-under-budget`` does so with the budget out of reach.

With ``--l2 512`` the last level is simulated as one core's L2 of 512 KiB (cachegrind's ``--LL``)
rather than the host's L3, and its misses are reported too (``LL misses``): each is a line the
event reads again from the L3 or memory. Where the work between two events of a session passes
more data through the L2 than it holds (the 100-handler runner: about 0.6 MB per event), these
misses follow the distinct lines an event's steps touch, and the time follows them on a host
whose L3 is slow or shared.

    .venv/bin/python bench/session_counts.py --policy rules
    .venv/bin/python bench/session_counts.py --policy example --events 300 --l2 512
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COUNTS = {
    "instructions": r"I\s+refs:\s+([\d,]+)",
    "L1i misses": r"I1\s+misses:\s+([\d,]+)",
    "L1d misses": r"D1\s+misses:\s+([\d,]+)",
}
#: With ``--l2``: the misses of the last level, simulated as one core's L2 (instruction and data).
LAST_LEVEL = {"L2 misses": r"LL\s+misses:\s+([\d,]+)"}


async def _decide(policy: str, runner: str, events: int) -> None:
    """The child: the setup of ``bench/session_policy.py``, then ``events`` events through one runner."""
    sys.path.insert(0, str(ROOT))
    from bench import session_policy as bench

    plain, session, rest = await bench.warmed_runners(policy, events)
    if events:
        await (plain if runner == "plain" else session).run(rest)


def _counted(policy: str, runner: str, events: int, l2_bytes: int) -> dict[str, int]:
    """The counts of one child under cachegrind (``l2_bytes``: the last level simulated as an L2 of that size)."""
    with tempfile.TemporaryDirectory(prefix="hookbus-counts-") as scratch:
        command = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=yes",
            *([f"--LL={l2_bytes},8,64"] if l2_bytes else []),
            f"--cachegrind-out-file={scratch}/out",
            sys.executable,
            __file__,
            "--child",
            policy,
            runner,
            str(events),
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    patterns = {**COUNTS, **LAST_LEVEL} if l2_bytes else COUNTS
    return {name: int(re.search(pattern, done.stderr)[1].replace(",", "")) for name, pattern in patterns.items()}  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sys.path.insert(0, str(ROOT))
    from bench.session_policy import NAMED_POLICIES

    parser.add_argument("--policy", choices=NAMED_POLICIES, default="rules")
    parser.add_argument("--warm", type=int, default=200, help="events of the shorter run")
    parser.add_argument("--events", type=int, default=500, help="events the longer run decides more")
    parser.add_argument("--l2", type=int, default=0, metavar="KIB", help="simulate the last level as an L2 of KIB KiB")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        policy, runner, events = args.child
        asyncio.run(_decide(policy, runner, int(events)))
        return
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (apt-get install valgrind)")
    runs = [(runner, n) for runner in ("plain", "session") for n in (args.warm, args.warm + args.events)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        found = dict(
            zip(runs, pool.map(lambda run: _counted(args.policy, run[0], run[1], args.l2 << 10), runs), strict=True)
        )
    print(f"{args.policy}: per event, over {args.events} events (cachegrind)")
    print(f"{'':14}{'plain':>14}{'session':>14}{'added':>12}{'':>9}")
    for name in found[runs[0]]:
        plain, session = (
            (found[(runner, args.warm + args.events)][name] - found[(runner, args.warm)][name]) / args.events
            for runner in ("plain", "session")
        )
        print(f"{name:14}{plain:14,.0f}{session:14,.0f}{session - plain:+12,.0f}{(session - plain) / plain:+9.1%}")


if __name__ == "__main__":
    main()
