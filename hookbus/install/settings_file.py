"""The Claude Code settings file that ``hookbus install claude`` writes: which handlers, merged how.

It merges hook handlers into one Claude Code settings file (project ``.claude/settings.json``,
user ``~/.claude/settings.json`` or the OS's managed-settings file; ``--settings-file`` picks
any file): a ``type: "http"`` handler posting to the gateway for every event that supports
http, and a ``type: "command"`` handler running ``hookbus hook --url ...`` for SessionStart
and Setup (for every event with ``--shim``). Everything else in the file is left as it was.

**Which handlers are hookbus's.** Claude Code's settings schema allows no unknown fields on
a handler, so there is no marker field; a handler is hookbus's by its exact shape: an http
handler whose headers are exactly ``{"Authorization": "Bearer $HOOKBUS_TOKEN"}`` and whose
``allowedEnvVars`` is exactly ``["HOOKBUS_TOKEN"]``, posting to a ``/v1/hooks`` URL; a
command handler whose command is ``hookbus hook ... --url ...`` (any path to ``hookbus``,
``python -m hookbus hook`` or ``python -I -S .../hookbus/shim_start.py hook``). Installing again
updates those handlers in place (same position), so a second run changes nothing;
``--uninstall`` removes exactly them, plus the matcher groups and event lists that only held
them (``--url`` narrows it to one gateway). The one thing an uninstall cannot tell apart is
an event list that was already empty before the install (it means nothing to Claude Code): it
goes too.

**Events left out unless named with ``--events``.** WorktreeCreate and WorktreeRemove: a
configured hook *replaces* Claude Code's git worktree handling, so a policy service that
has no path to return would break worktrees. PreModelSwitch and PostModelSwitch: Claude
Code v2.1.251+ only, and not in the published settings schema yet.

The file is written atomically (temporary file in the same folder, then rename) and the
previous version is kept as ``<file>.bak``, written the same way, so a planted link there is
replaced, never written through; ``--dry-run`` prints a unified diff instead. The
shim command names the Python that ran the installer and the shim's start file by absolute
path, with ``-I -S`` (:mod:`hookbus.install.shim_command`). After writing, and alone with
``--check``, it runs the installed shim command as Claude Code would, with a minimal ``PATH``,
then posts a harmless test event to the gateway with ``$HOOKBUS_TOKEN``
(:mod:`hookbus.install.check`) and says whether the token is accepted, as which tenant.
This module uses only the standard library.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bus.errors import ConfigError
from bus.hooks.events import CLAUDE_EVENTS, NO_HTTP_EVENTS
from hookbus.install.shim_command import SHIM_START, default_hook_command, shim_flags
from hookbus.shim import hook_url

#: The events whose ask can wait for a person (bus.policy.approvals.APPROVAL_EVENTS; the parser loads no policy code).
APPROVAL_EVENTS = ("PreToolUse", "PermissionRequest")

TOKEN_ENV = "HOOKBUS_TOKEN"  # noqa: S105 (a variable name, not a secret)
AUTH_HEADERS = {"Authorization": f"Bearer ${TOKEN_ENV}"}
DEFAULT_TIMEOUT_S = 10.0
SHIM_DEFAULT_TIMEOUT_S = 5.0
#: Events installed only when named with ``--events``, and why.
OPT_IN_EVENTS = {
    "WorktreeCreate": "a WorktreeCreate hook replaces git's worktree creation",
    "WorktreeRemove": "a WorktreeRemove hook replaces git's worktree removal",
    "PreModelSwitch": "needs Claude Code v2.1.251+ and is not in the settings schema yet",
    "PostModelSwitch": "needs Claude Code v2.1.251+ and is not in the settings schema yet",
}
DEFAULT_EVENTS = tuple(event for event in CLAUDE_EVENTS if event not in OPT_IN_EVENTS)
MANAGED_SETTINGS = {
    "linux": "/etc/claude-code/managed-settings.json",
    "darwin": "/Library/Application Support/ClaudeCode/managed-settings.json",
    "win32": "C:\\Program Files\\ClaudeCode\\managed-settings.json",
}


def settings_path(
    scope: str, *, cwd: Path | None = None, home: Path | None = None, platform: str = sys.platform
) -> Path:
    """The settings file Claude Code reads for ``scope`` (``project``, ``user`` or ``managed``)."""
    if scope == "project":
        return (cwd or Path.cwd()) / ".claude" / "settings.json"
    if scope == "user":
        return (home or Path.home()) / ".claude" / "settings.json"
    if scope == "managed":
        key = "linux" if platform.startswith("linux") else platform
        if key not in MANAGED_SETTINGS:
            raise ConfigError(f"no known managed-settings location on {platform}; use --settings-file")
        return Path(MANAGED_SETTINGS[key])
    raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")


def shim_command_line(
    hook_command: str, url: str, *, agent: str = "claude", timeout_s: float, fail_closed: bool, holds: bool = False
) -> str:
    """The shell command an agent runs for ``hookbus hook`` (``--agent`` but for Claude Code).

    The shim gives up at 0.8 of the handler's ``timeout_s`` (at most its own default, unless it
    ``holds`` for a person's answer), so that it answers, failing open or closed as asked, before
    the agent's timeout decides instead.
    """
    parts = [hook_command, "hook", *(("--agent", agent) if agent != "claude" else ()), "--url", shlex.quote(url)]
    shim_timeout = round(timeout_s * 0.8, 1) if holds else min(SHIM_DEFAULT_TIMEOUT_S, round(timeout_s * 0.8, 1))
    if shim_timeout != SHIM_DEFAULT_TIMEOUT_S:
        parts += ["--timeout", f"{shim_timeout:g}"]
    if fail_closed:
        parts.append("--fail-closed")
    return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class InstallPlan:
    """What to install: the gateway URL, the events, and how each handler looks."""

    url: str
    events: tuple[str, ...] = DEFAULT_EVENTS
    shim_everywhere: bool = False
    timeout_s: float = DEFAULT_TIMEOUT_S
    hook_command: str = "hookbus"
    fail_closed: bool = False
    #: ``hookbus.approvals`` is on: its events wait this long for a person, through the shim that
    #: fails closed (an http hook whose connection drops lets the tool run). None: approvals off.
    approval_timeout_s: float | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(hook_url(self.url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"--url must be an http(s) URL such as http://hookbus.internal:8787 (got {self.url!r})")
        object.__setattr__(self, "url", hook_url(self.url))
        unknown = [event for event in self.events if event not in CLAUDE_EVENTS]
        if unknown:
            raise ConfigError(f"not Claude Code events: {', '.join(unknown)}")
        if not self.timeout_s > 0:
            raise ConfigError("--timeout must be more than 0 seconds")

    def uses_shim(self, event: str) -> bool:
        """Whether ``event`` gets the command shim (no http support, or ``--shim``)."""
        return self.shim_everywhere or event in NO_HTTP_EVENTS

    def shim_command(self) -> str:
        """The shell command Claude Code runs for shim events."""
        return shim_command_line(self.hook_command, self.url, timeout_s=self.timeout_s, fail_closed=self.fail_closed)

    def handler(self, event: str) -> dict[str, Any]:
        """The handler object hookbus installs for ``event``."""
        timeout: float | int = int(self.timeout_s) if self.timeout_s == int(self.timeout_s) else self.timeout_s
        if self.approval_timeout_s is not None and event in APPROVAL_EVENTS:
            command = shim_command_line(
                self.hook_command, self.url, timeout_s=self.approval_timeout_s, fail_closed=True, holds=True
            )
            return {"type": "command", "command": command, "timeout": int(self.approval_timeout_s)}
        if self.uses_shim(event):
            return {"type": "command", "command": self.shim_command(), "timeout": timeout}
        return {
            "type": "http",
            "url": self.url,
            "headers": dict(AUTH_HEADERS),
            "allowedEnvVars": [TOKEN_ENV],
            "timeout": timeout,
        }


def _handler_url(handler: dict[str, Any]) -> str | None:
    """The gateway URL a hookbus handler talks to, or None when it is not hookbus's."""
    if handler.get("type") == "http":
        url = handler.get("url")
        if (
            isinstance(url, str)
            and url.split("?")[0].rstrip("/").endswith("/v1/hooks")
            and handler.get("headers") == AUTH_HEADERS
            and handler.get("allowedEnvVars") == [TOKEN_ENV]
        ):
            return url
        return None
    if handler.get("type") != "command" or not isinstance(handler.get("command"), str):
        return None
    try:
        argv = shlex.split(handler["command"])
    except ValueError:
        return None
    flags = shim_flags(argv)
    if flags is None:
        return None
    for index, flag in enumerate(flags):
        if flag == "--url" and index + 1 < len(flags):
            return flags[index + 1]
        if flag.startswith("--url="):
            return flag.partition("=")[2]
    return None


