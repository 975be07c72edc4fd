"""``hookbus install qwen``: Qwen Code's own hooks in its ``settings.json``, posting to the gateway.

``--scope project`` writes ``.qwen/settings.json`` here, ``user`` ``$QWEN_HOME/settings.json``
(default ``~/.qwen``), ``managed`` Qwen's system settings file (``$QWEN_CODE_SYSTEM_SETTINGS_PATH``,
else :data:`SYSTEM_SETTINGS`). Each event gets one matcher group with one handler named
``hookbus``: ``type: "http"`` to ``URL/v1/hooks?dialect=qwen`` with ``Authorization: Bearer
${HOOKBUS_TOKEN}`` and ``allowedEnvVars`` (Qwen fills in only listed variables; the token is
never written), ``timeout`` in seconds; with ``--shim`` or ``--fail-closed`` (an http hook fails
open) ``type: "command"`` running ``hookbus hook --agent qwen``, ``timeout`` in milliseconds
(1000 or more is milliseconds in every Qwen version with hooks).

Handlers are hookbus's by their shape (that header and ``allowedEnvVars`` on a ``/v1/hooks``
URL, or a ``hookbus hook ... --url`` command): installing again updates them in place,
``--uninstall`` removes exactly them and the groups and event lists that only held them, and
writes the ``.bak``'s text back when it parses to the result. The file keeps its indentation.
After writing it warns about what would make Qwen silently skip the hooks: ``disableAllHooks``,
folder trust, ``security.allowedHttpHookUrls``, private-network addresses without
``security.allowPrivateNetworkHooks`` (honoured only in user and system settings).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.settings_file import (
    APPROVAL_EVENTS,
    TOKEN_ENV,
    default_hook_command,
    event_names,
    is_hookbus_handler,
    merge_handlers,
    print_diff,
    read_settings,
    write_atomically,
)
from hookbus.shim import hook_url

AUTH_HEADERS = {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}
HANDLER_NAME = "hookbus"
#: Qwen Code's events installed by default (Qwen's own names).
DEFAULT_EVENTS = tuple(
    "PreToolUse PostToolUse PostToolUseFailure PostToolBatch PermissionRequest PermissionDenied UserPromptSubmit "
    "UserPromptExpansion SessionStart SessionEnd Stop StopFailure SubagentStart SubagentStop PreCompact PostCompact "
    "Notification TodoCreated TodoCompleted InstructionsLoaded".split()
)
#: Events installed only when named with ``--events``, and why.
OPT_IN_EVENTS = {
    "MessageDisplay": "fires over and over while a reply streams",
    "SessionDelete": "has no Claude Code counterpart",
}
#: Claude Code's names ``--events`` also takes for Qwen's differently named events.
CLAUDE_NAMES = {"TaskCreated": "TodoCreated", "TaskCompleted": "TodoCompleted"}
#: Keys of ``hooks`` that are Qwen's switches, not events.
HOOKS_CONFIG_FIELDS = frozenset({"enabled", "disabled", "notifications"})
SYSTEM_SETTINGS = {
    "linux": "/etc/qwen-code/settings.json",
    "darwin": "/Library/Application Support/QwenCode/settings.json",
    "win32": "C:\\ProgramData\\qwen-code\\settings.json",
}
CARRIER_NAT = ipaddress.ip_network("100.64.0.0/10")  # shared address space: not is_private, blocked by Qwen
#: Hosts Qwen's http hooks never reach, whatever the settings.
BLOCKED_HOSTS = frozenset({"localhost.localdomain", "ip6-localhost", "ip6-loopback", "0.0.0.0", "::"})


def qwen_home() -> Path:
    """Qwen Code's per-user folder: ``$QWEN_HOME``, else ``~/.qwen``."""
    found = os.environ.get("QWEN_HOME")
    return Path(found).expanduser().resolve() if found else Path.home() / ".qwen"


def system_settings_path(platform: str = sys.platform) -> Path:
    """Qwen Code's system (managed) settings file: ``$QWEN_CODE_SYSTEM_SETTINGS_PATH`` or ``platform``'s."""
    if found := os.environ.get("QWEN_CODE_SYSTEM_SETTINGS_PATH"):
        return Path(found)
    key = "linux" if platform.startswith("linux") else platform
    if key not in SYSTEM_SETTINGS:
        raise ConfigError(f"Qwen Code has no known system settings location on {platform}; use --settings-file")
    return Path(SYSTEM_SETTINGS[key])


