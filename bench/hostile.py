"""What every hostile shape costs each stage that reads it: ``python bench/hostile.py``.

For every shape of ``tests/hostile/inputs.py`` at two sizes (16 KiB and 64 KiB: under the
command limit, so the splitter really runs; and the detector prefixes at 256 KiB and 1 MiB), the
time of the pure functions in-process, best of three: splitting the command (with the
wrappers stripped), the example policy's rule handlers on it (as the dispatcher judges it), and
masking it. The growth column is the larger size's time over the smaller's divided by the size
ratio: about 1 for linear work, the size ratio itself for quadratic. A baseline (splitting
``ls -la``, repeated) runs in the same process. Results: stdout (markdown) and
``bench/results/hostile.json``.
"""

from __future__ import annotations

import asyncio
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
from bus.redaction.redact import DEFAULT  # noqa: E402
from bus.rules.bashsplit import parse_commands, strip_wrappers  # noqa: E402
from tests.hostile.inputs import COMMAND_UNITS, OPEN_UNITS, SECRET_UNITS, command, fill  # noqa: E402
from workers.engine.evaluation import selected  # noqa: E402
from workers.engine.judging import judge_command, judged  # noqa: E402
from workers.handlers.rule import evaluate_rules  # noqa: E402

POLICY = load_policy([REPO / "examples" / "policy.yaml"])


def best_s(fn: Callable[[], Any], runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def split(text: str) -> None:
    for cmd in parse_commands(text) or ():
        strip_wrappers(cmd.words)


def rules(text: str) -> None:
    hook_input = {
        "hook_event_name": "PreToolUse",
        "session_id": "s",
        "cwd": "/w",
        "tool_name": "Bash",
        "tool_input": {"command": text},
    }

    async def run() -> None:
        limits = POLICY.settings.limits
        found = await judge_command(hook_input, limits, 1.5)
        with judged(found, limits):
            for entry in POLICY.entries("PreToolUse"):
                if isinstance(entry.handler, RuleHandler) and selected(entry, "PreToolUse", hook_input):
                    evaluate_rules(entry.handler, hook_input)

    asyncio.run(run())


def mask(text: str) -> None:
    DEFAULT.value({"tool_input": {"command": text}})


def row(name: str, small: str, large: str, stages: dict[str, Callable[[str], None]]) -> dict[str, Any]:
    out: dict[str, Any] = {"shape": name}
    ratio = len(large) / len(small)
    for stage, fn in stages.items():
        a, b = best_s(lambda: fn(small)), best_s(lambda: fn(large))  # noqa: B023 (called at once)
        out[stage] = {
            "small_ms": round(a * 1000, 2),
            "large_ms": round(b * 1000, 2),
            "growth": round(b / a / ratio, 2) if a > 0 else None,
        }
    return out


def main() -> None:
    baseline = best_s(lambda: split("ls -la " * 2000))
    rows = []
    for name, unit in {**COMMAND_UNITS, **OPEN_UNITS}.items():
        rows.append(
            row(
                name, command(unit, 16 * 1024), command(unit, 64 * 1024), {"split": split, "rules": rules, "mask": mask}
            )
        )
    for name, unit in SECRET_UNITS.items():
        rows.append(row(f"mask {name}", fill(unit, 256 * 1024), fill(unit, 1024 * 1024), {"mask": mask}))
    print(f"baseline: splitting 'ls -la ' x 2000 (14 KB): {baseline * 1000:.2f} ms\n")
    print("| shape | stage | small ms | large ms | growth (1 = linear) |\n|---|---|---|---|---|")
    for r in rows:
        for stage in ("split", "rules", "mask"):
            if stage in r:
                s = r[stage]
                print(f"| {r['shape']} | {stage} | {s['small_ms']} | {s['large_ms']} | {s['growth']} |")
    results = REPO / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "hostile.json").write_text(json.dumps({"baseline_ms": baseline * 1000, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