def is_hookbus_handler(handler: Any, url: str | None = None) -> bool:
    """Whether ``handler`` was installed by hookbus (for ``url``'s gateway when given)."""
    if not isinstance(handler, dict):
        return False
    found = _handler_url(handler)
    return found is not None and (url is None or hook_url(found) == hook_url(url))


def merge(settings: dict[str, Any], plan: InstallPlan | None, *, only_url: str | None = None) -> dict[str, Any]:
    """``settings`` with hookbus's handlers set to ``plan`` (removed everywhere when None).

    The input is not modified. Handlers already installed are replaced where they stand;
    missing ones are appended as a new matcher group with no matcher (= every value).
    """
    wanted = {event: plan.handler(event) for event in plan.events} if plan else {}
    return merge_handlers(settings, wanted, only_url=only_url)


def merge_handlers(
    settings: dict[str, Any],
    wanted: dict[str, dict[str, Any]],
    *,
    only_url: str | None = None,
    is_ours: Callable[[Any, str | None], bool] = is_hookbus_handler,
) -> dict[str, Any]:
    """``settings`` (Claude Code's ``hooks`` layout) with the handlers ``is_ours`` recognises set
    to ``wanted``, one per event (all removed when it is empty); a new dict, as :func:`merge`."""
    result = copy.deepcopy(settings)
    hooks = result.get("hooks")
    if hooks is None:
        if not wanted:
            return result
        hooks = result["hooks"] = {}
    if not isinstance(hooks, dict):
        raise ConfigError("the settings file's 'hooks' is not an object; fix it by hand first")
    placed: set[str] = set()
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups, removed_any = [], False
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(handlers, list):
                kept_groups.append(group)
                continue
            kept: list[Any] = []
            for handler in handlers:
                if not is_ours(handler, only_url):
                    kept.append(handler)
                elif event in wanted and event not in placed:
                    kept.append(wanted[event])
                    placed.add(event)
                else:
                    removed_any = True
            if kept or len(kept) == len(handlers):
                kept_groups.append({**group, "hooks": kept})
        if kept_groups or not removed_any:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    for event, handler in wanted.items():
        if event in placed:
            continue
        if not isinstance(hooks.setdefault(event, []), list):
            raise ConfigError(f"the settings file's hooks.{event} is not a list; fix it by hand first")
        hooks[event].append({"hooks": [handler]})
    if not hooks and settings.get("hooks") != {}:
        del result["hooks"]  # it held only hookbus's handlers (or was just created for none)
    return result


