"""``hookbus install codex``: Codex CLI's command hooks, pointed at the gateway.

Codex has command hooks only, so every event gets one handler running the shim, ``hookbus
hook --agent codex --url URL``, with Codex's ``timeout`` in whole seconds (SessionEnd at most
3: Codex cuts it there). The shim's own ``--timeout`` stays below it, so the shim answers
before Codex kills it. ``--fail-closed`` goes on PreToolUse, PermissionRequest and
UserPromptSubmit only, the events where Codex blocks on exit 2; elsewhere exit 2 is either a
failed hook or, on Stop and SubagentStop, a prompt to keep working, which an unreachable
gateway would repeat for ever. The token is never written: Codex runs hooks with its own
environment, so ``$HOOKBUS_TOKEN`` reaches the shim from there.

Files, by ``--scope``: ``project`` is ``.codex/hooks.json`` in the current folder, ``user`` is
``~/.codex/hooks.json`` (``$CODEX_HOME`` replaces ``~/.codex``, as in Codex), ``managed`` is
the ``[hooks]`` of Codex's admin-enforced ``/etc/codex/requirements.toml``, the one place
whose hooks run without the user's trust. ``--settings-file`` writes any ``hooks.json`` or,
for a ``.toml`` file (a requirements.toml or a config.toml), its ``[hooks]`` tables. JSON is
merged like Claude Code's settings (:mod:`hookbus.install.settings_file`: a handler is
hookbus's by its ``hookbus hook ... --url`` command); in TOML hookbus's tables are one block
between two marker comments, appended at the end and replaced in place. The ``.bak`` backup,
idempotence and ``--dry-run`` work as for Claude Code; ``--uninstall`` removes exactly
hookbus's handlers (its block), and restores the backup byte for byte when that is the file as
it was before the install.

Warnings name what would make the hooks silently not run: hooks.json and config.toml hooks
that are not trusted yet (``codex exec`` skips them unless given
``--dangerously-bypass-hook-trust``, and a changed command loses the trust), a project folder
Codex does not trust (it ignores the whole ``.codex/`` layer), ``[features] hooks = false``,
``allow_managed_hooks_only`` in requirements.toml, and fields Codex refuses in hooks.json.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import tomllib
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

#: Every hook event of Codex CLI 0.171.0 (Claude Code's names; Interrupt is Codex's own).
CODEX_EVENTS = (
    "SessionStart",
    "SubagentStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PreCompact",
    "PostCompact",
    "SubagentStop",
    "Stop",
    "SessionEnd",
    "Interrupt",
)
DEFAULT_EVENTS = CODEX_EVENTS[:-1]
#: Where ``--fail-closed`` applies: Codex blocks on exit 2 here.
FAIL_CLOSED_EVENTS = frozenset({"PreToolUse", "PermissionRequest", "UserPromptSubmit"})
SESSION_END_MAX_S = 3
REQUIREMENTS = "/etc/codex/requirements.toml"
BLOCK_BEGIN = "# >>> hookbus: written by `hookbus install codex`; `hookbus install codex --uninstall` removes it"
BLOCK_END = "# <<< hookbus"
_BLOCK = re.compile(rf"\n?{re.escape(BLOCK_BEGIN)}\n.*?^{re.escape(BLOCK_END)}\n?", re.DOTALL | re.MULTILINE)


def codex_home(env: dict[str, str] | None = None) -> Path:
    """Codex's home: ``$CODEX_HOME``, else ``~/.codex``."""
    env = dict(os.environ) if env is None else env
    return Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else Path.home() / ".codex"