def settings_path(scope: str, cwd: Path | None = None) -> Path:
    """The settings file Qwen Code reads for ``scope`` (``project``, ``user`` or ``managed``)."""
    if scope == "project":
        return (cwd or Path.cwd()) / ".qwen" / "settings.json"
    if scope == "user":
        return qwen_home() / "settings.json"
    if scope == "managed":
        return system_settings_path()
    raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")


def chosen_events(named: list[str] | None) -> tuple[str, ...]:
    """The Qwen Code events to install: ``--events`` (Qwen's or Claude Code's names) or the default."""
    known = (*DEFAULT_EVENTS, *OPT_IN_EVENTS)
    picked: dict[str, None] = {}
    unknown = []
    for name in event_names(named):
        event = CLAUDE_NAMES.get(name, name)
        if event in known:
            picked[event] = None
        else:
            unknown.append(name)
    if unknown:
        raise ConfigError(f"not Qwen Code events: {', '.join(unknown)} (known: {', '.join(known)})")
    return tuple(picked) or DEFAULT_EVENTS


def handler(
    url: str, *, command: str | None, timeout_s: float, fail_closed: bool, holds: bool = False
) -> dict[str, Any]:
    """The handler hookbus installs: http to ``url``, or the shim started as ``command``.

    ``holds``: the shim waits for a person's answer (``--approvals``), up to 0.8 of ``timeout_s``.
    """
    if command is None:
        seconds: float = int(timeout_s) if timeout_s == int(timeout_s) else timeout_s
        return {
            "type": "http",
            "name": HANDLER_NAME,
            "url": f"{url}?dialect=qwen",
            "headers": dict(AUTH_HEADERS),
            "allowedEnvVars": [TOKEN_ENV],
            "timeout": seconds,
        }
    parts = [command, "hook", "--agent", "qwen", "--url", shlex.quote(url)]
    shim_timeout = round(timeout_s * 0.8, 1) if holds else min(5.0, round(timeout_s * 0.8, 1))
    if shim_timeout != 5.0:
        parts += ["--timeout", f"{shim_timeout:g}"]
    if fail_closed:
        parts.append("--fail-closed")
    return {
        "type": "command",
        "name": HANDLER_NAME,
        "command": " ".join(parts),
        "timeout": max(1000, round(timeout_s * 1000)),
    }


def handler_url(entry: Any) -> str | None:
    """The gateway ``/v1/hooks`` URL of a handler hookbus installed, or None when it is not hookbus's."""
    if not isinstance(entry, dict):
        return None
    if entry.get("type") == "command":
        plain = {k: v for k, v in entry.items() if k not in ("name", "timeout")}
        if not is_hookbus_handler(plain):
            return None
        flags = shlex.split(entry["command"])
        return hook_url(flags[flags.index("--url") + 1]) if "--url" in flags else None
    url = entry.get("url")
    if (
        entry.get("type") == "http"
        and isinstance(url, str)
        and url.split("?")[0].rstrip("/").endswith("/v1/hooks")
        and entry.get("headers") in (AUTH_HEADERS, {"Authorization": f"Bearer ${TOKEN_ENV}"})
        and entry.get("allowedEnvVars") == [TOKEN_ENV]
    ):
        return hook_url(url.split("?")[0])
    return None


def merge(
    settings: dict[str, Any], wanted: dict[str, dict[str, Any]] | None, only_url: str | None = None
) -> dict[str, Any]:
    """``settings`` with hookbus's handlers set to ``wanted`` (event -> handler; None removes them all).

    The input is not modified; handlers already there are replaced where they stand, missing
    ones appended as a new matcher group.
    """
    return merge_handlers(settings, wanted or {}, only_url=only_url, is_ours=_is_ours)


def _is_ours(entry: Any, only_url: str | None) -> bool:
    """Whether ``entry`` is a hookbus handler (for ``only_url``'s gateway, when given)."""
    found = handler_url(entry)
    return found is not None and (only_url is None or found == hook_url(only_url))


