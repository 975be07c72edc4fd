"""A ``hooks.json`` whose ``hooks`` maps each event to a flat list of command entries.

Cursor's, Windsurf's and Kiro's agent-config hooks all look like this (no matcher groups as
in Claude Code's settings): ``{"hooks": {"<event>": [{"command": "...", ...}, ...]}}``. An
:class:`HooksFile` describes one agent's file (where it lives, its events, how an entry
looks, what would keep the hooks from running), and :func:`run_install` is ``hookbus install
AGENT`` for it, with the same guarantees as the other installers: everything else in the
file is kept; an entry is hookbus's by its ``hookbus hook ... --url`` command
(:func:`hookbus.install.settings_file.is_hookbus_handler`), so installing again replaces
hookbus's entries where they stand and changes nothing the second time; ``--uninstall``
removes exactly them (and the event lists they alone made), and the file itself when it
then holds nothing but what hookbus added (such as Cursor's ``version``); ``--dry-run``
prints a unified diff; the previous file is kept as ``.bak``. The token is never written: the agent runs the
shim with its own environment, so ``$HOOKBUS_TOKEN`` reaches it from there.
"""

from __future__ import annotations

import copy
import shlex
import sys
from pathlib import Path
from typing import Any

from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.settings_file import (
    SHIM_DEFAULT_TIMEOUT_S,
    TOKEN_ENV,
    InstallPlan,
    default_hook_command,
    event_names,
    is_hookbus_handler,
    print_diff,
    read_settings,
    render,
    write_atomically,
    write_backup,
)

_ABSENT = object()


def is_hookbus_command(command: Any, url: str | None = None) -> bool:
    """Whether ``command`` runs hookbus's shim (for ``url``'s gateway when given)."""
    return isinstance(command, str) and is_hookbus_handler({"type": "command", "command": command}, url)


def shim_command(
    hook_command: str, agent: str, url: str, timeout_s: float | None, fail_closed: bool, *, holds: bool = False
) -> str:
    """``hookbus hook --agent AGENT --url URL`` (+ a ``--timeout`` below the agent's, ``--fail-closed``).

    ``holds``: the shim waits for a person's answer (``--approvals``), up to 0.8 of ``timeout_s``.
    """
    parts = [hook_command, "hook", "--agent", agent, "--url", shlex.quote(url)]
    if timeout_s is not None:
        shim_timeout = round(timeout_s * 0.8, 1)
        if not holds:
            shim_timeout = min(SHIM_DEFAULT_TIMEOUT_S, shim_timeout)
        if shim_timeout != SHIM_DEFAULT_TIMEOUT_S:
            parts += ["--timeout", f"{shim_timeout:g}"]
    if fail_closed:
        parts.append("--fail-closed")
    return " ".join(parts)


class HooksFile:
    """One agent's flat ``hooks.json``. Subclasses set the class attributes and :meth:`entry`."""

    agent = ""
    title = ""
    #: Every event the agent's file takes, and those installed unless ``--events`` names others.
    events: tuple[str, ...] = ()
    default_events: tuple[str, ...] = ()
    #: Claude Code's event name -> the agent's events it stands for (for ``--events``).
    from_claude: dict[str, tuple[str, ...]] = {}
    #: The events on which ``--fail-closed`` applies (where the agent blocks on exit 2).
    blocking_events: frozenset[str] = frozenset()
    #: The events whose ask can wait for a person (``--approvals``: fail-closed, a long timeout).
    approval_events: frozenset[str] = frozenset()
    #: Top-level fields the file must have (set when missing, never removed).
    required: dict[str, Any] = {}
    #: The entry list's key in the file.
    key = "hooks"

    def path(self, scope: str) -> Path:
        """The file the agent reads for ``scope`` (``project``, ``user`` or ``managed``)."""
        raise NotImplementedError

    def entry(self, event: str, command: str, timeout_s: float, fail_closed: bool) -> dict[str, Any]:
        """hookbus's entry for ``event`` (``fail_closed``: the command fails closed there)."""
        raise NotImplementedError

    def shim_timeout_s(self, timeout_s: float) -> float | None:
        """The timeout the agent gives a hook (None when the file has no timeout field)."""
        return timeout_s

    def warnings(self, config: dict[str, Any], scope: str, path: Path) -> list[str]:
        """What in the file or around it would keep the installed hooks from running."""
        return []

    def choose_events(self, names: list[str] | None) -> tuple[str, ...]:
        """The events ``--events`` names (the agent's or Claude Code's names; default :attr:`default_events`)."""
        wanted = event_names(names)
        chosen: list[str] = []
        unknown = []
        for name in wanted:
            if name in self.events:
                chosen.append(name)
            elif name in self.from_claude:
                chosen.extend(self.from_claude[name])
            else:
                unknown.append(name)
        if unknown:
            raise ConfigError(f"not {self.title} hook events: {', '.join(unknown)} (known: {', '.join(self.events)})")
        return tuple(dict.fromkeys(chosen)) or self.default_events

    def merge(
        self, config: dict[str, Any], wanted: dict[str, dict[str, Any]] | None, only_url: str | None
    ) -> dict[str, Any]:
        """``config`` with hookbus's entries set to ``wanted`` (removed everywhere when None); a new dict."""
        result = copy.deepcopy(config)
        hooks = result.get(self.key)
        if hooks is None:
            if not wanted:
                return result
            hooks = result[self.key] = {}
        if not isinstance(hooks, dict):
            raise ConfigError(f"the file's {self.key!r} is not an object; fix it by hand first")
        wanted = wanted or {}
        placed: set[str] = set()
        for event in list(hooks):
            entries = hooks[event]
            if not isinstance(entries, list):
                continue
            kept: list[Any] = []
            for item in entries:
                if not (isinstance(item, dict) and is_hookbus_command(item.get("command"), only_url)):
                    kept.append(item)
                elif event in wanted and event not in placed:
                    kept.append(wanted[event])
                    placed.add(event)
            if kept or not entries:
                hooks[event] = kept
            else:
                del hooks[event]
        for event, item in wanted.items():
            if event in placed:
                continue
            if not isinstance(hooks.setdefault(event, []), list):
                raise ConfigError(f"the file's {self.key}.{event} is not a list; fix it by hand first")
            hooks[event].append(item)
        if wanted:
            result = {**{k: v for k, v in self.required_fields(config).items() if k not in result}, **result}
        elif not hooks and config.get(self.key) != {}:
            del result[self.key]
        return result

    def required_fields(self, config: dict[str, Any]) -> dict[str, Any]:
        """The top-level fields ``config`` must have once it holds hookbus's hooks."""
        return self.required

    def is_empty(self, config: dict[str, Any]) -> bool:
        """Whether ``config`` holds nothing but the fields hookbus adds (an uninstall then removes the file)."""
        return all(self.required.get(key, _ABSENT) == value for key, value in config.items())

    def installed_url(self, config: dict[str, Any]) -> str | None:
        """The gateway URL of the first hookbus entry in ``config``, if any."""
        hooks = config.get(self.key)
        for entries in hooks.values() if isinstance(hooks, dict) else ():
            for item in entries if isinstance(entries, list) else ():
                command = item.get("command") if isinstance(item, dict) else None
                if is_hookbus_command(command):
                    argv = shlex.split(command)
                    return argv[argv.index("--url") + 1] if "--url" in argv else None
        return None