def hooks_path(scope: str, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """The file ``hookbus install codex`` writes for ``scope``."""
    if scope == "project":
        return (cwd or Path.cwd()) / ".codex" / "hooks.json"
    if scope == "user":
        return codex_home(env) / "hooks.json"
    if scope == "managed":
        if sys.platform == "win32":
            raise ConfigError("no known Codex requirements.toml location on Windows; use --settings-file")
        return Path(REQUIREMENTS)
    raise ConfigError(f"unknown scope {scope!r} (project, user or managed)")


def codex_events(names: list[str] | None) -> tuple[str, ...]:
    """The events ``--events`` names (comma or space separated), or the default set."""
    named = tuple(dict.fromkeys(event_names(names)))
    unknown = [name for name in named if name not in CODEX_EVENTS]
    if unknown:
        raise ConfigError(f"not Codex hook events: {', '.join(unknown)} (Codex has {', '.join(CODEX_EVENTS)})")
    return named or DEFAULT_EVENTS


class CodexPlan(InstallPlan):
    """What to install for Codex: one shim command handler per event."""

    def __post_init__(self) -> None:
        InstallPlan(url=self.url, events=(), timeout_s=self.timeout_s)  # its URL and timeout checks
        object.__setattr__(self, "url", hook_url(self.url))

    def holds(self, event: str) -> bool:
        """Whether ``event`` waits for a person's answer (``--approvals``): fail-closed, long timeout."""
        return self.approval_timeout_s is not None and event in APPROVAL_EVENTS

    def timeout_for(self, event: str) -> int:
        """Codex's handler timeout for ``event``, in whole seconds."""
        held = self.approval_timeout_s if self.holds(event) else None
        whole = max(1, math.ceil(held if held is not None else self.timeout_s))
        return min(whole, SESSION_END_MAX_S) if event == "SessionEnd" else whole

    def command_for(self, event: str) -> str:
        """The shell command Codex runs for ``event``."""
        return shim_command_line(
            self.hook_command,
            self.url,
            agent="codex",
            timeout_s=self.timeout_for(event) if self.holds(event) else min(self.timeout_s, self.timeout_for(event)),
            fail_closed=self.holds(event) or (self.fail_closed and event in FAIL_CLOSED_EVENTS),
            holds=self.holds(event),
        )

    def handler(self, event: str) -> dict[str, Any]:
        return {"type": "command", "command": self.command_for(event), "timeout": self.timeout_for(event)}


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # JSON's escapes here are TOML's too (never a surrogate)


def toml_block(plan: CodexPlan) -> str:
    """hookbus's ``[hooks]`` tables for a TOML file, between the marker comments."""
    lines = [BLOCK_BEGIN]
    for event in plan.events:
        handler = plan.handler(event)
        lines += [f"[[hooks.{event}]]", f"[[hooks.{event}.hooks]]", 'type = "command"']
        lines += [f"command = {_toml_string(handler['command'])}", f"timeout = {handler['timeout']}"]
    return "\n".join([*lines, BLOCK_END]) + "\n"


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML ({exc}); fix it by hand first") from exc


def merge_toml(text: str, plan: CodexPlan | None, path: Path) -> str:
    """``text`` with hookbus's block replaced by ``plan``'s (removed when None), checked to parse."""
    _parse_toml(text, path)
    found = _BLOCK.search(text)
    before, after = (text[: found.start()], text[found.end() :]) if found else (text, "")
    if plan is None:
        return before + after
    if found:
        lead = "\n" if found.group().startswith("\n") else ""
    else:
        lead = ("\n" if before and not before.endswith("\n") else "") + ("\n" if before.strip() else "")
    new = before + lead + toml_block(plan) + after
    try:
        tomllib.loads(new)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"{path} defines its hooks in a form hookbus's [[hooks.EVENT]] tables cannot join ({exc}); "
            "write them as [[hooks.EVENT]] tables or use another file"
        ) from exc
    return new


def _toml_file(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}


def _hooks_off(config: dict[str, Any]) -> bool:
    features = config.get("features")
    return isinstance(features, dict) and (features.get("hooks") is False or features.get("codex_hooks") is False)


def _project_trusted(folder: Path, config: dict[str, Any]) -> bool:
    projects = config.get("projects")
    if not isinstance(projects, dict):
        return False
    for candidate in (folder, *folder.parents):
        entry = projects.get(str(candidate))
        if isinstance(entry, dict) and entry.get("trust_level") == "trusted":
            return True
    return False


