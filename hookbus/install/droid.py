"""``hookbus install droid``: Factory Droid's command hooks, pointed at the gateway.

Droid runs command hooks only, so every event gets one handler running the shim, ``hookbus
hook --agent droid --url URL``, with Droid's ``timeout`` in whole seconds; the shim's own
``--timeout`` stays below it, so the shim answers before Droid kills it. ``--fail-closed`` goes
on PreToolUse and UserPromptSubmit only, where Droid blocks on exit 2; on Stop an exit 2 means
"keep working", which an unreachable gateway would repeat for ever. The token is never
written: Droid runs hooks with its own environment, so ``$HOOKBUS_TOKEN`` reaches the shim
from there.

Files, by ``--scope``:

* ``project``: ``.factory/hooks.json`` in the current folder, which is the event map itself
  (no ``hooks`` wrapper: Droid ignores one there).
* ``user``: ``~/.factory/hooks.json``; ``$FACTORY_HOME_OVERRIDE`` stands in for ``~``, as in Droid.
* ``managed``: the ``hooks`` of the system-managed settings file Droid reads as org settings,
  ``/etc/factory/settings.json`` (``/Library/Application Support/Factory/settings.json`` on
  macOS), or ``$FACTORY_ORG_MANAGED_SETTINGS_LOCAL_PATH`` when that is set.

Droid reads a folder's ``settings.json`` ``hooks`` only while there is no ``hooks.json`` next
to it (observed with 0.225.2), so for project and user scope, when ``hooks.json`` is absent and
``settings.json`` holds hooks, hookbus adds its hooks there instead: writing a ``hooks.json``
would silently switch the user's hooks off. ``--settings-file`` writes any file: a
``settings.json`` / ``settings.local.json`` by its ``hooks``, anything else as a hooks.json.
Merging is Claude Code's (:mod:`hookbus.install.settings_file`: a handler is hookbus's by its
``hookbus hook ... --url`` command). The ``.bak`` backup, idempotence and ``--dry-run`` work as
for Claude Code; ``--uninstall`` removes exactly hookbus's handlers, restores the backup byte
for byte when it holds the same, and removes a hooks.json left empty that hookbus created.

Warnings name what would make the hooks silently not run: ``hooksDisabled: true``,
``allowManagedHooksOnly`` in the managed settings, a ``hooks`` wrapper inside hooks.json, hooks
in a settings.json that a hooks.json hides, a managed file Droid does not read, and
UserPromptSubmit, which ``droid exec`` never sends.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.settings_file import (
    APPROVAL_EVENTS,
    TOKEN_ENV,
    InstallPlan,
    default_hook_command,
    event_names,
    installed_url,
    merge,
    print_diff,
    read_settings,
    render,
    shim_command_line,
    write_atomically,
)
from hookbus.shim import hook_url

#: Every hook event of Factory Droid 0.225.2 (Claude Code's names).
DROID_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "Notification",
    "PreCompact",
    "SubagentStop",
    "Stop",
    "SessionEnd",
)
DEFAULT_EVENTS = DROID_EVENTS
#: Where ``--fail-closed`` applies: Droid blocks on exit 2 here.
FAIL_CLOSED_EVENTS = frozenset({"PreToolUse", "UserPromptSubmit"})
MANAGED_DIRS = {"linux": "/etc/factory", "darwin": "/Library/Application Support/Factory"}
MANAGED_ENV = "FACTORY_ORG_MANAGED_SETTINGS_LOCAL_PATH"
SETTINGS_NAMES = ("settings.json", "settings.local.json")


def factory_dir(env: dict[str, str] | None = None) -> Path:
    """Droid's user folder: ``$FACTORY_HOME_OVERRIDE/.factory``, else ``~/.factory``."""
    env = dict(os.environ) if env is None else env
    home = Path(env["FACTORY_HOME_OVERRIDE"]) if env.get("FACTORY_HOME_OVERRIDE") else Path.home()
    return home / ".factory"


