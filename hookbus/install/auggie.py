"""``hookbus install auggie``: Augment Auggie's ``settings.json`` hooks, pointed at the gateway.

Auggie's hooks are Claude Code's in shape (``hooks`` -> event -> matcher groups -> handlers
``{"type": "command", "command", "timeout"}`` with ``timeout`` in milliseconds), but a
handler's ``command`` must be the path of a ``.sh`` file. So the installer writes a small
script next to the settings, ``hooks/hookbus-hook.sh``, which runs the shim: ``exec hookbus
hook --agent auggie --url URL``; with ``--fail-closed`` PreToolUse (the one event that blocks
on exit 2) gets ``hooks/hookbus-hook-fail-closed.sh``, which adds ``--fail-closed``. The
token is never written: Auggie runs hooks with its own environment, so ``$HOOKBUS_TOKEN``
reaches the shim from there. Written from Augment's documentation only (Auggie talks only
to Augment's service).

Files, by ``--scope``: ``project`` is ``.augment/settings.json`` in the workspace, ``user`` is
``~/.augment/settings.json``, ``managed`` is the admin file ``/etc/augment/settings.json``
(``C:\\ProgramData\\Augment\\settings.json`` on Windows), which user settings cannot
override. A handler is hookbus's by its command: the path of one of those two scripts.
Installing again replaces hookbus's handlers where they stand (a second run changes
nothing); ``--uninstall`` removes exactly them, the groups and event lists they alone made,
and the scripts; ``--dry-run`` prints a unified diff of the settings and the scripts; the
previous settings are kept as ``.bak``.

Events: PreToolUse, PostToolUse, Stop, SessionStart and SessionEnd unless ``--events`` names
others (Notification is accepted but undocumented). Warnings: a project's
``.augment/settings.local.json`` that has hooks of its own, which take precedence.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.hooks_json import shim_command
from hookbus.install.settings_file import (
    TOKEN_ENV,
    InstallPlan,
    default_hook_command,
    event_names,
    merge_handlers,
    print_diff,
    read_settings,
    render,
    write_atomically,
)

AUGGIE_HOOK_EVENTS = ("PreToolUse", "PostToolUse", "Stop", "SessionStart", "SessionEnd", "Notification")
DEFAULT_EVENTS = AUGGIE_HOOK_EVENTS[:5]
SCRIPT = "hookbus-hook.sh"
FAIL_CLOSED_SCRIPT = "hookbus-hook-fail-closed.sh"
SYSTEM_SETTINGS = {"win32": "C:\\ProgramData\\Augment\\settings.json"}


def settings_path(scope: str) -> Path:
    """The settings file Auggie reads for ``scope`` (``project``, ``user`` or ``managed``)."""
    if scope == "project":
        return Path.cwd() / ".augment" / "settings.json"
    if scope == "user":
        return Path.home() / ".augment" / "settings.json"
    if scope == "managed":
        return Path(SYSTEM_SETTINGS.get(sys.platform, "/etc/augment/settings.json"))
    raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")


def auggie_events(names: list[str] | None) -> tuple[str, ...]:
    """The events ``--events`` names (default :data:`DEFAULT_EVENTS`)."""
    wanted = event_names(names)
    unknown = [name for name in wanted if name not in AUGGIE_HOOK_EVENTS]
    if unknown:
        raise ConfigError(f"not Auggie hook events: {', '.join(unknown)} (known: {', '.join(AUGGIE_HOOK_EVENTS)})")
    return tuple(dict.fromkeys(wanted)) or DEFAULT_EVENTS


def script_text(command: str) -> str:
    """The ``.sh`` file Auggie runs: the shim ``command``, given Auggie's stdin."""
    return (
        f"#!/bin/sh\n# Written by 'hookbus install auggie' (Auggie runs hooks from .sh files only).\nexec {command}\n"
    )


def script_url(path: Path) -> str | None:
    """The gateway URL a hookbus script at ``path`` posts to, if it is one."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("exec "):
            argv = shlex.split(line[5:])
            if "--url" in argv and argv.index("--url") + 1 < len(argv):
                return argv[argv.index("--url") + 1]
    return None


def is_hookbus_handler(handler: Any, only_url: str | None = None) -> bool:
    """Whether ``handler`` runs one of hookbus's scripts (for ``only_url``'s gateway when given)."""
    if not isinstance(handler, dict) or handler.get("type") != "command":
        return False
    command = handler.get("command")
    if not isinstance(command, str) or os.path.basename(command) not in (SCRIPT, FAIL_CLOSED_SCRIPT):
        return False
    if only_url is None:
        return True
    url = script_url(Path(command))
    return url is not None and InstallPlan(url=url).url == InstallPlan(url=only_url).url


def merge(settings: dict[str, Any], wanted: dict[str, dict[str, Any]] | None, only_url: str | None) -> dict[str, Any]:
    """``settings`` with hookbus's handlers set to ``wanted`` (removed when None); a new dict."""
    return merge_handlers(settings, wanted or {}, only_url=only_url, is_ours=is_hookbus_handler)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc


