"""The ``hookbus install claude`` command: its flags, and what a run does with the settings file."""

from __future__ import annotations

import importlib
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from hookbus.install.settings_file import (
    DEFAULT_EVENTS,
    DEFAULT_TIMEOUT_S,
    OPT_IN_EVENTS,
    TOKEN_ENV,
    InstallPlan,
    default_hook_command,
    event_names,
    installed_url,
    merge,
    notes,
    print_diff,
    read_settings,
    render,
    settings_path,
    write_atomically,
)
from hookbus.shim import AGENTS as SHIM_AGENTS
from hookbus.shim import hook_url


def check(url: str, *, after_install: bool, hook_file: Path | None = None) -> int:
    """Run the command the hooks in ``hook_file`` run, as the agent would, then post a test event
    to ``url`` with ``$HOOKBUS_TOKEN``, and report; the exit code.

    After an install, a gateway that does not answer is only a warning (it may not run yet);
    a command that cannot start is an error either way: the agent would run every tool unchecked.
    """
    from hookbus.install.check import check_command, check_gateway, installed_command

    token = os.environ.get(TOKEN_ENV) or None
    command = installed_command(hook_file) if hook_file is not None else None
    if command is not None:
        result, message = check_command(command, token)
        if result != "ok":
            if after_install and result == "no-gateway":
                print(f"hookbus: warning: check failed: {message}", file=sys.stderr)
                return 0
            print(f"hookbus: check failed: {message}", file=sys.stderr)
            return 1
        print(f"hookbus: check: {message}")
    ok, message = check_gateway(url, token)
    if ok:
        print(f"hookbus: check: {message}")
        return 0
    if after_install:  # the settings are written; the gateway may simply not run yet
        print(f"hookbus: warning: check failed: {message}", file=sys.stderr)
        return 0
    print(f"hookbus: check failed: {message}", file=sys.stderr)
    return 1


def _warn_unless_absolute(command: str) -> None:
    """Warn when ``--hook-command`` starts with a program found through ``PATH``."""
    try:
        program = shlex.split(command)[0]
    except (ValueError, IndexError):
        raise ConfigError(f"--hook-command {command!r} is not a command a shell can run") from None
    if not os.path.isabs(program):
        print(
            f"hookbus: warning: --hook-command starts with {program!r}, not an absolute path: the agent looks it up "
            "in its own PATH, and where it is not found every tool runs unchecked (--check tries it)",
            file=sys.stderr,
        )


#: The agents ``hookbus install`` connects; each but Claude Code has its module ``hookbus.install.<name>``.
AGENTS = tuple(agent for agent in SHIM_AGENTS if agent != "peri")  # Peri is configured by hand


#: The agents whose hooks cannot be told to wait long (no timeout field, or an in-process plugin).
NO_WAIT_AGENTS = ("cline", "opencode", "windsurf")


