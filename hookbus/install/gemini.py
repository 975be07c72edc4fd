"""``hookbus install gemini``: Gemini CLI's ``settings.json`` hooks, pointed at the gateway.

Gemini CLI has command hooks only, so every event gets one handler running the shim,
``hookbus hook --agent gemini --url URL`` (``--fail-closed`` when asked), named ``hookbus``,
with Gemini's ``timeout`` in milliseconds. The shim's own ``--timeout`` stays below it, so
the shim answers (open or closed) before Gemini kills it. The token is never written: Gemini
runs hooks with its own environment, so ``$HOOKBUS_TOKEN`` reaches the shim from there.

Files, by ``--scope``: ``project`` is ``.gemini/settings.json`` in the current folder,
``user`` is ``~/.gemini/settings.json`` (``$GEMINI_CLI_HOME`` replaces ``~``, as in Gemini),
``managed`` is Gemini's system settings file (``$GEMINI_CLI_SYSTEM_SETTINGS_PATH``, else
``/etc/gemini-cli/settings.json`` and the macOS and Windows equivalents), which overrides the
user's and the project's. Merging, the ``.bak`` backup, idempotence and ``--dry-run`` work as for
Claude Code (:mod:`hookbus.install.settings_file`: a handler is hookbus's by its ``hookbus
hook ... --url`` command). ``--uninstall`` removes exactly those handlers; when the backup
is the file as it was before the install (nothing else changed since), it is restored byte
for byte, comments and formatting included.

Events: BeforeTool, AfterTool, BeforeAgent, AfterAgent, SessionStart, SessionEnd and
Notification unless ``--events`` names others (Gemini's names or Claude Code's). PreCompress
is left out by default because Gemini 0.61.0 fires it before every model call with nothing
compressed; BeforeModel, AfterModel (every streamed chunk) and BeforeToolSelection have no
Claude Code equivalent. Warnings name what would make the hooks silently not run: a
project folder Gemini does not trust (no project hooks; a headless run exits 55),
``hooksConfig.enabled: false``, ``hookbus`` in ``hooksConfig.disabled``, and a changed
command in a project file (Gemini trusts project hooks by name and command).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from bus.dialects.gemini import GEMINI_EVENTS
from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.settings_file import (
    APPROVAL_EVENTS,
    TOKEN_ENV,
    InstallPlan,
    default_hook_command,
    event_names,
    installed_url,
    is_hookbus_handler,
    merge,
    print_diff,
    render,
    shim_command_line,
    write_atomically,
)
from hookbus.install.settings_file import read_settings as claude_read_settings

#: Every hook event of Gemini CLI 0.61.0.
GEMINI_HOOK_EVENTS = (
    "BeforeTool",
    "AfterTool",
    "BeforeAgent",
    "AfterAgent",
    "SessionStart",
    "SessionEnd",
    "Notification",
    "PreCompress",
    "BeforeModel",
    "AfterModel",
    "BeforeToolSelection",
)
DEFAULT_EVENTS = GEMINI_HOOK_EVENTS[:7]
HOOK_NAME = "hookbus"
SYSTEM_SETTINGS = {
    "linux": "/etc/gemini-cli/settings.json",
    "darwin": "/Library/Application Support/GeminiCli/settings.json",
    "win32": "C:\\ProgramData\\gemini-cli\\settings.json",
}
_FROM_CLAUDE = {claude: gemini for gemini, claude in GEMINI_EVENTS.items()}
#: The Gemini events whose ask can wait for a person (``--approvals``): fail-closed, long timeout.
APPROVAL_GEMINI_EVENTS = frozenset(_FROM_CLAUDE[event] for event in APPROVAL_EVENTS if event in _FROM_CLAUDE)


def gemini_home(env: dict[str, str] | None = None) -> Path:
    """The folder Gemini CLI keeps ``.gemini`` in: ``$GEMINI_CLI_HOME`` or the home folder."""
    env = dict(os.environ) if env is None else env
    return Path(env.get("GEMINI_CLI_HOME") or Path.home())


def settings_path(scope: str, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """The settings file Gemini CLI reads for ``scope`` (``project``, ``user`` or ``managed``)."""
    env = dict(os.environ) if env is None else env
    if scope == "project":
        return (cwd or Path.cwd()) / ".gemini" / "settings.json"
    if scope == "user":
        return gemini_home(env) / ".gemini" / "settings.json"
    if scope == "managed":
        if env.get("GEMINI_CLI_SYSTEM_SETTINGS_PATH"):
            return Path(env["GEMINI_CLI_SYSTEM_SETTINGS_PATH"])
        key = "linux" if sys.platform.startswith("linux") else sys.platform
        if key not in SYSTEM_SETTINGS:
            raise ConfigError(f"no known Gemini CLI system settings on {sys.platform}; use --settings-file")
        return Path(SYSTEM_SETTINGS[key])
    raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")


def gemini_events(names: list[str] | None) -> tuple[str, ...]:
    """The Gemini events ``--events`` names (Gemini's or Claude Code's names; default :data:`DEFAULT_EVENTS`)."""
    wanted = event_names(names)
    events = [_FROM_CLAUDE.get(name, name) for name in wanted]
    unknown = [name for name, event in zip(wanted, events, strict=True) if event not in GEMINI_HOOK_EVENTS]
    if unknown:
        raise ConfigError(f"not Gemini CLI hook events: {', '.join(unknown)} (known: {', '.join(GEMINI_HOOK_EVENTS)})")
    return tuple(dict.fromkeys(events)) or DEFAULT_EVENTS


class GeminiPlan(InstallPlan):
    """What to install into Gemini's settings: one shim command handler per Gemini event."""

    def __post_init__(self) -> None:
        base = InstallPlan(url=self.url, timeout_s=self.timeout_s)  # the same URL and timeout rules
        object.__setattr__(self, "url", base.url)

    def shim_command(self) -> str:
        return shim_command_line(
            self.hook_command, self.url, agent="gemini", timeout_s=self.timeout_s, fail_closed=self.fail_closed
        )

    def handler(self, event: str) -> dict[str, Any]:
        if self.approval_timeout_s is not None and event in APPROVAL_GEMINI_EVENTS:
            command = shim_command_line(
                self.hook_command,
                self.url,
                agent="gemini",
                timeout_s=self.approval_timeout_s,
                fail_closed=True,
                holds=True,
            )
            return {
                "type": "command",
                "name": HOOK_NAME,
                "command": command,
                "timeout": round(self.approval_timeout_s * 1000),
            }
        return {
            "type": "command",
            "name": HOOK_NAME,
            "command": self.shim_command(),
            "timeout": round(self.timeout_s * 1000),
        }


