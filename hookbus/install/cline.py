"""``hookbus install cline``: one hook script per Cline event, each running ``hookbus hook --agent cline``.

Cline has no hook configuration file: it runs every executable in its hooks folders whose
name is an event's (``PreToolUse``, ``TaskStart``, ...; with or without an extension such as
``.sh``), feeding it the event's JSON on stdin and reading its answer on stdout. So the
installer writes, per event, a file named exactly after it (no extension; ``#!/bin/sh``)::

    #!/bin/sh
    # Written by hookbus install cline (hookbus install cline --uninstall removes it).
    exec hookbus hook --agent cline --url URL --timeout S

Cline runs every file of an event, so the user's own hooks keep running next to hookbus's;
a user's file that already has the exact name is never overwritten (rename it, e.g. to
``PreToolUse.sh``). A file is hookbus's by its second line. Installing again rewrites
hookbus's files in place (the previous version kept as ``<file>.bak``, which Cline does not
run), a second identical run changes nothing, ``--dry-run`` prints a unified diff per file,
and ``--uninstall`` deletes exactly hookbus's files and their ``.bak`` copies (``--url``
narrows it to one gateway), nothing else. The token is never written: Cline runs hooks with
its own environment, so ``$HOOKBUS_TOKEN`` reaches the shim from there.

Folders, by ``--scope``: ``project`` is ``.cline/hooks`` in the current folder (Cline's
workspace), ``user`` is ``$CLINE_DIR/hooks`` (``~/.cline/hooks`` without it; ``cline --config
DIR`` reads ``DIR/hooks`` instead). Cline has no managed or system-wide hooks folder, so
``--scope managed`` is refused. ``--settings-file DIR`` writes into any folder, with a warning
when Cline does not read it (``cline --hooks-dir`` only sets a variable Cline 3.0.65 never
reads). Timeouts: Cline waits up to 120 s for a tool hook (not configurable), so ``--timeout``
(seconds, the shim's) must stay below that.

**Cline ignores exit codes**, so the shim's ``--fail-closed`` (exit 2, nothing on stdout)
would fail open. With ``--fail-closed`` the PreToolUse script prints ``{"cancel": true, ...}``
itself when the shim fails, which stops the task before the call runs (Cline cannot refuse
one call). Events: all nine Cline runs, unless ``--events`` names some (Cline's file names
or Claude Code's: SessionStart is TaskStart and TaskResume, Stop is TaskComplete, StopFailure
is TaskError, SessionEnd is SessionShutdown). Only PreToolUse and PostToolUse are awaited; the
others run detached (observe only) and the headless CLI sends no UserPromptSubmit: a warning
says so, as for a folder Cline does not read and a script that is not executable.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from bus.dialects.cline import HOOK_FILES
from bus.errors import ConfigError
from hookbus.install.command import check
from hookbus.install.settings_file import (
    TOKEN_ENV,
    InstallPlan,
    default_hook_command,
    event_names,
    print_diff,
    write_atomically,
)

MARKER = "# Written by hookbus install cline (hookbus install cline --uninstall removes it)."
#: Cline's hook files (its event names), in the order Cline's documentation lists them.
CLINE_HOOK_EVENTS = tuple(HOOK_FILES)
#: The events Cline waits for and reads the answer of; the others run detached.
AWAITED = ("PreToolUse", "PostToolUse")
#: Cline's limit for a tool hook, in seconds.
CLINE_TOOL_HOOK_TIMEOUT_S = 120.0
_FROM_CLAUDE = {
    "SessionStart": ("TaskStart", "TaskResume"),
    "Stop": ("TaskComplete",),
    "StopFailure": ("TaskError",),
    "SessionEnd": ("SessionShutdown",),
}
_FAIL_CLOSED = '{"cancel": true, "errorMessage": "hookbus: the gateway could not answer (failing closed)"}'


def cline_dir(env: dict[str, str] | None = None) -> Path:
    """Cline's own folder: ``$CLINE_DIR``, else ``~/.cline``."""
    env = dict(os.environ) if env is None else env
    return Path(env["CLINE_DIR"]) if env.get("CLINE_DIR", "").strip() else Path.home() / ".cline"


