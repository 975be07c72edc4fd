"""``hookbus install windsurf``: Windsurf (Cascade)'s ``hooks.json``, pointed at the gateway.

Windsurf has command hooks only and reads nothing from them but the exit code and stderr,
so every event gets one entry running the shim, ``hookbus hook --agent windsurf --url URL``,
which turns the gateway's deny into exit 2 with the reason on stderr (Cascade shows it to
the agent and does not run the action). Entries set ``show_output: true`` so the user sees
why an action was blocked (the shim prints nothing when it allows). Windsurf documents no
timeout field, so the shim keeps its own default. ``--fail-closed`` goes on the pre-hooks
only, the events that block on exit 2. Written from Windsurf's documentation only (it is an
IDE with no headless CLI).

Files, by ``--scope``: ``project`` is ``.windsurf/hooks.json`` in the workspace, ``user`` is
``~/.codeium/windsurf/hooks.json``, ``managed`` is the system file (``/etc/windsurf/hooks.json``
on Linux, ``/Library/Application Support/Windsurf/hooks.json`` on macOS,
``C:\\ProgramData\\Windsurf\\hooks.json`` on Windows); Windsurf runs all three, system first.
Merging, ``.bak``, idempotence, ``--dry-run`` and the exact ``--uninstall`` are
:mod:`hookbus.install.hooks_json`'s.

Events: the four pre-hooks (``pre_run_command``, ``pre_read_code``, ``pre_write_code``,
``pre_mcp_tool_use``), ``pre_user_prompt``, ``post_run_command``, ``post_write_code``,
``post_mcp_tool_use`` and ``post_cascade_response``, unless ``--events`` names others
(Windsurf's names or Claude Code's). Warnings: Windsurf's JetBrains plugin reads
``~/.codeium/hooks.json``, not the user file written here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from hookbus.install.hooks_json import HooksFile, run_install

#: Every hook event Windsurf documents.
WINDSURF_HOOK_EVENTS = (
    "pre_run_command",
    "pre_read_code",
    "pre_write_code",
    "pre_mcp_tool_use",
    "pre_user_prompt",
    "post_run_command",
    "post_write_code",
    "post_mcp_tool_use",
    "post_cascade_response",
    "post_read_code",
    "post_cascade_response_with_transcript",
    "post_setup_worktree",
)
DEFAULT_EVENTS = WINDSURF_HOOK_EVENTS[:9]
PRE_HOOKS = frozenset({"pre_run_command", "pre_read_code", "pre_write_code", "pre_mcp_tool_use", "pre_user_prompt"})
SYSTEM_FILES = {
    "linux": "/etc/windsurf/hooks.json",
    "darwin": "/Library/Application Support/Windsurf/hooks.json",
    "win32": "C:\\ProgramData\\Windsurf\\hooks.json",
}


class WindsurfHooks(HooksFile):
    """Windsurf's ``hooks.json``."""

    agent = "windsurf"
    title = "Windsurf"
    events = WINDSURF_HOOK_EVENTS
    default_events = DEFAULT_EVENTS
    from_claude = {
        "PreToolUse": ("pre_run_command", "pre_read_code", "pre_write_code", "pre_mcp_tool_use"),
        "PostToolUse": ("post_run_command", "post_write_code", "post_mcp_tool_use"),
        "UserPromptSubmit": ("pre_user_prompt",),
        "Stop": ("post_cascade_response",),
    }
    blocking_events = PRE_HOOKS

    def path(self, scope: str) -> Path:
        if scope == "project":
            return Path.cwd() / ".windsurf" / "hooks.json"
        if scope == "user":
            return Path.home() / ".codeium" / "windsurf" / "hooks.json"
        if scope == "managed":
            key = "linux" if sys.platform.startswith("linux") else sys.platform
            if key not in SYSTEM_FILES:
                raise ConfigError(f"no known Windsurf system hooks.json on {sys.platform}; use --settings-file")
            return Path(SYSTEM_FILES[key])
        raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")

    def shim_timeout_s(self, timeout_s: float) -> float | None:
        return None  # Windsurf has no timeout field: the shim keeps its default

    def entry(self, event: str, command: str, timeout_s: float, fail_closed: bool) -> dict[str, Any]:
        return {"command": command, "show_output": True}

    def warnings(self, config: dict[str, Any], scope: str, path: Path) -> list[str]:
        if scope == "user" and (Path.home() / ".codeium" / "hooks.json").exists():
            return [
                "Windsurf's JetBrains plugin reads ~/.codeium/hooks.json, not this file: install there too "
                "with --settings-file ~/.codeium/hooks.json"
            ]
        return []


def run(args: Any) -> int:
    """``hookbus install windsurf``: the exit code (a user's error raises ConfigError)."""
    return run_install(WindsurfHooks(), args)


__all__ = ["DEFAULT_EVENTS", "PRE_HOOKS", "SYSTEM_FILES", "WINDSURF_HOOK_EVENTS", "WindsurfHooks", "run"]
