"""What a costly command leaves on the dispatcher's event loop: ``python bench/loop_work.py``.

For each shape, in-process with ``examples/policy.yaml``: the time to judge the command ahead
(``workers.engine.judging.judge_command``: a long command is split and read in a worker thread,
so this is not the loop's) and the time the example policy's rule handlers then take on the
event loop, best of three, each run on a command not seen before (no cache answers it). A
command of more subcommands than ``hookbus.limits.subcommands`` cannot be judged: its rules
are decided without reading it. Results: stdout (markdown) and ``bench/results/loop_work.json``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bus.policy.loading import load_policy  # noqa: E402
from bus.policy.schema import RuleHandler  # noqa: E402
from workers.engine.evaluation import selected  # noqa: E402
from workers.engine.judging import judge_command, judged  # noqa: E402
from workers.handlers.rule import evaluate_rules  # noqa: E402

POLICY = load_policy([REPO / "examples" / "policy.yaml"])

SHAPES: dict[str, Callable[[int], str]] = {
    "`a;` x 32k then `a $x` (64 KiB)": lambda n: "HEAD;" + "a;" * 32_700 + f"a $x{n}",
    "`a | ` x 16k then `a $x` (64 KiB)": lambda n: "a | " * 16_000 + f"a $x{n}",
    "`git push $x;` x 1000 (13 KiB)": lambda n: "git push $x;" * 1000 + f"b{n}",
    "`a $x;` x 900 (4.5 KiB)": lambda n: "a $x;" * 900 + f"b{n}",
    "`bash -c` of a 30 KiB script": lambda n: "bash -c '" + "a $x; " * 5000 + f"b{n}'",
    "`sh <<EOF` of 8,000 lines": lambda n: "sh <<EOF\n" + "a $x\n" * 8000 + f"b{n}\nEOF",
    "`nice -n 1` x 4000 then `rm -rf /`": lambda n: "nice -n 1 " * 4000 + f"rm -rf /{n}",
    "`echo | xargs` x 3000": lambda n: "echo | xargs " * 3000 + f"rm -rf /{n}",
}


def judge(command: str) -> tuple[float, float, list[str]]:
    hook_input = {
        "hook_event_name": "PreToolUse",
        "session_id": "s",
        "cwd": "/w",
        "tool_name": "Bash",
        "tool_input": {"command": command},
    }

    async def run() -> tuple[float, float, list[str]]:
        limits = POLICY.settings.limits
        started = time.perf_counter()
        found = await judge_command(hook_input, limits, 1.5, "bench")
        ahead = time.perf_counter()
        verdicts = []
        with judged(found, limits):
            for entry in POLICY.entries("PreToolUse"):
                if isinstance(entry.handler, RuleHandler) and selected(entry, "PreToolUse", hook_input):
                    if (verdict := evaluate_rules(entry.handler, hook_input)) is not None:
                        verdicts.append(verdict[0])
        done = time.perf_counter()
        return (ahead - started) * 1000, (done - ahead) * 1000, verdicts

    return asyncio.run(run())


def main() -> None:
    fresh = itertools.count()
    rows: list[dict[str, Any]] = []
    for name, shape in SHAPES.items():
        runs = [judge(shape(next(fresh))) for _ in range(3)]
        ahead_ms, loop_ms, verdicts = min(runs, key=lambda run: run[1])
        rows.append({"shape": name, "ahead_ms": round(ahead_ms, 1), "loop_ms": round(loop_ms, 2), "verdicts": verdicts})
    print("| command | judged ahead (thread) ms | rules on the loop ms | verdicts |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['shape']} | {row['ahead_ms']} | {row['loop_ms']} | {', '.join(row['verdicts']) or '-'} |")
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "loop_work.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
