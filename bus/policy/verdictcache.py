"""The verdicts of a ``rule`` handler's lists kept per call, for the calls agents repeat.

A fleet's agents send the same calls all day (``git status``, a read of the same file), and each
of a rule pack's lists matches such a call the same way every time. :func:`call_key` says what
a shell or file tool's verdict depends on (the lists, the tool, its command or its paths, the
parameters the lists' rules name, the working directory, the agent's home, ``hookbus.limits``,
and why the command cannot be judged for this event, if so); the verdict for a key is worked
out once (:mod:`bus.policy.rulelists`) and kept among the :data:`VERDICTS_KEPT` most recently used.
Calls of other tools, MCP tools read several ways, and long inputs are judged afresh each time.
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, Final, Protocol

from bus.rules.bashsplit import CACHED_COMMAND_CHARS
from bus.rules.limits import Limits, current_limits
from bus.rules.permissions import EDIT_TOOLS, READ_TOOLS, SHELL_TOOLS, call_paths
from bus.rules.shellread import ShellRead

#: Calls whose verdicts are kept, per process (each key holds at most a few KiB of text).
VERDICTS_KEPT: Final = 4096

Verdict = tuple[str, str] | None
Key = tuple[Hashable, ...]

#: Key -> the verdict, and the limits it was worked out under (kept alive: the key holds its ``id``).
_KEPT: Final[dict[Key, tuple[Verdict, Limits]]] = {}
_COUNTS: Final = {"hits": 0, "misses": 0}


class Listed(Protocol):
    """A rule list, as far as its key goes."""

    @property
    def params(self) -> tuple[str, ...]: ...


def call_subject(
    tool_name: str,
    tool_input: Mapping[str, Any],
    cwd: str | None,
    shell: ShellRead | None,
    paths: list[str] | None = None,
) -> Hashable:
    """The part of :func:`call_key` that depends on the call only (the same for every handler of
    an event): its command or its paths (``paths``: a file tool's ``call_paths``, when the caller
    has them); ``None`` when its verdicts are not kept."""
    if cwd is not None and len(cwd) > CACHED_COMMAND_CHARS:
        return None
    if tool_name in SHELL_TOOLS:
        command = tool_input.get("command")
        if shell is None or not isinstance(command, str) or len(command) > CACHED_COMMAND_CHARS:
            return None
        return (command, shell.unjudged)
    if tool_name in EDIT_TOOLS or tool_name in READ_TOOLS:
        paths = call_paths(tool_name, tool_input, cwd) if paths is None else paths
        return None if sum(map(len, paths)) > CACHED_COMMAND_CHARS else tuple(paths)
    return None


def call_key(
    lists: Sequence[Listed],
    tool_name: str,
    tool_input: Mapping[str, Any],
    cwd: str | None,
    home: str | None,
    shell: ShellRead | None,
    subject: Hashable = ...,
) -> Key | None:
    """What the verdict of ``lists`` on this call depends on, or ``None`` when it is not kept
    (the lists by identity: a list compiled once is itself only); ``subject``: the call's
    :func:`call_subject`, when the caller has it."""
    if subject is ...:
        subject = call_subject(tool_name, tool_input, cwd, shell)
    if subject is None:
        return None
    # The limits by identity: hashing the model costs more than the rest of the key.
    key: Key = (tuple(lists), tool_name, subject, cwd, home, id(current_limits()))
    for rule_list in lists:
        if rule_list.params:  # ``Bash(timeout:...)``: the parameters the rules name
            key += tuple(tool_input.get(name) for name in rule_list.params)
    return key


def kept(key: Key) -> tuple[Verdict] | None:
    """The verdict kept for ``key`` (in a 1-tuple), or ``None`` when none is (or the key holds a
    parameter that is a list or an object, which is never kept)."""
    try:
        found = _KEPT.pop(key, None)
    except TypeError:
        return None
    if found is None:
        _COUNTS["misses"] += 1
        return None
    _COUNTS["hits"] += 1
    _KEPT[key] = found  # now the most recent: the common calls are never the oldest
    return (found[0],)


def keep(key: Key, verdict: Verdict) -> None:
    """Keep ``verdict`` for ``key``, dropping the oldest kept past :data:`VERDICTS_KEPT`."""
    try:
        _KEPT[key] = (verdict, current_limits())
    except TypeError:
        return
    if len(_KEPT) > VERDICTS_KEPT:
        # The oldest quarter at once: dropping one at a time makes each drop scan the slots the
        # drops before it left at the front of the dict.
        try:
            oldest = list(itertools.islice(_KEPT, VERDICTS_KEPT // 4))
        except RuntimeError:  # another thread changed it meanwhile: the next keep drops them
            return
        for old in oldest:
            _KEPT.pop(old, None)


def forget() -> None:
    """Drop every kept verdict: called when rule lists are compiled, so that the lists of a
    policy reloaded away are not kept alive by their verdicts (reloads are rare; lists are
    compiled once per handler)."""
    _KEPT.clear()


def kept_info() -> tuple[int, int, int]:
    """Hits, misses and how many verdicts are kept."""
    return _COUNTS["hits"], _COUNTS["misses"], len(_KEPT)


__all__ = [
    "VERDICTS_KEPT",
    "Key",
    "Listed",
    "Verdict",
    "call_key",
    "call_subject",
    "forget",
    "keep",
    "kept",
    "kept_info",
]
