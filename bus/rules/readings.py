"""A subcommand's *readings*: every command it runs, as bash and the programs it starts read it.

Claude Code matches a rule against a subcommand as written. Bash runs more than that text shows:
``sudo -u root rm -rf /`` runs ``rm``, ``sh -c 'rm -rf /'`` runs the script it is given. The first
reading of a subcommand is itself; from each reading follow, in turn:

* the program a path names read as its name: ``/bin/rm`` and ``./rm`` are ``rm``;
* the command a wrapper runs: ``env``, ``sudo``, ``doas``, ``busybox``, ``exec``, ``nice``,
  ``ionice``, ``setsid``, ``flock``, ``chroot``, ``timeout``, ``nohup``, ``stdbuf``, ``unbuffer``,
  ``caffeinate``, ``systemd-run``, ``strace``, ``taskset`` ... with their options;
* ``git`` without its global options: ``git -C repo -c k=v reset --hard`` is ``git reset --hard``;
* the script a shell runs, parsed and read in turn: ``sh -c``, ``bash -lc``, ``su -c``,
  ``script -c``, ``flock -c``, ``runuser -c``, ``watch``, ``ssh HOST CMD``, and a here-document
  or here-string fed to a shell (``sh <<EOF``, ``bash <<< "..."``); ``env -S`` splits its string;
* the command ``xargs`` and ``parallel`` run, ending in :data:`STDIN_ARGS` for the arguments
  they read at run time (with ``xargs -I R`` they stand where ``R`` does, an expansion;
  ``parallel``'s ``:::`` arguments go in its ``{}`` or after it), and ``find -exec``/
  ``-execdir``/``-ok`` run with ``{}`` read as each of find's start paths; ``find -delete``
  reads as ``rm -rf`` of those paths;
* what an interpreter one-liner or a script fed to an interpreter does to files and which
  commands it runs (:mod:`bus.rules.codereadings`).

Each step is in :mod:`bus.rules.launchers`; a reading is then matched in several spellings
(:mod:`bus.rules.spellings`: ``rm -r -f`` as ``rm -rf``).

The work is bounded: at most :data:`MAX_READINGS` readings per subcommand and scripts read
:data:`MAX_SCRIPT_DEPTH` deep; past either, or when a script cannot be parsed or is itself an
expansion, the reading is :data:`UNREADABLE` (a program known only at run time: every deny and
ask rule meets it, no allow rule does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bus.rules.bashsplit import SimpleCommand, Word, parse_commands
from bus.rules.codereadings import CodeReading
from bus.rules.heredocs import fed_texts
from bus.rules.launchers import STDIN_ARGS, derive
from bus.rules.spellings import as_meant

#: The most readings one subcommand has before it cannot be judged.
MAX_READINGS: Final = 256
#: How many scripts deep (``sh -c "bash -c '...'"``) readings are followed.
MAX_SCRIPT_DEPTH: Final = 3
#: Characters of scripts (``sh -c``, here-documents, at any depth) parsed for one command: past
#: them a script cannot be read (:class:`ScriptBudget`).
SCRIPT_CHARS: Final = 32 * 1024
#: What a command runs when that cannot be told: its program is known only at run time.
UNREADABLE: Final = SimpleCommand((Word("<unreadable>", "<unreadable>", True),))


@dataclass(frozen=True, slots=True)
class Readings:
    """What a subcommand runs: itself first, then every command read from it."""

    commands: tuple[SimpleCommand, ...]
    #: It runs interpreter code that could not be read (``exec(...)``, decoded strings...).
    opaque: bool = False
    #: A script was left unread for want of :class:`ScriptBudget` (so this holds for this
    #: command only: not to be kept for another).
    limited: bool = False


@dataclass(slots=True)
class ScriptBudget:
    """How many characters of scripts (``sh -c``, here-documents) are still to be parsed for the
    command being judged: reading a command's scripts costs at most a split of this many
    characters, however they are nested."""

    chars: int = SCRIPT_CHARS


def read_command(cmd: SimpleCommand, stdin: str | None = None, budget: ScriptBudget | None = None) -> Readings:
    """The readings of ``cmd``; ``stdin`` is what a here-document or here-string feeds it
    (:func:`bus.rules.heredocs.fed_texts`; without it a shell reading its input runs what
    cannot be read); its scripts are parsed within ``budget`` (past it they cannot be read)."""
    budget = ScriptBudget() if budget is None else budget
    cmd = _as_meant(cmd)
    found: list[SimpleCommand] = [cmd]
    seen = {cmd.words}
    queue: list[tuple[SimpleCommand, int, str | None]] = [(cmd, 0, stdin)]
    opaque = False
    #: The readings' text stays within a multiple of the command's (``sudo sudo sudo ... rm``).
    chars_left = 4 * (len(cmd.text) + len(stdin or "")) + 256
    for reading, depth, fed in queue:  # grows while it is read: breadth first
        for derived in derive(reading.words, fed):
            more: list[tuple[SimpleCommand, int, str | None]]
            if isinstance(derived, CodeReading):
                opaque |= derived.opaque
                more = [(SimpleCommand(words), depth, None) for words in derived.commands]
                more += _scripts(derived.scripts, depth, budget)
            elif derived is None or isinstance(derived, str):
                more = _scripts((derived,), depth, budget)
            else:
                more = [(SimpleCommand(derived), depth, fed)]
            for command, at, text in more:
                item = (_as_meant(command), at, text)
                if item[0].words in seen:
                    continue
                chars_left -= sum(len(word.raw) + 1 for word in item[0].words)
                if len(found) >= MAX_READINGS or chars_left < 0:
                    return Readings((*found, UNREADABLE), opaque, budget.chars < 0)
                seen.add(item[0].words)
                found.append(item[0])
                queue.append(item)
    return Readings(tuple(found), opaque, budget.chars < 0)


def _as_meant(cmd: SimpleCommand) -> SimpleCommand:
    """``cmd`` as it runs when its words say more (:func:`bus.rules.spellings.as_meant`)."""
    meant = as_meant(cmd.words)
    return cmd if meant is None else SimpleCommand(meant, cmd.assigned)


def _scripts(
    scripts: tuple[str | None, ...], depth: int, budget: ScriptBudget
) -> list[tuple[SimpleCommand, int, str | None]]:
    """The commands of each script a shell runs (``None``: one known only at run time)."""
    found: list[tuple[SimpleCommand, int, str | None]] = []
    for script in scripts:
        commands = None
        if script is not None and depth < MAX_SCRIPT_DEPTH:
            if len(script) > budget.chars:
                budget.chars = -1  # past the budget: unread, and the answer is this command's only
            else:
                budget.chars -= len(script)
                commands = parse_commands(script)
        if commands is None:
            found.append((UNREADABLE, depth + 1, None))
            continue
        fed = fed_texts(script, commands)  # type: ignore[arg-type]
        found.extend((command, depth + 1, text) for command, text in zip(commands, fed, strict=True))
    return found


__all__ = [
    "MAX_READINGS",
    "MAX_SCRIPT_DEPTH",
    "SCRIPT_CHARS",
    "STDIN_ARGS",
    "UNREADABLE",
    "Readings",
    "ScriptBudget",
    "read_command",
]