def run_install(spec: HooksFile, args: Any) -> int:
    """``hookbus install AGENT`` for ``spec``'s file: the exit code (a user's error raises ConfigError)."""
    path = Path(args.settings_file) if args.settings_file else spec.path(args.scope)
    scope = "" if args.settings_file else args.scope
    if args.settings_file and not path.parent.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{path.parent} does not exist (a typo?); pass --create to make it")
    old_text, config = read_settings(path)
    if args.check:
        url = args.url or spec.installed_url(config) or ""
        return check(InstallPlan(url=url).url, after_install=False, hook_file=path)
    plan: InstallPlan | None = None
    if args.uninstall:
        updated = spec.merge(config, None, args.url and InstallPlan(url=args.url).url)
    else:
        plan = InstallPlan(url=args.url or "", timeout_s=args.timeout, fail_closed=args.fail_closed)
        events = spec.choose_events(args.events)
        hook_command = args.hook_command or default_hook_command()
        approval_timeout_s = getattr(args, "approvals", None)
        if approval_timeout_s is not None and (not spec.approval_events or spec.shim_timeout_s(1.0) is None):
            raise ConfigError(
                f"--approvals: {spec.title} gives its hooks no timeout to set, so none can wait for a person; "
                "its asks are answered through the retry (see docs/agents.md)"
            )
        wanted = {}
        for event in events:
            if approval_timeout_s is not None and event in spec.approval_events:
                command = shim_command(hook_command, spec.agent, plan.url, approval_timeout_s, True, holds=True)
                wanted[event] = spec.entry(event, command, approval_timeout_s, True)
                continue
            closed = plan.fail_closed and event in spec.blocking_events
            command = shim_command(hook_command, spec.agent, plan.url, spec.shim_timeout_s(plan.timeout_s), closed)
            wanted[event] = spec.entry(event, command, plan.timeout_s, closed)
        updated = spec.merge(config, wanted, None)
    if updated == config and (old_text is not None or args.uninstall):
        print(f"hookbus: {path} is already up to date; nothing to change")
        if plan is None:
            return 0
        for warning in spec.warnings(updated, scope, path):
            print(f"hookbus: warning: {warning}", file=sys.stderr)
        return 0 if args.no_check else check(plan.url, after_install=True, hook_file=path)
    remove = plan is None and spec.is_empty(updated)
    new_text = "" if remove else render(updated)
    if args.dry_run:
        print_diff(path, old_text, None if remove else new_text)
        return 0
    if remove:  # it held only hookbus's hooks: it goes, its last version kept as .bak
        write_backup(path, old_text or "")
        path.unlink()
        print(f"hookbus: removed {path}, which held only hookbus's hooks (previous version: {path}.bak)")
        return 0
    write_atomically(path, new_text, backup=old_text is not None, follow_link=True)
    backup = f" (previous version: {path}.bak)" if old_text is not None else ""
    if plan is None:
        print(f"hookbus: removed hookbus's hooks from {path}{backup}")
        return 0
    print(f"hookbus: {path}: {len(wanted)} command hooks ({', '.join(wanted)}) -> {plan.url}{backup}")
    print(f"hookbus: {spec.title} runs hooks with its own environment: export ${TOKEN_ENV} where it runs")
    for warning in spec.warnings(updated, scope, path):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check else check(plan.url, after_install=True, hook_file=path)


__all__ = ["HooksFile", "is_hookbus_command", "run_install", "shim_command"]