def render(settings: dict[str, Any]) -> str:
    """The settings as Claude Code's own files look: two-space JSON, trailing newline."""
    return json.dumps(settings, indent=2, ensure_ascii=False) + "\n"


def read_settings(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The file's text (None when absent) and its parsed object (``{}`` when absent or empty)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not text.strip():
        return text, {}
    try:
        settings = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON ({exc}); fix it by hand first") from exc
    if not isinstance(settings, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return text, settings


def event_names(chunks: Iterable[str] | None) -> list[str]:
    """The event names ``--events`` was given: each argument split at commas and spaces."""
    return [name for chunk in chunks or () for name in re.split(r"[,\s]+", chunk) if name]


def print_diff(path: Path, old_text: str | None, new_text: str | None) -> None:
    """Print what writing ``new_text`` over ``old_text`` at ``path`` changes, as a unified diff
    (``None``: the file does not exist, before or after); what ``--dry-run`` shows."""
    sys.stdout.writelines(
        difflib.unified_diff(
            (old_text or "").splitlines(keepends=True),
            (new_text or "").splitlines(keepends=True),
            fromfile=str(path) if old_text is not None else "/dev/null",
            tofile=str(path) if new_text is not None else "/dev/null",
        )
    )


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Put ``data`` at ``path`` with ``mode``: a fresh temporary file beside it (``O_EXCL``,
    ``O_NOFOLLOW``) renamed over it, so a symbolic link at ``path`` is replaced, never followed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _link_target(path: Path) -> Path | None:
    """The regular file a symbolic link at ``path`` leads to (None: no link, or a link to no file)."""
    if not path.is_symlink():
        return None
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # dangling, or a loop
        return None
    return real if real.is_file() else None


def write_backup(path: Path, data: str | bytes, mode: int | None = None) -> Path:
    """Keep ``data`` as ``<path>.bak`` the way settings are written (temporary file, rename).

    A ``.bak`` that is a symbolic link is replaced by a regular file, with a warning: it is
    never written through, or a planted link would have the installer copy a file it did
    not write (a repository's own settings) over any file the user can write. ``mode`` is
    ``path``'s by default.
    """
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except OSError:
            mode = 0o600
    bak = path.with_name(path.name + ".bak")
    if bak.is_symlink():
        print(f"hookbus: warning: {bak} was a symbolic link; replaced it with a regular file", file=sys.stderr)
    _write_new(bak, data.encode("utf-8") if isinstance(data, str) else data, mode)
    return bak


def write_atomically(path: Path, text: str, *, backup: bool, follow_link: bool = False) -> Path:
    """Replace ``path`` with ``text`` via a temporary file and a rename; keep ``<path>.bak``.

    A symbolic link at ``path`` is replaced by a regular file, unless ``follow_link`` (a
    settings file the caller has just read and parsed) and it leads to an existing regular
    file: that file is then written, in its own folder and with its ``.bak`` beside it, as
    a dotfiles setup expects. Returns the file written.
    """
    try:
        real = _link_target(path) if follow_link else None
        if real is not None:
            print(f"hookbus: note: {path} is a symbolic link; writing the file it leads to, {real}")
            path = real
        elif path.is_symlink():
            print(f"hookbus: warning: {path} was a symbolic link; replacing it with a regular file", file=sys.stderr)
        path.parent.mkdir(parents=True, exist_ok=True)
        old: bytes | None = None
        mode = 0o644
        if real is not None or not path.is_symlink():
            try:
                mode = path.stat().st_mode & 0o7777
                old = path.read_bytes()
            except FileNotFoundError:
                pass
        if backup and old is not None:
            write_backup(path, old, mode)
        _write_new(path, text.encode("utf-8"), mode)
    except PermissionError as exc:
        raise ConfigError(f"cannot write {path}: permission denied (managed settings need root)") from exc
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


def _wildcard(pattern: str, url: str) -> bool:
    return re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), url, re.IGNORECASE) is not None


