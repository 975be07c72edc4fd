"""Filling hook placeholders from the hook input without ever pasting a value into a shell.

``${CLAUDE_PROJECT_DIR}`` and input paths such as ``${tool_input.file_path}``
or the agent-loop style ``${args.path}`` are filled from the hook input. A placeholder is an *input
path* when its first dotted segment is a top-level key of the input, or one of the aliases
``args`` (``tool_input``) and ``tool`` (``tool_name``); every other ``${VAR}`` or ``$VAR`` is
the shell's own and is left alone. Missing paths give ``""``, objects and lists compact JSON.
Exec form substitutes verbatim into each ``args`` element (only ``${CLAUDE_PROJECT_DIR}`` in
``command``, so an event can never choose the program). Shell form never pastes a value into
the script: each value is exported as ``HOOKBUS_V<n>`` and the placeholder becomes a quoted
reference to it (``"${HOOKBUS_V0}"`` outside quotes, ``${HOOKBUS_V0}`` inside ``"..."``,
``'"${HOOKBUS_V0}"'`` inside ``'...'``). Expansion output is never parsed again, so no value
can inject shell whatever the template's quoting (pasting ``shlex.quote``-d text into ``"${x}"``
would still run ``$(...)``). Placeholders in comments stay literal; in heredoc bodies the value
keeps its double quotes. PowerShell gets ``${env:HOOKBUS_V0}`` (not expanded in ``'...'``).

The scanner here walks the template the way ``sh`` tokenises it (quotes, comments, heredocs),
next to :mod:`bus.rules.bashsplit`, which splits commands for permission rules.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from bus.policy.schema import CommandHandler

#: Agent-loop placeholder aliases (``${args.x}``, ``${tool}``) for Claude Code's input fields.
ALIASES: Mapping[str, str] = {"args": "tool_input", "tool": "tool_name"}
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_-]+)*)\}")
_WORD_BREAK = frozenset(" \t\n;&|()<>")
_MISSING = object()


def _is_input_path(first: str, hook_input: Mapping[str, Any]) -> bool:
    return first in hook_input or first in ALIASES


def lookup(path: str, hook_input: Mapping[str, Any]) -> str:
    """The text a placeholder path (``tool_input.file_path``, ``args.path``) stands for.

    A NUL cannot pass through argv or the environment, and a hook that fails to start is a
    non-blocking error: an agent could switch a guard off by adding one. So NUL is spelled
    ``\\0`` (the rest of the value stays as it was, and the guard still sees it).
    """
    return _lookup(path, hook_input).replace("\x00", "\\0")


def _lookup(path: str, hook_input: Mapping[str, Any]) -> str:
    first, *rest = path.split(".")
    value: Any = hook_input.get(first, _MISSING)
    if value is _MISSING and first in ALIASES:
        value = hook_input.get(ALIASES[first], _MISSING)
    for segment in rest:
        if isinstance(value, Mapping):
            value = value.get(segment, _MISSING)
        elif isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        else:
            value = _MISSING
    if value is _MISSING or value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def project_dir(hook_input: Mapping[str, Any]) -> str:
    """``CLAUDE_PROJECT_DIR`` for an event: its ``cwd`` (the agent's path), or ``""``."""
    cwd = hook_input.get("cwd")
    return cwd.replace("\x00", "\\0") if isinstance(cwd, str) else ""


def render_exec(command: str, args: Sequence[str], hook_input: Mapping[str, Any]) -> list[str]:
    """Exec-form argv: placeholders verbatim in ``args``; only ``${CLAUDE_PROJECT_DIR}`` in ``command``."""
    pdir = project_dir(hook_input)

    def sub(match: re.Match[str], *, inputs: bool) -> str:
        first, path = match.group(1), match.group(1) + match.group(2)
        if path == "CLAUDE_PROJECT_DIR":
            return pdir
        if inputs and _is_input_path(first, hook_input):
            return lookup(path, hook_input)
        return match.group(0)

    program = _PLACEHOLDER.sub(lambda m: sub(m, inputs=False), command)
    return [program, *(_PLACEHOLDER.sub(lambda m: sub(m, inputs=True), arg) for arg in args)]


def render_shell(
    command: str, hook_input: Mapping[str, Any], *, powershell: bool = False
) -> tuple[str, dict[str, str]]:
    """Shell-form script and the ``HOOKBUS_V<n>`` variables its placeholders refer to.

    Values never enter the script text (see the module docstring). The returned script
    refers to ``CLAUDE_PROJECT_DIR`` by name; :func:`hook_env` exports it.
    """
    variables: dict[str, str] = {}
    names: dict[str, str] = {}

    def var_for(path: str) -> str:
        if path == "CLAUDE_PROJECT_DIR":
            return path
        if path not in names:
            names[path] = f"HOOKBUS_V{len(names)}"
            variables[names[path]] = lookup(path, hook_input)
        return names[path]

    def wanted(match: re.Match[str]) -> bool:
        path = match.group(1) + match.group(2)
        return path == "CLAUDE_PROJECT_DIR" or _is_input_path(match.group(1), hook_input)

    if powershell:
        script = _PLACEHOLDER.sub(
            lambda m: f"${{env:{var_for(m.group(1) + m.group(2))}}}" if wanted(m) else m.group(0), command
        )
        return script, variables

    out: list[str] = []
    stack = ["plain"]  # plain | sq | dq | cmd ($(...)) | paren | bq (`...`) | param (${...})
    i, n = 0, len(command)
    while i < n:
        ctx, ch = stack[-1], command[i]
        match = _PLACEHOLDER.match(command, i) if ch == "$" else None
        if match is not None and wanted(match):
            ref = "${" + var_for(match.group(1) + match.group(2)) + "}"
            quoting = next(c for c in reversed(stack) if c != "param")
            out.append({"sq": f"'\"{ref}\"'", "dq": ref}.get(quoting, f'"{ref}"'))
            i = match.end()
            continue
        step = 1
        if ctx == "sq":
            if ch == "'":
                stack.pop()
        elif ch == "\\":
            step = 2
        elif ch == "$" and command.startswith("$(", i):
            stack.append("cmd")
            step = 2
        elif ch == "$" and command.startswith("${", i):
            stack.append("param")
            step = 2
        elif ctx == "dq":
            if ch == '"':
                stack.pop()
            elif ch == "`":
                stack.append("bq")
        elif ch == "}" and ctx == "param":
            stack.pop()
        elif ch == "'":
            stack.append("sq")
        elif ch == '"':
            stack.append("dq")
        elif ch == "`" and ctx == "bq":
            stack.pop()
        elif ch == "`":
            stack.append("bq")
        elif ch == "(":
            stack.append("paren")
        elif ch == ")" and ctx in ("cmd", "paren"):
            stack.pop()
        elif ch == "#" and (i == 0 or command[i - 1] in _WORD_BREAK):
            end = command.find("\n", i)
            step = (n if end < 0 else end) - i  # a comment: copied as is, placeholders and all
        out.append(command[i : i + step])
        i += step
    return "".join(out), variables


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "pwsh", "powershell"})


