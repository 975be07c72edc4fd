"""``hookbus install kiro``: Kiro CLI's hooks, pointed at the gateway.

Kiro reads no JSON from hooks: exit 2 blocks (stderr goes to the model) and, on
SessionStart and UserPromptSubmit, stdout is added to the context. Every event gets one
hook running the shim, ``hookbus hook --agent kiro --url URL``, which turns the gateway's
answer into exactly that. ``--fail-closed`` goes on PreToolUse and UserPromptSubmit only,
the events that block on exit 2. Written from Kiro's documentation only (Kiro is not on
npm and talks only to AWS).

Two file forms, both Kiro's:

* A standalone hook file (Kiro CLI v3), the default: ``.kiro/hooks/hookbus.json`` in the
  project (``--scope project``) or ``~/.kiro/hooks/hookbus.json`` (``--scope user``),
  ``{"version": "v1", "hooks": [{"name", "trigger", "action": {"type": "command", "command"},
  "timeout", "enabled"}]}`` with ``timeout`` in seconds and no matcher (every tool).
  hookbus's hooks are named ``hookbus-<trigger>``.
* An agent configuration (Kiro CLI v2, ``.kiro/agents/<agent>.json``) given with
  ``--settings-file``: its ``hooks`` object gets camelCase events (``agentSpawn``,
  ``userPromptSubmit``, ``preToolUse``, ``postToolUse``, ``stop``) with entries ``{"command",
  "timeout_ms"}``. A file whose ``hooks`` is an object, or that has no ``hooks`` but an
  agent's fields (``prompt``, ``tools``, ``mcpServers``, ...), is written in this form.

Kiro has no managed (admin) hooks location: ``--scope managed`` is refused. A hook is
hookbus's by its ``hookbus hook ... --url`` command; merging, ``.bak``, idempotence,
``--dry-run`` and the exact ``--uninstall`` are :mod:`hookbus.install.hooks_json`'s (an
uninstall removes the standalone file when no other hook is left in it).
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from hookbus.install.hooks_json import HooksFile, is_hookbus_command, run_install

#: Kiro CLI's standalone hook-file triggers hookbus installs (Claude Code's names).
KIRO_TRIGGERS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop")
#: The same events in an agent configuration (Kiro CLI v2).
AGENT_CONFIG_EVENTS = {
    "SessionStart": "agentSpawn",
    "UserPromptSubmit": "userPromptSubmit",
    "PreToolUse": "preToolUse",
    "PostToolUse": "postToolUse",
    "Stop": "stop",
}
FILE_NAME = "hookbus.json"
#: Fields only an agent configuration has (a file with one of them gets the agent-config form).
AGENT_CONFIG_KEYS = ("prompt", "tools", "allowedTools", "mcpServers", "resources", "toolsSettings")


def _timeout(seconds: float) -> int | float:
    return int(seconds) if seconds == int(seconds) else seconds


class KiroHooks(HooksFile):
    """Kiro CLI's hooks: a standalone hook file, or an agent configuration's ``hooks``."""

    agent = "kiro"
    title = "Kiro"
    events = KIRO_TRIGGERS
    default_events = KIRO_TRIGGERS
    from_claude = {camel: (claude,) for claude, camel in AGENT_CONFIG_EVENTS.items()}
    blocking_events = frozenset({"PreToolUse", "UserPromptSubmit"})
    approval_events = frozenset({"PreToolUse"})
    required = {"version": "v1"}

    def path(self, scope: str) -> Path:
        if scope == "project":
            return Path.cwd() / ".kiro" / "hooks" / FILE_NAME
        if scope == "user":
            return Path.home() / ".kiro" / "hooks" / FILE_NAME
        if scope == "managed":
            raise ConfigError("Kiro has no managed hooks location; use --scope user or --settings-file")
        raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")

    def entry(self, event: str, command: str, timeout_s: float, fail_closed: bool) -> dict[str, Any]:
        return {
            "name": f"hookbus-{event}",
            "trigger": event,
            "action": {"type": "command", "command": command},
            "timeout": _timeout(timeout_s),
            "enabled": True,
        }

    def required_fields(self, config: dict[str, Any]) -> dict[str, Any]:
        return {} if is_agent_config(config) else self.required

    def merge(
        self, config: dict[str, Any], wanted: dict[str, dict[str, Any]] | None, only_url: str | None
    ) -> dict[str, Any]:
        if is_agent_config(config):
            agent_config = {
                AGENT_CONFIG_EVENTS[event]: {
                    "command": item["action"]["command"],
                    "timeout_ms": round(float(item["timeout"]) * 1000),
                }
                for event, item in (wanted or {}).items()
            }
            return super().merge(config, agent_config or None, only_url)
        result = copy.deepcopy(config)
        hooks = result.get("hooks")
        if hooks is None:
            hooks = []
        if not isinstance(hooks, list):
            raise ConfigError("the file's 'hooks' is neither a list nor an object; fix it by hand first")
        wanted = wanted or {}
        placed: set[str] = set()
        kept: list[Any] = []
        for item in hooks:
            if not (isinstance(item, dict) and is_hookbus_command(_command(item), only_url)):
                kept.append(item)
            elif item.get("trigger") in wanted and item["trigger"] not in placed:
                kept.append(wanted[item["trigger"]])
                placed.add(item["trigger"])
        kept.extend(item for event, item in wanted.items() if event not in placed)
        if wanted or kept or (isinstance(config.get("hooks"), list) and not config["hooks"]):
            result["hooks"] = kept
        else:
            result.pop("hooks", None)  # it held only hookbus's hooks
        return {"version": "v1", **result} if wanted and "version" not in result else result

    def installed_url(self, config: dict[str, Any]) -> str | None:
        hooks = config.get("hooks")
        if is_agent_config(config):
            return super().installed_url(config)
        for item in hooks if isinstance(hooks, list) else ():
            command = _command(item) if isinstance(item, dict) else None
            if is_hookbus_command(command):
                argv = shlex.split(str(command))
                return argv[argv.index("--url") + 1] if "--url" in argv else None
        return None

    def warnings(self, config: dict[str, Any], scope: str, path: Path) -> list[str]:
        found = []
        hooks = config.get("hooks")
        if isinstance(hooks, list) and any(
            isinstance(item, dict) and is_hookbus_command(_command(item)) and item.get("enabled") is False
            for item in hooks
        ):
            found.append("a hookbus hook in this file is disabled (enabled: false): Kiro skips it")
        if is_agent_config(config):
            found.append(
                "an agent configuration's hooks run only for that agent: start Kiro with it "
                "(kiro-cli chat --agent NAME) or make it the default agent"
            )
        return found


def is_agent_config(config: dict[str, Any]) -> bool:
    """Whether ``config`` is a Kiro agent configuration (hooks embedded as an object), not a hook file."""
    if isinstance(config.get("hooks"), dict):
        return True
    return "hooks" not in config and any(key in config for key in AGENT_CONFIG_KEYS)


def _command(item: dict[str, Any]) -> Any:
    action = item.get("action")
    return action.get("command") if isinstance(action, dict) else None


def run(args: Any) -> int:
    """``hookbus install kiro``: the exit code (a user's error raises ConfigError)."""
    return run_install(KiroHooks(), args)


__all__ = [
    "AGENT_CONFIG_EVENTS",
    "AGENT_CONFIG_KEYS",
    "FILE_NAME",
    "KIRO_TRIGGERS",
    "KiroHooks",
    "is_agent_config",
    "run",
]