def system_managed_path(platform: str = sys.platform) -> Path | None:
    """The system-managed settings file Droid reads first, on ``platform`` (None where it has none)."""
    key = "linux" if platform.startswith("linux") else platform
    return Path(MANAGED_DIRS[key]) / "settings.json" if key in MANAGED_DIRS else None


def hooks_path(scope: str, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """The file ``hookbus install droid`` writes for ``scope``."""
    env = dict(os.environ) if env is None else env
    if scope == "managed":
        if env.get(MANAGED_ENV):
            return Path(env[MANAGED_ENV])
        found = system_managed_path()
        if found is None:
            raise ConfigError(f"no known Factory managed-settings location on {sys.platform}; use --settings-file")
        return found
    if scope == "project":
        folder = (cwd or Path.cwd()) / ".factory"
    elif scope == "user":
        folder = factory_dir(env)
    else:
        raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")
    hooks_json, settings = folder / "hooks.json", folder / "settings.json"
    if not hooks_json.exists() and settings.is_file() and _hook_map(_load(settings), wrapped=True):
        return settings  # a new hooks.json would hide the hooks already there
    return hooks_json


def droid_events(names: list[str] | None) -> tuple[str, ...]:
    """The events ``--events`` names (comma or space separated), or the default set."""
    named = tuple(dict.fromkeys(event_names(names)))
    unknown = [name for name in named if name not in DROID_EVENTS]
    if unknown:
        raise ConfigError(f"not Factory Droid hook events: {', '.join(unknown)} (Droid has {', '.join(DROID_EVENTS)})")
    return named or DEFAULT_EVENTS


class DroidPlan(InstallPlan):
    """What to install for Droid: one shim command handler per event."""

    def __post_init__(self) -> None:
        InstallPlan(url=self.url, events=(), timeout_s=self.timeout_s)  # its URL and timeout checks
        object.__setattr__(self, "url", hook_url(self.url))

    def timeout_for(self, event: str) -> int:
        """Droid's handler timeout, in whole seconds."""
        return max(1, math.ceil(self.timeout_s))

    def command_for(self, event: str) -> str:
        """The shell command Droid runs for ``event``."""
        return shim_command_line(
            self.hook_command,
            self.url,
            agent="droid",
            timeout_s=self.timeout_s,
            fail_closed=self.fail_closed and event in FAIL_CLOSED_EVENTS,
        )

    def handler(self, event: str) -> dict[str, Any]:
        if self.approval_timeout_s is not None and event in APPROVAL_EVENTS:  # waits for a person, fails closed
            command = shim_command_line(
                self.hook_command,
                self.url,
                agent="droid",
                timeout_s=self.approval_timeout_s,
                fail_closed=True,
                holds=True,
            )
            return {"type": "command", "command": command, "timeout": max(1, math.ceil(self.approval_timeout_s))}
        return {"type": "command", "command": self.command_for(event), "timeout": self.timeout_for(event)}


def is_settings_file(path: Path) -> bool:
    """Whether ``path`` is a Droid settings file (hooks under ``hooks``) rather than a hooks.json."""
    return path.name in SETTINGS_NAMES


def _load(path: Path) -> dict[str, Any]:
    try:
        return read_settings(path)[1]
    except ConfigError:
        return {}


def _hook_map(document: dict[str, Any], *, wrapped: bool) -> dict[str, Any]:
    hooks = document.get("hooks") if wrapped else document
    return hooks if isinstance(hooks, dict) else {}


def _updated(document: dict[str, Any], plan: DroidPlan | None, url: str | None, *, wrapped: bool) -> dict[str, Any]:
    if wrapped:
        return merge(document, plan, only_url=url)
    hooks: dict[str, Any] = merge({"hooks": document}, plan, only_url=url).get("hooks", {})
    return hooks


def warnings(path: Path, scope: str, document: dict[str, Any], plan: DroidPlan, env: dict[str, str]) -> list[str]:
    """What would make the installed hooks silently not run."""
    found = []
    wrapped = is_settings_file(path)
    if _hook_map(document, wrapped=wrapped).get("hooksDisabled") is True:
        found.append(f"{path} sets hooksDisabled: true, so Droid runs no hook (/hooks in droid turns them on)")
    if not wrapped and isinstance(document.get("hooks"), dict):
        found.append(f"{path} holds a 'hooks' wrapper, which Droid ignores in hooks.json; move its events to the top")
    settings = path.with_name("settings.json")
    if not wrapped and _hook_map(_load(settings), wrapped=True):
        found.append(f"Droid ignores the hooks in {settings} while {path} exists; move them to {path}")
    managed = Path(env[MANAGED_ENV]) if env.get(MANAGED_ENV) else system_managed_path()
    system = system_managed_path()
    if scope == "managed" and system is not None and path != system and system.exists():
        found.append(f"Droid reads {system} as its managed settings while it exists, not {path}")
    elif scope != "managed" and managed is not None and _load(managed).get("allowManagedHooksOnly") is True:
        found.append(f"{managed} sets allowManagedHooksOnly: true: Droid runs only managed hooks, not these")
    if "UserPromptSubmit" in plan.events:
        found.append(
            "`droid exec` sends no UserPromptSubmit (only interactive sessions do): its policy runs there only"
        )
    return found


def _restorable_backup(path: Path, new: dict[str, Any]) -> str | None:
    """The ``.bak`` text when it holds what ``new`` holds (the file as it was before the install)."""
    try:
        text, before = read_settings(path.with_name(path.name + ".bak"))
    except ConfigError:
        return None
    return text if text is not None and before == new else None


def run(args: Any) -> int:
    """``hookbus install droid``: returns the exit code (errors raise ConfigError)."""
    env = dict(os.environ)
    path = Path(args.settings_file) if args.settings_file else hooks_path(args.scope, env=env)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    wrapped = is_settings_file(path)
    old_text, document = read_settings(path)
    if args.check:
        url = args.url or installed_url(document if wrapped else {"hooks": document}) or env.get("HOOKBUS_URL") or ""
        if args.url:
            InstallPlan(url=args.url)  # the same URL rules as an install
        return check(hook_url(url), after_install=False, hook_file=path)
    plan = None
    if not args.uninstall:
        plan = DroidPlan(
            url=args.url or "",
            events=droid_events(args.events),
            timeout_s=args.timeout,
            hook_command=args.hook_command or default_hook_command(),
            fail_closed=args.fail_closed,
            approval_timeout_s=getattr(args, "approvals", None),
        )
    updated = _updated(document, plan, args.url if args.uninstall else None, wrapped=wrapped)
    new_text: str | None = render(updated)
    if updated == document and (old_text is not None or plan is None):
        print(f"hookbus: {path} is already up to date; nothing to change")
        return check(plan.url, after_install=True, hook_file=path) if plan is not None and not args.no_check else 0
    if plan is None and (restored := _restorable_backup(path, updated)) is not None:
        new_text = restored
    elif plan is None and not updated and not wrapped and not path.with_name(path.name + ".bak").exists():
        new_text = None  # a hooks.json hookbus created: gone again
    if args.dry_run:
        print_diff(path, old_text, new_text)
        return 0
    if new_text is None:
        path.unlink()
        print(f"hookbus: removed {path}, which held only hookbus's hooks")
        return 0
    write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
    backup = f" (previous version: {path}.bak)" if old_text is not None else ""
    if plan is None:
        print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        return 0
    print(f"hookbus: {path}: {len(plan.events)} command hooks -> {plan.url}{backup}")
    print(f"hookbus: Droid passes ${TOKEN_ENV} from its environment to the hooks: export it where droid runs")
    for warning in warnings(path, args.scope, json.loads(new_text), plan, env):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check else check(plan.url, after_install=True, hook_file=path)


__all__ = [
    "DEFAULT_EVENTS",
    "DROID_EVENTS",
    "FAIL_CLOSED_EVENTS",
    "DroidPlan",
    "droid_events",
    "factory_dir",
    "hooks_path",
    "is_settings_file",
    "run",
    "system_managed_path",
    "warnings",
]
