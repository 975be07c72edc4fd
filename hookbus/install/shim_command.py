"""The command an installed hook runs to start the shim, and how hookbus knows its own.

Start-up is the whole cost of a command hook, so the installers write
``PYTHON -I -S /abs/path/hookbus/shim_start.py hook ...`` (:mod:`hookbus.shim_start`) rather
than the ``hookbus`` console script: no ``site`` (every ``.pth`` file of the environment), no
package ``__init__``, no ``PYTHON*`` variables. Both paths are absolute: an agent may run its
hooks with another ``PATH`` than the shell that installed them (an IDE, a service), and a
command it cannot find lets every tool run unchecked.
This module uses only the standard library.
"""

from __future__ import annotations

import os
import shlex
import sys

from bus.errors import ConfigError

#: The file the installed shim command runs (:mod:`hookbus.shim_start`).
SHIM_START = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shim_start.py")


def default_hook_command(executable: str | None = None) -> str:
    """How an agent should start the shim: ``PYTHON -I -S /abs/path/hookbus/shim_start.py``.

    ``PYTHON`` is the interpreter that runs now (``executable``), by absolute path, like the
    start file: never a bare ``hookbus``, since an agent may run hooks with another ``PATH`` than
    the shell that installed them, and a command it cannot find lets every tool run unchecked.
    ``-I -S`` skips ``site`` and the package's imports, the bulk of a hook's start-up. The paths
    are shell-quoted (the agent runs the command through a shell).
    """
    executable = sys.executable if executable is None else executable
    if not executable:
        raise ConfigError("cannot tell which Python runs hookbus (sys.executable is empty); give --hook-command")
    return f"{shlex.quote(os.path.abspath(executable))} -I -S {shlex.quote(SHIM_START)}"


def shim_flags(argv: list[str]) -> list[str] | None:
    """The flags after ``hook`` when ``argv`` runs hookbus's shim, else None."""
    if len(argv) >= 2 and os.path.basename(argv[0]) == "hookbus" and argv[1] == "hook":
        return argv[2:]
    if len(argv) >= 4 and argv[1:4] == ["-m", "hookbus", "hook"]:
        return argv[4:]
    if (
        len(argv) >= 5
        and argv[1:3] == ["-I", "-S"]
        and argv[3].endswith("/hookbus/shim_start.py")
        and argv[4] == "hook"
    ):
        return argv[5:]
    return None


__all__ = ["SHIM_START", "default_hook_command", "shim_flags"]