def notes(settings: dict[str, Any], plan: InstallPlan) -> list[str]:
    """Settings in the same file that would stop the installed hooks from working."""
    found = []
    if settings.get("disableAllHooks") is True:
        found.append("this file sets disableAllHooks: true, so no hook runs")
    allowed_urls = settings.get("allowedHttpHookUrls")
    if isinstance(allowed_urls, list) and not any(isinstance(p, str) and _wildcard(p, plan.url) for p in allowed_urls):
        found.append(f"allowedHttpHookUrls does not admit {plan.url}; add it or the http hooks are blocked")
    allowed_env = settings.get("httpHookAllowedEnvVars")
    if isinstance(allowed_env, list) and TOKEN_ENV not in allowed_env:
        found.append(f"httpHookAllowedEnvVars does not list {TOKEN_ENV}; the bearer token would be sent empty")
    return found


def installed_url(settings: dict[str, Any]) -> str | None:
    """The gateway URL of the first hookbus handler in ``settings``, if any."""
    hooks = settings.get("hooks")
    for groups in hooks.values() if isinstance(hooks, dict) else ():
        for group in groups if isinstance(groups, list) else ():
            for handler in group.get("hooks") or () if isinstance(group, dict) else ():
                if isinstance(handler, dict) and (url := _handler_url(handler)) is not None:
                    return url
    return None


__all__ = [
    "DEFAULT_EVENTS",
    "OPT_IN_EVENTS",
    "SHIM_START",
    "InstallPlan",
    "default_hook_command",
    "event_names",
    "installed_url",
    "is_hookbus_handler",
    "merge",
    "merge_handlers",
    "notes",
    "print_diff",
    "read_settings",
    "render",
    "settings_path",
    "shim_command_line",
    "shim_flags",
    "write_atomically",
    "write_backup",
]
