"""How often judging one shell command goes into each module: ``python bench/pipeline_visits.py``.

One ``PreToolUse`` of ``Bash`` (``--command``) through :meth:`workers.engine.evaluation.Engine.evaluate`
with the example policy (``examples/policy.yaml`` of ``TREE``, this checkout by default), in a
fresh process so that no cache holds the command. Every call is followed (``sys.setprofile``): a
*visit* is a call into a module of ``bus/rules``, ``bus/policy`` or ``workers/engine`` from
another module. Printed: the visits per module, the calls from one stage (:data:`READ`,
:data:`MATCH`, the engine) into another, and the path, one line per visit, with consecutive
visits of one module folded. A command read once and then matched goes from the match stage
into the read stage once per rule handler (the first reads it, the others find it kept), and
the read stage never calls into the match stage.

    python bench/pipeline_visits.py                        # this checkout
    python bench/pipeline_visits.py /tmp/before            # another checkout's engine
    python bench/pipeline_visits.py --command "sudo sh -c 'rm -rf /tmp/x'"
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
ROOTS = ("bus/rules/", "bus/policy/", "workers/engine/")
#: The read stage's modules: shell text to its readings and their texts.
READ = frozenset(
    f"bus/rules/{name}.py"
    for name in "bashsplit shellparser shellquotes shellwords shellcompound heredocs readings launchers "
    "codereadings spellings knownvars shellread".split()
)
#: The match stage's modules: rules over what was read.
MATCH = frozenset(
    f"bus/{name}.py" for name in "policy/rulelists rules/permissions rules/shellrules rules/paths rules/globs".split()
)


def stage(module: str) -> str:
    return "read" if module in READ else "match" if module in MATCH else "engine"


def module_of(frame: FrameType | None, tree: str) -> str | None:
    """The module a frame runs in, relative to ``tree``, when it is one of :data:`ROOTS`."""
    if frame is None:
        return None
    path = frame.f_code.co_filename
    if not path.startswith(tree + "/"):
        return None
    relative = path[len(tree) + 1 :]
    return relative if relative.startswith(ROOTS) else None


async def main(args: argparse.Namespace, tree: str) -> None:
    sys.path[:0] = [tree]
    import orjson

    from bus.policy.loading import load_policy
    from bus.redis.keys import Keyspace
    from bus.stream.protocol import Request
    from workers.engine.evaluation import Engine
    from workers.handlers.runners import default_runners

    policy = load_policy([f"{tree}/examples/policy.yaml"])
    engine = Engine(policy, None, Keyspace(), default_runners(), async_handlers="jobs")  # type: ignore[arg-type]
    warm = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash", "cwd": "/w"}
    body = orjson.dumps({**warm, "tool_input": {"command": "true"}})
    await engine.evaluate(Request("warm", "PreToolUse", "default", body, 0), orjson.loads(body), policy)

    visits: list[str] = []
    switches: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        module = module_of(frame, tree)
        if module is None:
            return
        caller = module_of(frame.f_back, tree)
        if caller != module:
            visits.append(module)
            if caller is not None and stage(caller) != stage(module):
                switches[f"{stage(caller)} -> {stage(module)}"] += 1

    body = orjson.dumps({**warm, "tool_input": {"command": args.command}})
    request = Request("e", "PreToolUse", "default", body, 0)
    hook_input = orjson.loads(body)
    sys.setprofile(profile)
    try:
        evaluation = await engine.evaluate(request, hook_input, policy)
    finally:
        sys.setprofile(None)
    print(f"{tree}: {args.command!r} -> {evaluation.merged.decision}")
    print("\n| module | stage | visits |\n|---|---|---|")
    for module, count in Counter(visits).most_common():
        print(f"| {module} | {stage(module)} | {count} |")
    print("\ncalls from one stage into another: " + ", ".join(f"{k} {v}" for k, v in sorted(switches.items())))
    print(f"\n{len(visits)} visits; the path:")
    folded: list[tuple[str, int]] = []
    for module in visits:
        if folded and folded[-1][0] == module:
            folded[-1] = (module, folded[-1][1] + 1)
        else:
            folded.append((module, 1))
    for module, times in folded:
        print(f"  {stage(module):6} {module}" + (f" x{times}" if times > 1 else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", default=str(HERE.parent))
    parser.add_argument("--command", default="sudo git -C repo push --force origin main 2>/dev/null")
    arguments = parser.parse_args()
    asyncio.run(main(arguments, str(Path(arguments.tree).resolve())))
