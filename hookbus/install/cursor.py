"""``hookbus install cursor``: Cursor's ``hooks.json``, pointed at the gateway.

Cursor has command hooks only, so every event gets one entry running the shim, ``hookbus
hook --agent cursor --url URL``, with Cursor's ``timeout`` in seconds; the shim's own
``--timeout`` stays below it. ``--fail-closed`` goes on the events that decide
(``beforeShellExecution``, ``beforeMCPExecution``, ``beforeReadFile``, ``preToolUse``,
``beforeSubmitPrompt``) as the shim's flag and as Cursor's own ``failClosed: true`` (Cursor
then also blocks when the shim itself cannot run or times out); elsewhere exit 2 means
nothing useful. The file gets ``"version": 1`` when it has none. Written from Cursor's
documentation only (the CLI cannot run here).

Files, by ``--scope``: ``project`` is ``.cursor/hooks.json`` in the current folder (Cursor
runs it in a trusted workspace only), ``user`` is ``~/.cursor/hooks.json``, ``managed`` is
Cursor's enterprise file (``/etc/cursor/hooks.json`` on Linux, ``/Library/Application
Support/Cursor/hooks.json`` on macOS, ``C:\\ProgramData\\Cursor\\hooks.json`` on Windows),
which runs before the project's and the user's. Merging, ``.bak``, idempotence, ``--dry-run``
and the exact ``--uninstall`` are :mod:`hookbus.install.hooks_json`'s.

Events: the shell, MCP and file-read checks (``beforeShellExecution``, ``beforeMCPExecution``,
``beforeReadFile``), ``preToolUse`` for the file-writing tools only (matcher
``Write|Edit|StrReplace|Delete``: the shell and MCP calls already have their own event, and
one call must not be decided twice), ``postToolUse``, ``beforeSubmitPrompt``, ``stop``,
``subagentStop``, ``sessionStart`` and ``sessionEnd``, unless ``--events`` names others
(Cursor's names or Claude Code's). Warnings name what would keep the hooks from running: a
``version`` other than 1, and a project file (untrusted workspaces skip it).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from hookbus.install.hooks_json import HooksFile, run_install

#: Every hook event Cursor documents.
CURSOR_HOOK_EVENTS = (
    "beforeShellExecution",
    "beforeMCPExecution",
    "beforeReadFile",
    "preToolUse",
    "postToolUse",
    "beforeSubmitPrompt",
    "stop",
    "subagentStop",
    "sessionStart",
    "sessionEnd",
    "afterShellExecution",
    "afterMCPExecution",
    "afterFileEdit",
    "postToolUseFailure",
    "subagentStart",
    "preCompact",
    "afterAgentResponse",
    "afterAgentThought",
    "beforeTabFileRead",
    "afterTabFileEdit",
)
DEFAULT_EVENTS = CURSOR_HOOK_EVENTS[:10]
#: preToolUse's matcher: the tools no other before-event covers.
WRITE_TOOLS_MATCHER = "Write|Edit|StrReplace|Delete"
ENTERPRISE_FILES = {
    "linux": "/etc/cursor/hooks.json",
    "darwin": "/Library/Application Support/Cursor/hooks.json",
    "win32": "C:\\ProgramData\\Cursor\\hooks.json",
}


class CursorHooks(HooksFile):
    """Cursor's ``hooks.json``."""

    agent = "cursor"
    title = "Cursor"
    events = CURSOR_HOOK_EVENTS
    default_events = DEFAULT_EVENTS
    from_claude = {
        "PreToolUse": ("beforeShellExecution", "beforeMCPExecution", "beforeReadFile", "preToolUse"),
        "PostToolUse": ("postToolUse",),
        "PostToolUseFailure": ("postToolUseFailure",),
        "UserPromptSubmit": ("beforeSubmitPrompt",),
        "Stop": ("stop",),
        "SubagentStart": ("subagentStart",),
        "SubagentStop": ("subagentStop",),
        "SessionStart": ("sessionStart",),
        "SessionEnd": ("sessionEnd",),
        "PreCompact": ("preCompact",),
    }
    blocking_events = frozenset(
        {"beforeShellExecution", "beforeMCPExecution", "beforeReadFile", "preToolUse", "beforeSubmitPrompt"}
    )
    approval_events = frozenset({"beforeShellExecution", "beforeMCPExecution", "preToolUse"})
    required = {"version": 1}

    def path(self, scope: str) -> Path:
        if scope == "project":
            return Path.cwd() / ".cursor" / "hooks.json"
        if scope == "user":
            return Path.home() / ".cursor" / "hooks.json"
        if scope == "managed":
            key = "linux" if sys.platform.startswith("linux") else sys.platform
            if key not in ENTERPRISE_FILES:
                raise ConfigError(f"no known Cursor enterprise hooks.json on {sys.platform}; use --settings-file")
            return Path(ENTERPRISE_FILES[key])
        raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")

    def entry(self, event: str, command: str, timeout_s: float, fail_closed: bool) -> dict[str, Any]:
        item: dict[str, Any] = {
            "command": command,
            "timeout": int(timeout_s) if timeout_s == int(timeout_s) else timeout_s,
        }
        if event == "preToolUse":
            item["matcher"] = WRITE_TOOLS_MATCHER
        if fail_closed:
            item["failClosed"] = True
        return item

    def warnings(self, config: dict[str, Any], scope: str, path: Path) -> list[str]:
        found = []
        if config.get("version") != 1:
            found.append(f"this file's version is {config.get('version')!r}; Cursor reads hooks.json version 1 only")
        if scope == "project":
            found.append("Cursor runs a project's hooks.json only in a trusted workspace: trust this folder in Cursor")
        return found


def run(args: Any) -> int:
    """``hookbus install cursor``: the exit code (a user's error raises ConfigError)."""
    return run_install(CursorHooks(), args)


__all__ = ["CURSOR_HOOK_EVENTS", "DEFAULT_EVENTS", "ENTERPRISE_FILES", "WRITE_TOOLS_MATCHER", "CursorHooks", "run"]