def _get(settings: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(settings, dict):
            return None
        settings = settings.get(key)  # type: ignore[assignment]
    return settings


def _admits(pattern: Any, url: str) -> bool:
    """Whether one ``security.allowedHttpHookUrls`` entry admits ``url``, as Qwen Code compiles it."""
    if not isinstance(pattern, str):
        return False
    if "\\." in pattern:  # written pre-escaped: only ``*`` is translated
        body = pattern.replace("*", ".*")
    else:
        body = re.sub(r"[.+?^${}()|\[\]\\]", r"\\\g<0>", pattern).replace("*", ".*")
    try:
        return re.fullmatch(body, url, re.IGNORECASE) is not None
    except re.error:
        return False


def _trusted(folder: Path, trust_file: Path) -> bool:
    try:
        rules = json.loads(trust_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    for path, level in rules.items() if isinstance(rules, dict) else ():
        root = Path(path) if level == "TRUST_FOLDER" else Path(path).parent if level == "TRUST_PARENT" else None
        if root is not None and (folder == root or root in folder.parents):
            return True
    return False


def _settings_files(path: Path, scope: str, updated: dict[str, Any]) -> list[tuple[str, Path, dict[str, Any]]]:
    """``(scope, file, settings)`` of the file being written and the user and system files beside it."""
    others: list[tuple[str, Path]] = [("user", qwen_home() / "settings.json")]
    with contextlib.suppress(ConfigError):  # no system file on an unknown platform
        system = system_settings_path()
        defaults = os.environ.get("QWEN_CODE_SYSTEM_DEFAULTS_PATH") or system.parent / "system-defaults.json"
        others += [("managed", system), ("managed", Path(defaults))]
    files: list[tuple[str, Path, dict[str, Any]]] = [(scope, path, updated)]
    for kind, other in others:
        if other.resolve() != path.resolve():
            with contextlib.suppress(ConfigError):  # unreadable: Qwen reports it itself
                files.append((kind, other, read_settings(other)[1]))
    return files


def _private_address(host: str) -> bool:
    """Whether ``host`` is an IP address in a range Qwen Code's http hooks refuse (loopback is fine)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not address.is_loopback and (address.is_private or address.is_link_local or address in CARRIER_NAT)


def warnings(path: Path, scope: str, updated: dict[str, Any], url: str, http: bool) -> list[str]:
    """What would make Qwen Code silently not run the hooks in ``updated`` (to be written to ``path``)."""
    files = _settings_files(path, scope, updated)
    off = [p for _, p, s in files if s.get("disableAllHooks") is True]
    found = [f"{p} sets disableAllHooks: true, so Qwen Code runs no hook" for p in off]
    trusted_scopes = [s for kind, _, s in files if kind != "project"]
    if scope == "project" and any(_get(s, "security", "folderTrust", "enabled") is True for s in trusted_scopes):
        trust_file = Path(os.environ.get("QWEN_CODE_TRUSTED_FOLDERS_PATH") or qwen_home() / "trustedFolders.json")
        folder = path.parent.parent.resolve()
        if not _trusted(folder, trust_file):
            found.append(f"folder trust is on and {folder} is not trusted, so Qwen Code skips its project hooks")
    if not http:
        return found
    target = f"{url}?dialect=qwen"

    def lists(project: bool) -> list[Any]:
        values = [_get(s, "security", "allowedHttpHookUrls") for kind, _, s in files if (kind == "project") == project]
        return [v for v in values if isinstance(v, list)]

    # A project's list counts only when no user or system settings set one.
    if any(urls and not any(_admits(u, target) for u in urls) for urls in lists(False) or lists(True)):
        found.append(f"security.allowedHttpHookUrls does not admit {target}, so Qwen Code would not call it")
    host = (urlsplit(url).hostname or "").lower()
    private = _private_address(host)
    relaxed = any(_get(s, "security", "allowPrivateNetworkHooks") is True for s in trusted_scopes)
    if host in BLOCKED_HOSTS:
        found.append(f"Qwen Code's http hooks never call {host}; use 127.0.0.1 or the gateway's address")
    elif private and not relaxed:
        found.append(
            f"{host} is a private-network address: Qwen Code blocks it unless user or system settings "
            "set security.allowPrivateNetworkHooks: true"
        )
    return found


def installed_url(settings: dict[str, Any]) -> str | None:
    """The gateway URL of the first hookbus handler in ``settings``, if any."""
    hooks = settings.get("hooks")
    for groups in hooks.values() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            for entry in group.get("hooks") or () if isinstance(group, dict) else ():
                if (found := handler_url(entry)) is not None:
                    return found
    return None


def render_like(old_text: str | None, settings: dict[str, Any]) -> str:
    """``settings`` as JSON indented like ``old_text`` (two spaces, as Qwen writes, when new)."""
    found = re.search(r"^([ \t]+)\S", old_text or "", re.MULTILINE)
    indent = found[1] if found else "  "
    text = json.dumps(settings, indent=indent, ensure_ascii=False)
    return text + "\n" if old_text is None or old_text.endswith("\n") else text


def _before_hookbus(path: Path, updated: dict[str, Any]) -> str | None:
    """The ``.bak``'s text when it holds exactly ``updated`` (the file as it was before hookbus)."""
    try:
        before = path.with_name(path.name + ".bak").read_text(encoding="utf-8")
        return before if json.loads(before or "{}") == updated else None
    except (OSError, ValueError):
        return None


def _scope_of(path: Path) -> str:
    """The scope ``--settings-file`` stands for: its ``.qwen`` folder's project, the system's or the user's."""
    try:
        if path.resolve() == system_settings_path().resolve():
            return "managed"
    except ConfigError:
        pass
    if path.parent.name == ".qwen" and path.parent.resolve() != qwen_home().resolve():
        return "project"
    return "user"


def run(args: Any) -> int:
    """``hookbus install qwen``: returns the exit code (errors a user makes raise ConfigError)."""
    path = Path(args.settings_file) if args.settings_file else settings_path(args.scope)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    old_text, settings = read_settings(path)
    installed = installed_url(settings) if args.check else None
    url = hook_url(args.url or installed or os.environ.get("HOOKBUS_URL") or "").split("?")[0]
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"--url must be an http(s) URL such as http://hookbus.internal:8787 (got {args.url!r})")
    if args.check:
        return check(url, after_install=False, hook_file=path)
    if not args.timeout > 0:
        raise ConfigError("--timeout must be more than 0 seconds")
    shim = args.shim or args.fail_closed  # an http hook fails open: failing closed needs the shim
    events = chosen_events(args.events)
    if args.uninstall:
        updated = merge(settings, None, only_url=args.url)
    else:
        command = (args.hook_command or default_hook_command()) if shim else None
        entry = handler(url, command=command, timeout_s=args.timeout, fail_closed=args.fail_closed)
        entries = dict.fromkeys(events, entry)
        approval_timeout_s = getattr(args, "approvals", None)
        if approval_timeout_s is not None:  # an http hook fails open: a person's answer waits in the shim
            held = handler(
                url,
                command=args.hook_command or default_hook_command(),
                timeout_s=approval_timeout_s,
                fail_closed=True,
                holds=True,
            )
            entries |= {event: held for event in events if event in APPROVAL_EVENTS}
        updated = merge(settings, entries)
    unchanged = updated == settings and (old_text is not None or args.uninstall)
    new_text = (args.uninstall and _before_hookbus(path, updated)) or render_like(old_text, updated)
    if unchanged:
        print(f"hookbus: {path} is already up to date; nothing to change")
    elif args.dry_run:
        print_diff(path, old_text, new_text)
        return 0
    else:
        write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
        backup = f" (previous version: {path}.bak)" if old_text is not None else ""
        if args.uninstall:
            print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        else:
            kind = "command (hookbus hook)" if shim else "http"
            print(f"hookbus: {path}: {len(events)} {kind} hooks -> {url}{backup}")
            print(f"hookbus: Qwen Code sends ${TOKEN_ENV} as the bearer token: export it where Qwen Code runs")
    if args.uninstall:
        return 0
    scope = _scope_of(path) if args.settings_file else args.scope
    for warning in warnings(path, scope, updated, url, not shim):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check or args.dry_run else check(url, after_install=True, hook_file=path)


__all__ = ["DEFAULT_EVENTS", "OPT_IN_EVENTS", "handler", "handler_url", "merge", "run", "settings_path", "warnings"]
