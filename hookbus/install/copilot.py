"""``hookbus install copilot``: GitHub Copilot CLI's own hook file, posting to the gateway.

Where: Copilot CLI loads every ``*.json`` in its hook folders, so hookbus writes a file of its
own, ``hookbus.json``: ``--scope project`` in ``.github/hooks/`` of the current folder (the
repository's hooks), ``user`` in ``$COPILOT_HOME/hooks/`` (default ``~/.copilot/hooks/``),
``managed`` in ``/etc/github-copilot/policy.d/`` (policy hooks: root-owned, loaded for every
user and folder, trusted or not, and not switched off by ``disableAllHooks``).
``--settings-file`` picks any file (a settings file's inline ``hooks`` take the same entries).

What: ``{"version": 1, "hooks": {EVENT: [entry]}}`` with PascalCase (Claude Code) event
names, so Copilot sends Claude-shaped snake_case input. By default each entry is a
``type: "command"`` hook running the shim, ``hookbus hook --agent copilot --url URL``, with
``timeoutSec`` in seconds: it fails open (answers ``{}``) when the gateway is down, slow or
refuses the token, as hookbus does by default; ``--fail-closed`` makes it exit 2 then, before
Copilot's timeout, a deny on PreToolUse and PermissionRequest. ``--http`` writes native
``type: "http"`` hooks instead (no process per call), posting to
``URL/v1/hooks?dialect=copilot`` with the header ``Authorization: Bearer ${HOOKBUS_TOKEN}``
filled from ``allowedEnvVars: ["HOOKBUS_TOKEN"]``. Those fail closed: Copilot denies a
PreToolUse or PermissionRequest call whose http hook errs (gateway down, 401, 5xx), though it
runs it when the hook times out. The token is never written: Copilot reads ``$HOOKBUS_TOKEN``
from its environment.

Entries are hookbus's by their shape (an http hook with exactly that header and
``allowedEnvVars`` posting to a ``/v1/hooks?dialect=copilot`` URL; a ``hookbus hook --agent
copilot`` command), so installing again updates them in place and ``--uninstall`` removes
exactly them: a ``hookbus.json`` left with nothing else is deleted, and when an uninstall
leaves a file as it was before the install (its ``.bak`` parses to the same content), the
``.bak``'s own text is written back byte for byte.

After writing it warns, one line each, about what would make Copilot silently skip the
hooks: an ``http://`` URL (loopback needs ``COPILOT_HOOK_ALLOW_LOCALHOST=1`` where Copilot
runs; elsewhere Copilot wants ``https://`` for hooks that send a token or decide
permissions), repository hooks in ``copilot -p`` (loaded only in a trusted folder), and
``disableAllHooks`` in the file itself (its own hooks) or in the repository's
``.github/copilot/settings(.local).json`` (every hook, the user's too). It also warns when
the repository's ``.claude/settings(.local).json`` holds hookbus's Claude Code hooks: Copilot
runs those too, so its events would reach the gateway twice, once untranslated.
"""

from __future__ import annotations

import copy
import ipaddress
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.settings_file import (
    APPROVAL_EVENTS,
    TOKEN_ENV,
    default_hook_command,
    event_names,
    print_diff,
    read_settings,
    render,
    shim_command_line,
    shim_flags,
    write_atomically,
    write_backup,
)
from hookbus.install.settings_file import installed_url as claude_installed_url
from hookbus.shim import hook_url