def reparse_warning(handler: CommandHandler) -> str | None:
    """Why an exec-form hook hands event data back to a shell parser (injection), or None.

    Exec form substitutes placeholders verbatim into argv; that is safe unless the argument
    is itself parsed as shell code again: ``sh -c '...${tool_input.command}...'`` or ``eval``.
    """
    if handler.args is None:
        return None
    program = handler.command.rsplit("/", 1)[-1]
    args = handler.args
    for i, arg in enumerate(args):
        if "${" not in arg:
            continue
        if program in _SHELLS and "-c" in args[:i] and args.index("-c") == i - 1:
            return (
                f"warning: {program} -c runs its argument as shell code, so the placeholder in it lets an "
                "event inject commands: use shell form (values are passed as variables) or pass the value as "
                "a positional argument after the script"
            )
        if "eval" in args[:i] or program == "eval":
            return "warning: eval runs a placeholder's value as shell code, so an event can inject commands"
    return None


def literal_program(handler: CommandHandler) -> str | None:
    """The absolute path of the program a command hook starts, when it names one literally."""
    if handler.args is not None:
        words = [handler.command]
    else:
        try:
            words = shlex.split(handler.command)
        except ValueError:
            return None
        while words and "=" in words[0] and not words[0].startswith(("=", "/")):  # VAR=value prefixes
            words.pop(0)
    if words and words[0].startswith("/") and "$" not in words[0]:
        return words[0]
    return None


__all__ = ["ALIASES", "literal_program", "lookup", "project_dir", "render_exec", "render_shell", "reparse_warning"]