def run_install(args: Any) -> int:
    """``hookbus install AGENT``: returns the exit code (errors raise ConfigError)."""
    if getattr(args, "http", False) and args.agent != "copilot":
        raise ConfigError(f"--http is for copilot only: the {args.agent} installer picks its hook type itself")
    if args.hook_command and not args.uninstall and args.agent != "opencode":  # OpenCode refuses it
        _warn_unless_absolute(args.hook_command)
    if getattr(args, "approvals", None) is not None and args.agent in NO_WAIT_AGENTS:
        raise ConfigError(
            f"--approvals: {args.agent} gives its hooks no timeout to set, so none can wait for a person; "
            "its asks are answered through the retry (see docs/agents.md)"
        )
    if args.agent != "claude":
        installer = importlib.import_module(f"hookbus.install.{args.agent}")
        code: int = installer.run(args)
        return code
    path = Path(args.settings_file) if args.settings_file else settings_path(args.scope)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    old_text, settings = read_settings(path)
    if args.check:
        url = args.url or installed_url(settings) or os.environ.get("HOOKBUS_URL") or ""
        if args.url:
            InstallPlan(url=args.url)  # the same URL rules as an install
        return check(hook_url(url), after_install=False, hook_file=path)
    plan: InstallPlan | None = None
    if args.uninstall:
        updated = merge(settings, None, only_url=args.url)
    else:
        named = dict.fromkeys(event_names(args.events))
        events = tuple(named) or DEFAULT_EVENTS
        plan = InstallPlan(
            url=args.url or "",
            events=events,
            shim_everywhere=args.shim,
            timeout_s=args.timeout,
            hook_command=args.hook_command or default_hook_command(),
            fail_closed=args.fail_closed,
            approval_timeout_s=getattr(args, "approvals", None),
        )
        updated = merge(settings, plan)
    if updated == settings and (old_text is not None or args.uninstall):
        print(f"hookbus: {path} is already up to date; nothing to change")
        return check(plan.url, after_install=True, hook_file=path) if plan is not None and not args.no_check else 0
    new_text = render(updated)
    if args.dry_run:
        print_diff(path, old_text, new_text)
        return 0
    write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
    backup = f" (previous version: {path}.bak)" if old_text is not None else ""
    if plan is None:
        print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        return 0
    shims = sum(plan.uses_shim(event) for event in plan.events)
    print(f"hookbus: {path}: {len(plan.events) - shims} http hooks and {shims} command hooks -> {plan.url}{backup}")
    print(f"hookbus: Claude Code sends ${TOKEN_ENV} as the bearer token: export it where Claude Code runs")
    for note in notes(updated, plan):
        print(f"hookbus: note: {note}")
    return 0 if args.no_check else check(plan.url, after_install=True, hook_file=path)


def add_install_arguments(parser: Any) -> None:
    """Add ``hookbus install``'s arguments to an argparse (sub)parser."""
    parser.add_argument("agent", choices=AGENTS, help="the agent to connect")
    parser.add_argument(
        "--scope",
        choices=["project", "user", "managed"],
        default="project",
        help="settings file: project .claude/settings.json (default), user ~/.claude/settings.json, "
        "or the OS's managed-settings.json",
    )
    parser.add_argument("--settings-file", metavar="PATH", help="write this settings file instead of the scope's")
    parser.add_argument("--url", help="gateway URL (default $HOOKBUS_URL or http://127.0.0.1:8787)")
    parser.add_argument(
        "--events",
        nargs="+",
        metavar="EVENT",
        help=f"events to hook (default: every Claude Code event but {', '.join(OPT_IN_EVENTS)})",
    )
    parser.add_argument("--shim", action="store_true", help="use the 'hookbus hook' command for every event")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"handler timeout in seconds (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument("--fail-closed", action="store_true", help="shim hooks block when the gateway can't answer")
    parser.add_argument(
        "--approvals",
        nargs="?",
        type=float,
        const=600.0,
        metavar="S",
        help="claude, codex, gemini, qwen, copilot, cursor, kiro, droid, auggie: the gateway's hookbus.approvals "
        "is on: the events that can wait for a person's answer (PreToolUse, PermissionRequest and their kin) go "
        "through the shim with --fail-closed and wait up to S seconds (default 600)",
    )
    parser.add_argument(
        "--http",
        action="store_true",
        help="copilot: native http hooks instead of the shim (no process per call, but Copilot then denies "
        "every tool call while the gateway is down or refuses the token)",
    )
    parser.add_argument(
        "--hook-command",
        metavar="CMD",
        help="how the agent starts the shim (default: this Python with -I -S on hookbus/shim_start.py, both by "
        "absolute path; a command that is not an absolute path gets a warning: the agent may run it with another "
        "PATH)",
    )
    parser.add_argument("--create", action="store_true", help="create the --settings-file's folder if missing")
    parser.add_argument("--dry-run", action="store_true", help="print a unified diff and write nothing")
    parser.add_argument("--uninstall", action="store_true", help="remove what 'hookbus install' added")
    parser.add_argument(
        "--check",
        action="store_true",
        help="only check: run the installed hook command as the agent would (PATH=/usr/bin:/bin), then post a "
        "test event with $HOOKBUS_TOKEN; one line names the tenant or the problem, exit 1 on a problem "
        "(also done after every install)",
    )
    parser.add_argument("--no-check", action="store_true", help="skip the check after installing")


__all__ = ["AGENTS", "add_install_arguments", "check", "run_install"]