AGENT = "copilot"
FILE_NAME = "hookbus.json"
AUTH_HEADERS = {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
MANAGED_DIR = Path("/etc/github-copilot/policy.d")
#: Copilot CLI's events (PascalCase, Claude Code's names) installed by default.
DEFAULT_EVENTS = (
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "UserPromptSubmit",
    "Stop",
    "SubagentStart",
    "SubagentStop",
    "SessionStart",
    "SessionEnd",
    "PreCompact",
    "Notification",
)
#: Copilot's events whose http hooks must use https:// (they decide permissions).
AUTHORIZATION_EVENTS = frozenset({"PreToolUse", "PermissionRequest"})


def copilot_home(env: dict[str, str] | None = None) -> Path:
    """Copilot CLI's per-user folder: ``$COPILOT_HOME``, else ``~/.copilot``."""
    found = (os.environ if env is None else env).get("COPILOT_HOME")
    return Path(found).expanduser() if found else Path.home() / ".copilot"


def hooks_path(scope: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """The hook file hookbus writes for ``scope`` (``project``, ``user`` or ``managed``)."""
    if scope == "project":
        return (cwd or Path.cwd()) / ".github" / "hooks" / FILE_NAME
    if scope == "user":
        return copilot_home(env) / "hooks" / FILE_NAME
    if scope == "managed":
        return MANAGED_DIR / FILE_NAME
    raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")


def chosen_events(named: list[str] | None) -> tuple[str, ...]:
    """The events to install: ``--events`` (Claude Code's names Copilot knows) or the default."""
    picked: dict[str, None] = {}
    unknown = []
    for name in event_names(named):
        if name in DEFAULT_EVENTS:
            picked[name] = None
        else:
            unknown.append(name)
    if unknown:
        raise ConfigError(f"not Copilot CLI events: {', '.join(unknown)} (known: {', '.join(DEFAULT_EVENTS)})")
    return tuple(picked) or DEFAULT_EVENTS


def entry(url: str, *, command: str | None, timeout_s: float, fail_closed: bool, holds: bool = False) -> dict[str, Any]:
    """The hook entry hookbus installs: http to ``url``, or the shim started as ``command``.

    ``holds``: the shim waits for a person's answer (``--approvals``), up to 0.8 of ``timeout_s``.
    """
    seconds: float = int(timeout_s) if timeout_s == int(timeout_s) else timeout_s
    if command is None:
        return {
            "type": "http",
            "url": f"{url}?dialect={AGENT}",
            "headers": dict(AUTH_HEADERS),
            "allowedEnvVars": [TOKEN_ENV],
            "timeoutSec": seconds,
        }
    # The shim answers before Copilot's own timeout, which always fails open.
    line = shim_command_line(command, url, agent=AGENT, timeout_s=timeout_s, fail_closed=fail_closed, holds=holds)
    return {"type": "command", "bash": line, "timeoutSec": seconds}


def _shim_url(argv: list[str]) -> str | None:
    flags = shim_flags(argv)
    if flags is None:
        return None
    options = dict(zip(flags, [*flags[1:], ""], strict=True))
    if options.get("--agent") != AGENT or not options.get("--url"):
        return None
    return hook_url(options["--url"])


def entry_url(found: Any) -> str | None:
    """The gateway ``/v1/hooks`` URL of an entry hookbus installed, or None when it is not hookbus's."""
    if not isinstance(found, dict):
        return None
    if found.get("type", "command") == "command":
        command = found.get("bash") or found.get("command")
        try:
            return _shim_url(shlex.split(command)) if isinstance(command, str) else None
        except ValueError:
            return None
    url = found.get("url")
    if found.get("type") != "http" or not isinstance(url, str):
        return None
    base, _, query = url.partition("?")
    if (
        base.rstrip("/").endswith("/v1/hooks")
        and parse_qs(query).get("dialect") == [AGENT]
        and found.get("headers") == AUTH_HEADERS
        and found.get("allowedEnvVars") == [TOKEN_ENV]
    ):
        return hook_url(base)
    return None


def merge(
    settings: dict[str, Any], wanted: dict[str, dict[str, Any]] | None, only_url: str | None = None
) -> dict[str, Any]:
    """``settings`` with hookbus's entries set to ``wanted`` (event -> entry; None removes them all).

    The input is not modified; entries already there are replaced where they stand, missing
    ones appended to their event's list.
    """
    result = copy.deepcopy(settings)
    hooks = result.get("hooks")
    if hooks is None:
        if not wanted:
            return result
        hooks = result["hooks"] = {}
    if not isinstance(hooks, dict):
        raise ConfigError("the hook file's 'hooks' is not an object; fix it by hand first")
    wanted = wanted or {}
    placed: set[str] = set()
    for event in [e for e in hooks if isinstance(hooks[e], list)]:
        kept: list[Any] = []
        for found in hooks[event]:
            url = entry_url(found)
            if url is None or (only_url is not None and url != hook_url(only_url).split("?")[0]):
                kept.append(found)
            elif event in wanted and event not in placed:
                kept.append(wanted[event])
                placed.add(event)
        if kept or not hooks[event]:
            hooks[event] = kept
        else:
            del hooks[event]
    for event, new in wanted.items():
        if event not in placed:
            if not isinstance(hooks.setdefault(event, []), list):
                raise ConfigError(f"the hook file's hooks.{event} is not a list; fix it by hand first")
            hooks[event].append(new)
    if not hooks and settings.get("hooks") != {}:
        del result["hooks"]
    return result


def installed_url(settings: dict[str, Any]) -> str | None:
    """The gateway URL of the first hookbus entry in ``settings``, if any."""
    hooks = settings.get("hooks")
    for entries in hooks.values() if isinstance(hooks, dict) else ():
        for found in entries if isinstance(entries, list) else ():
            if (url := entry_url(found)) is not None:
                return url
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warnings(path: Path, scope: str, updated: dict[str, Any], url: str, http: bool) -> list[str]:
    """What would make Copilot CLI silently skip the hooks in ``updated`` (to be written to ``path``)."""
    found = []
    parts = urlsplit(url)
    if http and parts.scheme == "http":
        if _loopback(parts.hostname or ""):
            found.append(
                f"Copilot skips http hooks to {parts.hostname} unless COPILOT_HOOK_ALLOW_LOCALHOST=1 is set "
                "where copilot runs"
            )
        else:
            found.append(
                "Copilot skips http:// hooks that send a token or decide permissions (PreToolUse, "
                "PermissionRequest): use an https:// URL, or leave out --http"
            )
    if scope == "project":
        found.append(
            "copilot -p loads repository hooks (.github/hooks) only in a trusted folder (--trust-folder, "
            "a saved trusted folder, or COPILOT_ALLOW_ALL=true); elsewhere it skips them"
        )
    if updated.get("disableAllHooks") is True:
        found.append(f"{path} sets disableAllHooks: true, so Copilot runs none of its hooks")
    if scope in ("project", "user"):
        # A repository's settings switch off every hook, the user's too, wherever copilot runs in it.
        repo = path.parent.parent.parent if scope == "project" else Path.cwd()
        for name in ("settings.json", "settings.local.json"):
            other = repo / ".github" / "copilot" / name
            try:
                settings = json.loads(other.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(settings, dict) and settings.get("disableAllHooks") is True:
                found.append(f"{other} sets disableAllHooks: true, so Copilot runs no hook in {repo}")
        for name in ("settings.json", "settings.local.json"):
            claude = repo / ".claude" / name
            try:
                has_hookbus = claude_installed_url(read_settings(claude)[1]) is not None
            except ConfigError:
                continue
            if has_hookbus:
                found.append(
                    f"Copilot also runs the hooks in {claude} (in a trusted folder): its events reach hookbus "
                    "a second time there, as Claude Code's, with Copilot's own tool arguments"
                )
    return found


def _after_uninstall(path: Path, updated: dict[str, Any]) -> str | None:
    """The text to leave after an uninstall: the ``.bak`` when it is the same content, None to delete."""
    bak = path.with_name(path.name + ".bak")
    try:
        before = bak.read_text(encoding="utf-8")
        if json.loads(before or "{}") == updated:
            return before  # the file as it was before hookbus, byte for byte
    except (OSError, ValueError):
        pass
    if path.name == FILE_NAME and set(updated) <= {"version"}:
        return None  # hookbus's own file, holding nothing else
    return render(updated)


def run(args: Any) -> int:
    """``hookbus install copilot``: returns the exit code (errors a user makes raise ConfigError)."""
    path = Path(args.settings_file) if args.settings_file else hooks_path(args.scope)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    old_text, settings = read_settings(path)
    installed = installed_url(settings) if args.check else None
    url = hook_url(args.url or installed or os.environ.get("HOOKBUS_URL") or "").split("?")[0]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--url must be an http(s) URL such as https://hookbus.internal:8787 (got {args.url!r})")
    target = f"{url}?dialect={AGENT}"
    if args.check:
        return check(target, after_install=False, hook_file=path)
    if not args.timeout > 0:
        raise ConfigError("--timeout must be more than 0 seconds")
    http = bool(getattr(args, "http", False))
    if http and (args.shim or args.fail_closed):
        flag = "--shim" if args.shim else "--fail-closed"
        raise ConfigError(
            f"--http and {flag} do not go together: --http writes http hooks, which Copilot already fails "
            "closed on; leave out --http for the shim"
        )
    shim = not http
    if args.uninstall:
        updated = merge(settings, None, only_url=args.url)
    else:
        command = (args.hook_command or default_hook_command()) if shim else None
        new = entry(url, command=command, timeout_s=args.timeout, fail_closed=args.fail_closed)
        # A hook file needs its version; a settings file's inline hooks go without.
        base = settings if old_text is not None or path.name.startswith("settings") else {"version": 1}
        entries = dict.fromkeys(chosen_events(args.events), new)
        approval_timeout_s = getattr(args, "approvals", None)
        if approval_timeout_s is not None:
            if http:
                raise ConfigError("--approvals waits in the shim, which fails closed: leave out --http")
            held = entry(url, command=command, timeout_s=approval_timeout_s, fail_closed=True, holds=True)
            entries |= {event: held for event in entries if event in APPROVAL_EVENTS}
        updated = merge(base, entries)
    if updated == settings and (old_text is not None or args.uninstall):
        print(f"hookbus: {path} is already up to date; nothing to change")
        return 0 if args.uninstall or args.no_check else check(target, after_install=True, hook_file=path)
    new_text = _after_uninstall(path, updated) if args.uninstall else render(updated)
    if not args.uninstall:
        for warning in warnings(path, args.scope if not args.settings_file else "", updated, url, not shim):
            print(f"hookbus: warning: {warning}", file=sys.stderr)
    if args.dry_run:
        print_diff(path, old_text, new_text)
        return 0
    backup = f" (previous version: {path}.bak)" if old_text is not None else ""
    if new_text is None:
        write_backup(path, old_text or "")
        path.unlink()
        print(f"hookbus: removed {path}, which held only hookbus's hooks{backup}")
        return 0
    write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
    if args.uninstall:
        print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        return 0
    kind = "command hooks (hookbus hook)" if shim else "http hooks"
    print(f"hookbus: {path}: {len(chosen_events(args.events))} {kind} -> {url}{backup}")
    print(f"hookbus: Copilot CLI sends ${TOKEN_ENV} as the bearer token: export it where copilot runs")
    if not shim:
        print(
            "hookbus: note: Copilot denies tool calls while the gateway cannot be reached or refuses the token "
            "(http hooks fail closed); without --http they run"
        )
    return 0 if args.no_check else check(target, after_install=True, hook_file=path)


__all__ = [
    "AUTH_HEADERS",
    "DEFAULT_EVENTS",
    "chosen_events",
    "copilot_home",
    "entry",
    "entry_url",
    "hooks_path",
    "installed_url",
    "merge",
    "run",
    "warnings",
]