def hooks_folder(scope: str, *, cwd: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """The hooks folder Cline reads for ``scope`` (``project`` or ``user``)."""
    if scope == "project":
        return (cwd or Path.cwd()) / ".cline" / "hooks"
    if scope == "user":
        return cline_dir(env) / "hooks"
    if scope == "managed":
        raise ConfigError(
            "Cline has no managed or system-wide hooks folder; use --scope user, or --settings-file DIR/hooks "
            "with cline --config DIR"
        )
    raise ConfigError(f"unknown scope {scope!r} (project or user)")


def read_folders(cwd: Path, env: dict[str, str]) -> list[Path]:
    """Every folder Cline 3.0.65 reads hooks from, for a workspace ``cwd`` (``--config`` moves the second)."""
    home = Path(env.get("HOME") or Path.home())
    return [
        home / "Documents" / "Cline" / "Hooks",
        cline_dir(env) / "hooks",
        cwd / ".clinerules" / "hooks",
        cwd / ".cline" / "hooks",
    ]


def cline_events(names: list[str] | None) -> tuple[str, ...]:
    """The Cline hook files ``--events`` names (Cline's or Claude Code's names; default all)."""
    wanted = event_names(names)
    if "PreCompact" in wanted:
        raise ConfigError("Cline 3.0.65 finds a PreCompact hook file but never runs it; leave PreCompact out")
    events: list[str] = []
    unknown = []
    for name in wanted:
        found = _FROM_CLAUDE.get(name, (name,))
        if not all(event in CLINE_HOOK_EVENTS for event in found):
            unknown.append(name)
        events += found
    if unknown:
        raise ConfigError(f"not Cline hook events: {', '.join(unknown)} (known: {', '.join(CLINE_HOOK_EVENTS)})")
    return tuple(dict.fromkeys(events)) or CLINE_HOOK_EVENTS


def script(event: str, url: str, *, hook_command: str, timeout_s: float, fail_closed: bool) -> str:
    """The hook file hookbus writes for ``event``."""
    call = f"{hook_command} hook --agent cline --url {shlex.quote(url)} --timeout {timeout_s:g}"
    if fail_closed and event == "PreToolUse":
        line = f"{call} --fail-closed || printf '%s\\n' '{_FAIL_CLOSED}'"
    else:
        line = f"exec {call}"
    return f"#!/bin/sh\n{MARKER}\n{line}\n"


def is_hookbus_script(text: str | None) -> bool:
    return text is not None and text.split("\n")[1:2] == [MARKER]


def script_url(text: str) -> str | None:
    """The gateway URL a hookbus script posts to."""
    for line in text.splitlines()[2:]:
        try:
            argv = shlex.split(line)
        except ValueError:
            return None
        if "--url" in argv[:-1]:
            return argv[argv.index("--url") + 1]
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc


def warnings(folder: Path, events: tuple[str, ...], scope: str, written: list[Path]) -> list[str]:
    """What would make the installed hooks silently not run, or not decide."""
    env = dict(os.environ)
    found = []
    if scope == "" and folder.resolve() not in {p.resolve() for p in read_folders(Path.cwd(), env)}:
        found.append(
            f"Cline does not read hooks from {folder} (its --hooks-dir flag has no effect in 3.0.65); use a folder "
            f"it reads, or cline --config DIR with DIR/hooks"
        )
    if scope == "user" and env.get("CLINE_DIR"):
        found.append(f"CLINE_DIR is {env['CLINE_DIR']}: Cline reads these hooks only when run with the same CLINE_DIR")
    not_executable = [p.name for p in written if p.exists() and not os.access(p, os.X_OK)]
    if not_executable:
        found.append(f"not executable (Cline's documentation asks for executable hooks): {', '.join(not_executable)}")
    detached = [event for event in events if event not in AWAITED]
    if detached:
        found.append(
            f"Cline runs {', '.join(detached)} detached and ignores their answer (recorded only; no Stop block or "
            "start context), and the headless CLI sends no UserPromptSubmit"
        )
    return found


def _script_to_check(folder: Path) -> Path | None:
    """The first of hookbus's scripts in ``folder`` (what ``--check`` runs as Cline would)."""
    for event in CLINE_HOOK_EVENTS:
        if is_hookbus_script(_read(folder / event)):
            return folder / event
    return None


def run(args: Any) -> int:
    """``hookbus install cline``: the exit code (a user's error raises ConfigError)."""
    env = dict(os.environ)
    folder = Path(args.settings_file) if args.settings_file else hooks_folder(args.scope, env=env)
    if args.settings_file and not folder.is_dir() and not args.create and not args.dry_run and not args.check:
        raise ConfigError(f"{folder} does not exist (a typo?); pass --create to make it")
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} is not a folder: Cline's hooks folder holds one file per event")
    events = cline_events(args.events)
    current = {event: _read(folder / event) for event in CLINE_HOOK_EVENTS}
    if args.check:
        urls = [script_url(text) for text in current.values() if is_hookbus_script(text) and text]
        url = args.url or next((u for u in urls if u), None) or env.get("HOOKBUS_URL") or ""
        return check(InstallPlan(url=url).url, after_install=False, hook_file=_script_to_check(folder))
    wanted: dict[str, str | None] = {}
    plan: InstallPlan | None = None
    if args.uninstall:
        only = InstallPlan(url=args.url).url if args.url else None
        for event, text in current.items():
            if is_hookbus_script(text) and text and (only is None or script_url(text) == only):
                wanted[event] = None
    else:
        plan = InstallPlan(url=args.url or "", timeout_s=args.timeout)  # the URL and timeout rules
        if plan.timeout_s >= CLINE_TOOL_HOOK_TIMEOUT_S:
            limit = CLINE_TOOL_HOOK_TIMEOUT_S
            raise ConfigError(f"--timeout must be below {limit:g} s, Cline's limit for a tool hook")
        command = args.hook_command or default_hook_command()
        for event in events:
            text = current[event]
            if text is not None and not is_hookbus_script(text):
                raise ConfigError(
                    f"{folder / event} is not hookbus's; rename it (e.g. to {event}.sh: Cline runs every file "
                    "named for the event) and run again"
                )
            wanted[event] = script(
                event, plan.url, hook_command=command, timeout_s=plan.timeout_s, fail_closed=args.fail_closed
            )
    changes = {
        event: text
        for event, text in wanted.items()
        if text != current[event] or (text is not None and not os.access(folder / event, os.X_OK))
    }
    if not changes:
        print(f"hookbus: {folder} is already up to date; nothing to change")
        if plan is None:
            return 0
        for warning in warnings(folder, events, args.scope if not args.settings_file else "", []):
            print(f"hookbus: warning: {warning}", file=sys.stderr)
        return 0 if args.no_check else check(plan.url, after_install=True, hook_file=_script_to_check(folder))
    if args.dry_run:
        for event, text in changes.items():
            path = folder / event
            old = current[event]
            print_diff(path, old, text)
        return 0
    written: list[Path] = []
    for event, text in changes.items():
        path = folder / event
        if text is None:
            _remove(path)
            continue
        write_atomically(path, text, backup=current[event] is not None and current[event] != text)
        try:
            path.chmod(0o755)
        except OSError as exc:
            raise ConfigError(f"cannot make {path} executable: {exc.strerror or exc}") from exc
        written.append(path)
    if plan is None:
        print(f"hookbus: removed hookbus's hooks from {folder}: {', '.join(changes)}")
        return 0
    print(f"hookbus: {folder}: {len(written)} hook scripts ({', '.join(changes)}) -> {plan.url}")
    print(f"hookbus: Cline runs hooks with its own environment: export ${TOKEN_ENV} where cline runs")
    for warning in warnings(folder, events, args.scope if not args.settings_file else "", written):
        print(f"hookbus: warning: {warning}", file=sys.stderr)
    return 0 if args.no_check else check(plan.url, after_install=True, hook_file=_script_to_check(folder))


def _remove(path: Path) -> None:
    """Delete hookbus's script ``path`` and its ``.bak`` when that is hookbus's too."""
    try:
        path.unlink(missing_ok=True)
        bak = path.with_name(path.name + ".bak")
        if is_hookbus_script(_read(bak)):
            bak.unlink()
    except OSError as exc:
        raise ConfigError(f"cannot remove {path}: {exc.strerror or exc}") from exc


__all__ = [
    "AWAITED",
    "CLINE_HOOK_EVENTS",
    "MARKER",
    "cline_dir",
    "cline_events",
    "hooks_folder",
    "is_hookbus_script",
    "read_folders",
    "run",
    "script",
    "script_url",
    "warnings",
]