def warnings(scope: str, path: Path) -> list[str]:
    """What around the settings would keep the installed hooks from running."""
    if scope != "project":
        return []
    local = path.with_name("settings.local.json")
    try:
        _, overrides = read_settings(local)
    except ConfigError:
        return []
    if isinstance(overrides.get("hooks"), dict) and overrides["hooks"]:
        return [f"{local} has hooks of its own, which take precedence over {path.name}'s"]
    return []


def _script_to_check(folder: Path) -> Path:
    """The script Auggie runs for most events (the fail-closed one when it is the only one)."""
    return folder / SCRIPT if (folder / SCRIPT).exists() else folder / FAIL_CLOSED_SCRIPT


def run(args: Any) -> int:
    """``hookbus install auggie``: the exit code (a user's error raises ConfigError)."""
    path = Path(args.settings_file) if args.settings_file else settings_path(args.scope)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    folder = path.parent / "hooks"
    old_text, settings = read_settings(path)
    if args.check:
        return check(
            InstallPlan(url=args.url or script_url(folder / SCRIPT) or "").url,
            after_install=False,
            hook_file=_script_to_check(folder),
        )
    scripts: dict[Path, str | None] = {}
    plan: InstallPlan | None = None
    if args.uninstall:
        updated = merge(settings, None, args.url)
        if args.url is None or updated != settings:
            scripts = {folder / SCRIPT: None, folder / FAIL_CLOSED_SCRIPT: None}
    else:
        plan = InstallPlan(url=args.url or "", timeout_s=args.timeout, fail_closed=args.fail_closed)
        hook_command = args.hook_command or default_hook_command()
        wanted = {}
        approval_timeout_s = getattr(args, "approvals", None)
        for event in auggie_events(args.events):
            held = approval_timeout_s is not None and event == "PreToolUse"  # waits for a person, fails closed
            closed = held or (plan.fail_closed and event == "PreToolUse")
            timeout_s = approval_timeout_s if held and approval_timeout_s is not None else plan.timeout_s
            script = folder / (FAIL_CLOSED_SCRIPT if closed else SCRIPT)
            line = shim_command(hook_command, "auggie", plan.url, timeout_s, closed, holds=held)
            scripts[script] = script_text(line)
            wanted[event] = {"type": "command", "command": str(script), "timeout": round(timeout_s * 1000)}
        for name in (SCRIPT, FAIL_CLOSED_SCRIPT):  # a script no handler runs any more goes
            scripts.setdefault(folder / name, None)
        updated = merge(settings, wanted, None)
    changed_scripts = {script: text for script, text in scripts.items() if _read(script) != text}
    if updated == settings and not changed_scripts and (old_text is not None or args.uninstall):
        print(f"hookbus: {path} is already up to date; nothing to change")
        if plan is None:
            return 0
        for warning in warnings("" if args.settings_file else args.scope, path):
            print(f"hookbus: warning: {warning}", file=sys.stderr)
        return 0 if args.no_check else check(plan.url, after_install=True, hook_file=_script_to_check(folder))
    new_text = render(updated)
    if args.dry_run:
        if updated != settings or old_text is None:
            print_diff(path, old_text, new_text)
        for script, text in changed_scripts.items():
            print_diff(script, _read(script), text)
        return 0
    if updated != settings or old_text is None:
        write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
    for script, text in changed_scripts.items():
        if text is None:
            script.unlink(missing_ok=True)
        else:
            write_atomically(script, text, backup=False)
            script.chmod(0o755)
    backup = f" (previous version: {path}.bak)" if old_text is not None and updated != settings else ""
    if plan is None:
        print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        return 0
    print(f"hookbus: {path}: {len(wanted)} command hooks ({', '.join(wanted)}) -> {plan.url} via {folder}{backup}")
    print(f"hookbus: Auggie runs hooks with its own environment: export ${TOKEN_ENV} where auggie runs")
    for warning in warnings("" if args.settings_file else args.scope, path):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check else check(plan.url, after_install=True, hook_file=_script_to_check(folder))


__all__ = [
    "AUGGIE_HOOK_EVENTS",
    "DEFAULT_EVENTS",
    "FAIL_CLOSED_SCRIPT",
    "SCRIPT",
    "auggie_events",
    "is_hookbus_handler",
    "merge",
    "run",
    "script_text",
    "script_url",
    "settings_path",
]
