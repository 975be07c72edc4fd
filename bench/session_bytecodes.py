"""What session policy adds per event, in Python bytecodes per function: a count no host's load
moves, and one that says *where* (``bench/session_counts.py`` counts instructions and cache misses,
but per C function of the interpreter).

The setup of ``bench/session_policy.py`` (both runners, a session state of 10,000 earlier events,
both warmed on 200 events), then ``--events`` events through each runner under ``sys.settrace``
with opcode events on, counted per function. Reported: the bytecodes per event of each runner, and
the functions whose count the session moves most (added, plain, session).

    .venv/bin/python bench/session_bytecodes.py --policy rules
    .venv/bin/python bench/session_bytecodes.py --policy example-100-under-budget
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def counted(runner: Any, events: list[Any]) -> collections.Counter[str]:
    """Bytecodes run per function (``path:name``) while ``runner`` decides ``events``."""
    counts: collections.Counter[str] = collections.Counter()

    def called(frame: types.FrameType, event: str, arg: object) -> Any:
        frame.f_trace_opcodes = True
        where = f"{frame.f_code.co_filename.replace(f'{ROOT}/', '')}:{frame.f_code.co_name}"

        def each(frame: types.FrameType, event: str, arg: object) -> Any:
            if event == "opcode":
                counts[where] += 1
            return each

        return each

    sys.settrace(called)
    try:
        asyncio.run(runner.run(events))
    finally:
        sys.settrace(None)
    return counts


def main() -> None:
    sys.path.insert(0, str(ROOT))
    from bench import session_policy as bench

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", choices=bench.NAMED_POLICIES, default="rules")
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--top", type=int, default=25, help="functions listed")
    args = parser.parse_args()
    plain, session, prepared = asyncio.run(bench.warmed_runners(args.policy, args.events))
    in_plain, in_session = counted(plain, prepared), counted(session, prepared)
    per_event = args.events
    total_plain, total_session = sum(in_plain.values()) / per_event, sum(in_session.values()) / per_event
    print(f"{args.policy}: bytecodes per event, over {args.events} events")
    print(f"plain {total_plain:,.0f}  session {total_session:,.0f}  added {total_session - total_plain:+,.0f}")
    added = {name: (in_session[name] - in_plain[name]) / per_event for name in in_plain.keys() | in_session.keys()}
    print(f"{'added':>9} {'plain':>9} {'session':>9}  function")
    for name, more in sorted(added.items(), key=lambda item: -abs(item[1]))[: args.top]:
        print(f"{more:+9.1f} {in_plain[name] / per_event:9.1f} {in_session[name] / per_event:9.1f}  {name}")


if __name__ == "__main__":
    main()
