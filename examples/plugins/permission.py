"""A classic agent loop's permission and log hooks as a hookbus plugin.

Load it from a policy::

    hookbus:
      plugins: ["examples.plugins.permission"]

The module must be importable by the dispatcher: run hookbus from the repository root, or
put the root on the path (``PYTHONPATH=/path/to/hookbus hookbus dispatcher ...``). Your own
plugins work the same way: any module on ``PYTHONPATH`` that calls
:func:`bus.hooks.plugins.register_hook` when imported.

Each callback receives the typed hook input (:class:`bus.hooks.models.HookInput`) and returns
``None`` to let the call through, or a string to block it with that reason (a PreToolUse
``deny``). Callbacks run in registration order and the first non-``None`` answer wins, so
the permission check is registered first and the log hook only sees calls it let through.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from bus.hooks.models import HookInput
from bus.hooks.plugins import register_hook

logger = logging.getLogger("hookbus.plugins.permission")

#: Shell tools whose ``command`` is checked.
SHELL_TOOLS: Final = frozenset({"Bash", "bash"})
#: What the permission hook forbids: ``rm -rf`` (in any flag order) and ``sudo``, each as a whole word.
DANGEROUS: Final = (
    (re.compile(r"(?<![\w-])rm\s+(?:-[a-zA-Z]*(?:[rR][a-zA-Z]*f|f[a-zA-Z]*[rR])|-[rR]\s+-f|-f\s+-[rR])"), "rm -rf"),
    (re.compile(r"(?<![\w-])sudo\b"), "sudo"),
)


def command_of(hook_input: HookInput) -> str | None:
    """The shell command of a Bash tool call, or None for any other call."""
    if hook_input.tool_name not in SHELL_TOOLS or not hook_input.tool_input:
        return None
    command = hook_input.tool_input.get("command")
    return command if isinstance(command, str) else None


def permission_hook(hook_input: HookInput) -> str | None:
    """Block ``rm -rf`` and ``sudo`` in Bash."""
    command = command_of(hook_input)
    if command is None:
        return None
    for pattern, what in DANGEROUS:
        if pattern.search(command):
            return f"Permission denied: '{what}' is not allowed in Bash commands"
    return None


def log_hook(hook_input: HookInput) -> None:
    """Log every tool call that reaches it; never intercepts."""
    logger.info("[HOOK] session %s calls tool %s", hook_input.session_id, hook_input.tool_name)


register_hook("PreToolUse", permission_hook)  # security first
register_hook("PreToolUse", log_hook)  # then logging

__all__ = ["DANGEROUS", "SHELL_TOOLS", "command_of", "log_hook", "permission_hook"]
