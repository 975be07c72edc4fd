"""Policy checks that need this machine: can the policy's Python callables be imported?

``function`` handlers and ``hookbus.plugins`` name Python modules that the dispatchers import
when they run, from their working directory and ``PYTHONPATH`` (``hookbus up`` starts them
with ``python -m hookbus`` from its own directory). ``hookbus policy check`` and ``hookbus
up`` import every one of them first, in a separate interpreter with that same search path,
so that a typo is an error at once instead of a failure on every event or a dispatcher that
will not start. Importing runs module code, which is why it happens in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bus.errors import PolicyProblem
from bus.policy.loading import Policy
from bus.policy.schema import FunctionHandler

IMPORT_TIMEOUT_S = 30.0

# Runs in the child: stdout is kept for the JSON answer, whatever the modules print goes to stderr.
_PROBE = r"""
import importlib, json, os, sys
answer = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
results = {}
for name in json.loads(sys.argv[1]):
    module_name, _, attr_path = name.partition(":")
    try:
        target = importlib.import_module(module_name)
        for attr in filter(None, attr_path.split(".")):
            target = getattr(target, attr)
    except BaseException as exc:
        results[name] = f"{type(exc).__name__}: {exc}"
        continue
    results[name] = None if not attr_path or callable(target) else f"not callable (it is {type(target).__name__})"
answer.write(json.dumps(results))
answer.flush()
"""


def import_errors(names: list[str], cwd: str | None = None) -> dict[str, str]:
    """``{name: why}`` for each ``module`` or ``module:attr`` that cannot be imported (and called)."""
    if not names:
        return {}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, json.dumps(names)],
            cwd=cwd or os.getcwd(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=IMPORT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return dict.fromkeys(names, f"importing did not finish within {IMPORT_TIMEOUT_S:g}s")
    try:
        results = json.loads(done.stdout)
    except ValueError:
        last = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {done.returncode}"]
        return dict.fromkeys(names, f"the import check itself failed: {last[0]}")
    return {name: why for name, why in results.items() if why}


def _plugin_source(policy: Policy) -> str:
    """The file the plugin list comes from: the last one that names ``plugins`` (later files win)."""
    for source in reversed(policy.sources):
        try:
            if "plugins" in Path(source).read_text(encoding="utf-8-sig"):
                return source
        except OSError:
            continue
    return policy.sources[-1] if policy.sources else "policy"


def import_problems(policy: Policy, cwd: str | None = None) -> list[PolicyProblem]:
    """A problem for every ``function`` handler and plugin of ``policy`` that cannot be imported."""
    functions = [
        entry
        for event in sorted(policy.events())
        for entry in policy.entries(event)
        if isinstance(entry.handler, FunctionHandler)
    ]
    names = list(
        dict.fromkeys(
            [
                *policy.settings.plugins,
                *(e.handler.function for e in functions if isinstance(e.handler, FunctionHandler)),
            ]
        )
    )
    errors = import_errors(names, cwd)
    problems: list[PolicyProblem] = []
    for index, plugin in enumerate(policy.settings.plugins):
        if plugin in errors:
            problems.append(
                PolicyProblem(
                    _plugin_source(policy),
                    None,
                    f"hookbus.plugins[{index}]",
                    f"cannot import plugin {plugin!r}: {errors[plugin]}",
                )
            )
    for entry in functions:
        assert isinstance(entry.handler, FunctionHandler)
        if (why := errors.get(entry.handler.function)) is not None:
            where = f"hooks.{entry.event}[{entry.group_index}].hooks[{entry.handler_index}].function"
            problems.append(
                PolicyProblem(entry.source, None, where, f"cannot import {entry.handler.function!r}: {why}")
            )
    return problems


__all__ = ["import_errors", "import_problems"]
