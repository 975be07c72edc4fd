"""A ``function`` handler for the handler-cost benchmark: the same check as the example policy's sudo / rm -rf rule."""

from __future__ import annotations

from bus.models import HookInput


def deny_rm(hook: HookInput) -> str | None:
    command = (hook.tool_input or {}).get("command", "")
    if "rm -rf" in command or command.startswith("sudo "):
        return "Permission denied: dangerous command (sudo / rm -rf) is not allowed"
    return None
