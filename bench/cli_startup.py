"""How long the ``hookbus`` command line takes to start: ``--help`` and a sub-command's parsing.

Runs, interleaved round-robin with the venv's interpreter: ``python -c pass`` (the floor),
``hookbus --help``, ``hookbus tail --help`` and ``hookbus policy push --help``, and prints the
best and the median wall time of each. ``--source DIR`` runs another checkout's ``hookbus``
package (e.g. ``git archive HEAD~1 | tar -x -C DIR``) with the same interpreter, to compare.
``bus/`` and ``hookbus/`` are byte-compiled first, as ``pip install`` does.

Where the time goes: ``python -X importtime -m hookbus --help 2>&1 >/dev/null | sort -t'|' -k2 -n | tail``.

Usage: ``python bench/cli_startup.py [--runs 30] [--source DIR]``.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOOKBUS = str(Path(sys.executable).with_name("hookbus"))
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "hookbus --help": [HOOKBUS, "--help"],
    "hookbus tail --help": [HOOKBUS, "tail", "--help"],
    "hookbus policy push --help": [HOOKBUS, "policy", "push", "--help"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout whose hookbus to run")
    args = parser.parse_args()
    for package in ("bus", "hookbus"):
        compileall.compile_dir(args.source / package, quiet=1)
    env = {**os.environ, "PYTHONPATH": str(args.source.resolve())}
    times_ms: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(args.runs):
        for case, command in CASES.items():
            start = time.perf_counter()
            subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True, timeout=30)
            times_ms[case].append((time.perf_counter() - start) * 1000)
    print(f"{args.runs} interleaved runs each, source {args.source}\n")
    print("| case | best ms | median ms |\n|---|---:|---:|")
    for case, runs in times_ms.items():
        print(f"| `{case}` | {min(runs):.1f} | {statistics.median(runs):.1f} |")


if __name__ == "__main__":
    main()