def _strip_comments(text: str) -> str:
    return re.sub(r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', lambda m: m[0] if m[0][0] == '"' else "", text, flags=re.S)


def read_settings(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The file's text (None when absent) and its object; Gemini's comments are refused (they would be lost)."""
    try:
        return claude_read_settings(path)
    except ConfigError as exc:
        if not isinstance(exc.__cause__, ValueError) or not _parses(_strip_comments(path.read_text(encoding="utf-8"))):
            raise
        raise ConfigError(f"{path} has comments, which rewriting it would lose; remove them first") from exc


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _trusted(folder: Path, env: dict[str, str]) -> bool | None:
    """Whether Gemini trusts ``folder`` (None when it cannot tell)."""
    if env.get("GEMINI_CLI_TRUST_WORKSPACE", "").lower() == "true":
        return True
    path = Path(env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or gemini_home(env) / ".gemini" / "trustedFolders.json")
    try:
        rules = json.loads(_strip_comments(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return None
    if not isinstance(rules, dict):
        return None
    folder = folder.resolve()
    verdict = False
    for where, level in rules.items():
        base = Path(where).expanduser().resolve()
        if level == "TRUST_FOLDER" and folder.is_relative_to(base):
            verdict = True
        elif level == "TRUST_PARENT" and folder.is_relative_to(base.parent):
            verdict = True
        elif level == "DO_NOT_TRUST" and folder == base:
            return False
    return verdict


def insecure_ancestor(path: Path) -> Path | None:
    """The first of ``path`` and its folders Gemini finds unsafe for system settings, if any.

    Gemini CLI skips its system settings file ("Security Warning: Skipping system settings")
    unless the file and every folder above it are owned by root and not writable by group
    or others.
    """
    if sys.platform == "win32":
        return None
    for candidate in (path, *path.parents):
        try:
            stat = candidate.stat()
        except OSError:
            continue  # not there yet: the installer creates it as its own user
        if stat.st_uid != 0 or stat.st_mode & 0o022:
            return candidate
    return None


def warnings(settings: dict[str, Any], before: dict[str, Any], plan: GeminiPlan, scope: str, path: Path) -> list[str]:
    """What in Gemini's settings, trust or file system would keep the installed hooks from running."""
    env = dict(os.environ)
    found = []
    if scope == "managed" and (unsafe := insecure_ancestor(path)) is not None:
        found.append(
            f"Gemini CLI skips system settings unless the file and every folder above it are owned by root "
            f"and not writable by group or others; {unsafe} is not"
        )
    config = settings.get("hooksConfig")
    config = config if isinstance(config, dict) else {}
    if config.get("enabled") is False:
        found.append("hooksConfig.enabled is false in this file: Gemini CLI runs no hook")
    disabled = config.get("disabled")
    if isinstance(disabled, list) and (HOOK_NAME in disabled or plan.shim_command() in disabled):
        found.append(f"hooksConfig.disabled lists {HOOK_NAME!r}: Gemini CLI skips hookbus's hooks")
    if scope == "project":
        folder = Path.cwd()
        if _trusted(folder, env) is False:
            found.append(
                f"Gemini CLI does not trust {folder}: project hooks do not run there and a headless run "
                "refuses to start (exit 55); trust the folder (/permissions, or trustedFolders.json)"
            )
        old, new = _commands(before), _commands(settings)
        if old and new - old:
            found.append(
                "the hook command changed: Gemini CLI trusts project hooks by name and command and "
                "lists the new command as a new project hook on its next run"
            )
    return found


def _commands(settings: dict[str, Any]) -> set[str]:
    """The commands of hookbus's handlers in ``settings``."""
    hooks = settings.get("hooks")
    found = set()
    for groups in hooks.values() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            for handler in group.get("hooks") or () if isinstance(group, dict) else ():
                if is_hookbus_handler(handler):
                    found.add(str(handler["command"]))
    return found


def _restorable_backup(path: Path, updated: dict[str, Any]) -> str | None:
    """The backup's text when it is the file as it was before the install (so restoring it is exact)."""
    try:
        text, old = read_settings(path.with_name(path.name + ".bak"))
    except ConfigError:
        return None
    if text is None or installed_url(old) is not None:
        return None
    return text if old == updated else None


def run(args: Any) -> int:
    """``hookbus install gemini``: the exit code (a user's error raises ConfigError)."""
    env = dict(os.environ)
    path = Path(args.settings_file) if args.settings_file else settings_path(args.scope, env=env)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    old_text, settings = read_settings(path)
    if args.check:
        url = args.url or installed_url(settings) or env.get("HOOKBUS_URL") or ""
        return check(GeminiPlan(url=url).url, after_install=False, hook_file=path)
    plan: GeminiPlan | None = None
    if args.uninstall:
        updated = merge(settings, None, only_url=args.url)
        new_text = _restorable_backup(path, updated) or render(updated)
    else:
        plan = GeminiPlan(
            url=args.url or "",
            events=gemini_events(args.events),
            timeout_s=args.timeout,
            hook_command=args.hook_command or default_hook_command(),
            fail_closed=args.fail_closed,
            approval_timeout_s=getattr(args, "approvals", None),
        )
        updated = merge(settings, plan)
        new_text = render(updated)
    if updated == settings and (old_text is not None or args.uninstall):
        print(f"hookbus: {path} is already up to date; nothing to change")
        if plan is not None:
            for warning in warnings(updated, settings, plan, args.scope if not args.settings_file else "", path):
                print(f"hookbus: warning: {warning}", file=sys.stderr)
            return 0 if args.no_check else check(plan.url, after_install=True, hook_file=path)
        return 0
    if args.dry_run:
        print_diff(path, old_text, new_text)
        return 0
    write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
    backup = f" (previous version: {path}.bak)" if old_text is not None else ""
    if plan is None:
        print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        return 0
    print(f"hookbus: {path}: {len(plan.events)} command hooks ({', '.join(plan.events)}) -> {plan.url}{backup}")
    print(f"hookbus: Gemini CLI runs hooks with its own environment: export ${TOKEN_ENV} where gemini runs")
    for warning in warnings(updated, settings, plan, args.scope if not args.settings_file else "", path):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check else check(plan.url, after_install=True, hook_file=path)


__all__ = [
    "DEFAULT_EVENTS",
    "GEMINI_HOOK_EVENTS",
    "GeminiPlan",
    "gemini_events",
    "gemini_home",
    "insecure_ancestor",
    "read_settings",
    "run",
    "settings_path",
    "warnings",
]
