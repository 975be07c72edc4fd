"""Shell input in the agents' own forms, as the one ``Bash`` command a rule judges.

Agents hand a shell more than a command string, and each form has to become the text bash
really runs, or none of it is judged:

* An argv list (Codex's ``{"command": ["bash", "-lc", "rm -rf /"]}``): a shell (``sh``,
  ``bash``, ``zsh``, ``dash``, ``ksh``, by any path) given ``-c`` runs its script, so the
  command is that script (:func:`argv_command`); any other argv is joined with shell quoting
  (:func:`shlex.join`), so the command reads as the program ran it.
* Keystrokes written to a running shell (Codex's ``write_stdin`` ``chars``, Copilot's
  ``write_bash`` ``input``): the lines a terminal hands the shell once each key has been
  applied (:func:`keystrokes_command`). Backspace, Ctrl-U, Ctrl-W and Ctrl-C edit or drop the
  line being typed, ``\\r`` and Copilot's ``{enter}`` end it; a key whose effect depends on the
  shell's history or completion (arrows, Tab, Escape, any other control key) cannot be judged.
* Several commands (Cline's ``run_commands``), each run on its own: joined by newlines only when
  each reads on its own and the joined text reads as exactly their commands, in order
  (:func:`joined_commands`). An entry that opens a here-document or a quote would otherwise swallow
  the entries after it; such a list cannot be judged.

What cannot be judged raises :class:`ValueError`: the gateway answers it as a deny
(``dialect_error``), never as an input some rule could allow.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Sequence
from typing import Any, Final

from bus.rules.bashsplit import parse_commands

#: Shells whose ``-c`` runs the next argument as a script.
SHELLS: Final = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash"})
#: Long options of those shells that take no value, and those that take one.
_LONG_FLAGS: Final = frozenset({"--login", "--noprofile", "--norc", "--posix", "--restricted", "--noediting"})
_LONG_VALUED: Final = frozenset({"--rcfile", "--init-file"})
_CLUSTER: Final = re.compile(r"[-+][A-Za-z]+")
#: Copilot's named keys in ``write_bash`` input.
_NAMED_KEYS: Final = re.compile(r"\{(enter|backspace|up|down|left|right)\}")
_KEYS: Final = {"enter": "\n", "backspace": "\x7f"}
_ERASE: Final = frozenset("\x7f\x08")
_LINE_KILL: Final = frozenset("\x15\x03")  # Ctrl-U clears the line; Ctrl-C abandons it
_WORD_ERASE: Final = "\x17"
_KEY_NAMES: Final = {"\t": "Tab (completion)", "\x1b": "Escape (arrows, history)"}


def shell_script(argv: Sequence[str]) -> str | None:
    """The script of ``argv`` when it is a shell run with ``-c`` (``bash -lc SCRIPT``), else None."""
    if not argv or posixpath.basename(argv[0]) not in SHELLS:
        return None
    runs_script, values, options = False, 0, True
    for arg in argv[1:]:
        if values:
            values -= 1
        elif options and arg in ("--", "-"):
            options = False
        elif not options:
            return arg if runs_script else None
        elif arg in _LONG_FLAGS:
            continue
        elif arg in _LONG_VALUED:
            values = 1
        elif _CLUSTER.fullmatch(arg):
            runs_script = runs_script or (arg[0] == "-" and "c" in arg)
            values = arg.count("o") + arg.count("O")  # -o NAME, +O NAME (also inside -eo)
        elif runs_script:
            return arg  # the first operand after -c; the rest are $0, $1, ...
        else:
            return None  # a script file or stdin: not a command given here
    return None


def argv_command(argv: Sequence[str]) -> str:
    """The command ``argv`` runs, as shell text (see the module docstring)."""
    script = shell_script(argv)
    return script if script is not None else shlex.join(argv)


def keystrokes_command(keys: str, named_keys: bool = False) -> str:
    """The lines a terminal hands the shell for ``keys`` typed (``named_keys``: Copilot's
    ``{enter}``-style names too). Raises ValueError for a key whose effect cannot be told."""
    if named_keys:
        keys = _NAMED_KEYS.sub(lambda m: _KEYS.get(m.group(1), "\x1b"), keys)
    lines: list[str] = []
    line: list[str] = []
    for char in keys:
        if char in ("\n", "\r"):
            lines.append("".join(line))
            line = []
        elif char in _ERASE:
            if line:
                line.pop()
        elif char in _LINE_KILL:
            line = []
        elif char == _WORD_ERASE:
            while line and line[-1] in " \t":
                line.pop()
            while line and line[-1] not in " \t":
                line.pop()
        elif char == "\x04" and not line:
            continue  # end of input on an empty line: nothing typed
        elif char < " ":
            name = _KEY_NAMES.get(char, f"control key {char!r}")
            raise ValueError(f"keystrokes with {name} cannot be judged: the shell decides what it types")
        else:
            line.append(char)
    return "\n".join([*lines, "".join(line)]) if line else "\n".join(lines)


def keystrokes_input(tool_input: object, field: str, named_keys: bool = False) -> dict[str, Any]:
    """A keystroke tool's input with ``command``: the lines its ``field`` types ("" without one)."""
    given: dict[str, Any] = dict(tool_input) if isinstance(tool_input, dict) else {}
    keys = given.get(field)
    given["command"] = keystrokes_command(keys, named_keys) if isinstance(keys, str) else ""
    return given


def joined_commands(commands: Sequence[str]) -> str:
    """Commands run each on its own, as one text whose reading is theirs (see the module docstring).

    Raises ValueError when an entry cannot be read on its own, or when joining them would read
    otherwise (an entry would swallow or change the next)."""
    if len(commands) <= 1:
        return commands[0] if commands else ""
    texts: list[str] = []
    for number, command in enumerate(commands, 1):
        read = parse_commands(command)
        if read is None:
            raise ValueError(f"command {number} of {len(commands)} cannot be read on its own")
        texts += (found.text for found in read)
    joined = "\n".join(commands)
    read = parse_commands(joined)
    if read is None or [found.text for found in read] != texts:
        raise ValueError("the commands read otherwise once joined: one would hide or change the next")
    return joined


__all__ = ["SHELLS", "argv_command", "joined_commands", "keystrokes_command", "keystrokes_input", "shell_script"]
