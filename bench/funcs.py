"""A ``function`` handler for the handler-cost benchmark: the same check as the example policy's sudo / rm -rf rule."""

from __future__ import annotations

from bus.hooks.models import HookInput


def deny_rm(hook: HookInput) -> str | None:
    command = (hook.tool_input or {}).get("command", "")
    if "rm -rf" in command or command.startswith("sudo "):
        return "Permission denied: dangerous command (sudo / rm -rf) is not allowed"
    return None


def check_write(hook: HookInput) -> str | None:
    """The mixed profile's Write check: no writes under /etc."""
    path = str((hook.tool_input or {}).get("file_path", ""))
    return "writes under /etc are not allowed" if path.startswith("/etc/") else None


def block_stop(hook: HookInput) -> str | None:
    """The mixed profile's Stop hook: always asks the agent to go on (the Stop guard lets it stop in the end)."""
    return "run the tests before stopping"


def remember_context(hook: HookInput) -> dict[str, object]:
    """An async hook for the soak: leaves context for the session's next turn (a per-session key)."""
    return {"hookSpecificOutput": {"hookEventName": hook.hook_event_name, "additionalContext": "soak: tests passed"}}


def greet_once(hook: HookInput) -> None:
    """A ``once: true`` hook for the soak: runs once per session (a per-session key)."""
    return None


async def check_write_async(hook: HookInput) -> str | None:
    """:func:`check_write` as a coroutine function (run on the dispatcher's loop, no thread hand-off)."""
    return check_write(hook)


async def block_stop_async(hook: HookInput) -> str | None:
    """:func:`block_stop` as a coroutine function."""
    return block_stop(hook)