def warnings(path: Path, scope: str, document: dict[str, Any], env: dict[str, str]) -> list[str]:
    """What would make the installed hooks silently not run."""
    found = []
    home_config_path = codex_home(env) / "config.toml"
    home_config = _toml_file(home_config_path)
    managed = scope == "managed" or path.name == "requirements.toml"
    requirements_path = path if managed else Path(REQUIREMENTS)
    requirements = document if managed else _toml_file(requirements_path)
    if not managed:
        found.append(
            f"Codex runs the hooks in {path} only once they are trusted (/hooks in codex); `codex exec` "
            "silently skips untrusted hooks unless given --dangerously-bypass-hook-trust, and a hook loses "
            "its trust when its command changes (--url, --timeout, --fail-closed); --scope managed needs no trust"
        )
    if not managed and requirements.get("allow_managed_hooks_only") is True:
        found.append(f"{requirements_path} sets allow_managed_hooks_only = true: Codex ignores these hooks")
    in_project = path.parent.name == ".codex" and path.parent.resolve() != codex_home(env).resolve()
    if in_project and not _project_trusted(path.parent.parent.resolve(), home_config):
        found.append(
            f"Codex ignores {path.parent}/ until the project is trusted: "
            f'[projects."{path.parent.parent.resolve()}"] trust_level = "trusted" in {home_config_path}'
        )
    sources = [(requirements_path, requirements), (home_config_path, home_config)]
    if in_project:
        sources.append((path.parent / "config.toml", _toml_file(path.parent / "config.toml")))
    if path.suffix == ".toml" and not managed:
        sources.append((path, document))
    found += [
        f"{where} sets [features] hooks = false: Codex runs no hooks" for where, cfg in sources if _hooks_off(cfg)
    ]
    if path.suffix == ".json" and (extra := sorted(set(document) - {"description", "hooks"})):
        found.append(f"{path} has fields Codex refuses ({', '.join(extra)}): Codex ignores the whole file")
    return found


def _read(path: Path, like: Path | None = None) -> tuple[str | None, dict[str, Any]]:
    """The text (None when absent) and document of ``path``, read as ``like``'s kind (TOML or JSON)."""
    if (like or path).suffix != ".toml":
        return read_settings(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return text, _parse_toml(text, path)


def _parse(path: Path, text: str) -> dict[str, Any]:
    if path.suffix == ".toml":
        return _parse_toml(text, path)
    document: dict[str, Any] = json.loads(text) if text.strip() else {}
    return document


def _updated(
    path: Path, old_text: str | None, document: dict[str, Any], plan: CodexPlan | None, url: str | None
) -> str:
    if path.suffix == ".toml":
        return merge_toml(old_text or "", plan, path)
    updated = merge(document, plan, only_url=url)
    if updated == document and old_text is not None:
        return old_text
    return render(updated)


def _restorable_backup(path: Path, new_text: str) -> str | None:
    """The ``.bak`` text when it holds what ``new_text`` holds (the file as it was before the install)."""
    try:
        text, before = _read(path.with_name(path.name + ".bak"), like=path)
    except ConfigError:
        return None
    return text if text is not None and before == _parse(path, new_text) else None


def run(args: Any) -> int:
    """``hookbus install codex``: returns the exit code (errors raise ConfigError)."""
    env = dict(os.environ)
    path = Path(args.settings_file) if args.settings_file else hooks_path(args.scope, env=env)
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    old_text, document = _read(path)
    if args.check:
        url = args.url or installed_url(document) or env.get("HOOKBUS_URL") or ""
        if args.url:
            InstallPlan(url=args.url)  # the same URL rules as an install
        return check(hook_url(url), after_install=False, hook_file=path)
    plan = None
    if not args.uninstall:
        plan = CodexPlan(
            url=args.url or "",
            events=codex_events(args.events),
            timeout_s=args.timeout,
            hook_command=args.hook_command or default_hook_command(),
            fail_closed=args.fail_closed,
            approval_timeout_s=getattr(args, "approvals", None),
        )
    new_text = _updated(path, old_text, document, plan, args.url if args.uninstall else None)
    if plan is None and new_text != old_text and (restored := _restorable_backup(path, new_text)) is not None:
        new_text = restored
    if new_text == (old_text or "") and (old_text is not None or plan is None):
        print(f"hookbus: {path} is already up to date; nothing to change")
        return check(plan.url, after_install=True, hook_file=path) if plan is not None and not args.no_check else 0
    if args.dry_run:
        print_diff(path, old_text, new_text)
        return 0
    write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
    backup = f" (previous version: {path}.bak)" if old_text is not None else ""
    if plan is None:
        print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        return 0
    print(f"hookbus: {path}: {len(plan.events)} command hooks -> {plan.url}{backup}")
    print(f"hookbus: Codex passes ${TOKEN_ENV} from its environment to the hooks: export it where codex runs")
    for warning in warnings(path, args.scope, _parse(path, new_text), env):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check else check(plan.url, after_install=True, hook_file=path)


__all__ = [
    "CODEX_EVENTS",
    "DEFAULT_EVENTS",
    "FAIL_CLOSED_EVENTS",
    "CodexPlan",
    "codex_events",
    "codex_home",
    "hooks_path",
    "merge_toml",
    "run",
    "toml_block",
    "warnings",
]
