"""Hostile hook inputs: every construct the shell splitter, the rules and the redaction detectors
read, at any size, and JSON nested around every depth limit.

Used by the tests (decisions, outcomes, records) and by ``bench/hostile.py`` (timings).
Every command ends with ``rm -rf /`` where a shell would run it (after the wrappers, or on a
line of its own), so every one must be denied: by the rule, or because it cannot be judged.
"""

from __future__ import annotations

from typing import Any, Final

#: Units of shell grammar, each repeated to the size wanted, then ``rm -rf /``.
COMMAND_UNITS: Final = {
    "wrappers: nice": "nice ",
    "wrappers: timeout 30": "timeout 30 ",
    "wrappers: nohup": "nohup ",
    "wrappers: stdbuf": "stdbuf -o0 ",
    "wrappers: time": "time -p ",
    "wrappers: command": "command ",
    "pipeline": "a | ",
    "pipeline |&": "a |& ",
    "and chain": "a && ",
    "or chain": "a || ",
    "semicolons": "a; ",
    "background": "a & ",
    "newlines": "a\n",
    "backticks": "`a` ",
    "$()": "$(a) ",
    "nested $()": "$(echo $(a)) ",
    "subshells": "(a) ",
    "process substitution": "cat <(a) ",
    "heredocs": "cat <<E\nx\nE\n",
    "single quotes": "'a' ",
    "double quotes": '"a" ',
    "double quotes with $": '"$a" ',
    "ANSI-C quotes": "$'\\'' ",
    "escapes": "\\a ",
    "assignments": "A=1 ",
    "comments": "# c\n",
    "braces": "{ a; } ",
    "arrays": "a=(x y) ",
    "${}": "${a} ",
    "$(())": "$((1+1)) ",
    "words": "abc ",
    "flags": "-f ",
    "rm -rf / itself": "rm -rf / ; ",
    "redirections": "a 2>/dev/null ",
    "brace expansion": "{a,b} ",
    "ANSI-C escapes": "$'\\x61' ",
    "functions": "f() { a; }; ",
    "case": "case a in a) a;; esac; ",
    "[[ ]]": "[[ a ]] && ",
    "eval": "eval a; ",
    "$() in ${} and $(())": "${a:-$(a)}$(( $(a) )) ",
    "unquoted heredocs with $()": "cat <<E\n$(a)\nE\n",
    # Every subcommand with an expansion: each once made every rule be tried on its own.
    "expansions after semicolons": "a $x; ",
    "expansions in a pipeline": "a $x | ",
}

#: Commands that never end: the whole tail after the unit is inside it.
OPEN_UNITS: Final = {
    "unterminated single quote": "'",
    "unterminated double quote": '"',
    "unterminated backtick": "`",
    "unterminated $(": "$(",
}

#: Texts that start a redaction detector, repeated to the size wanted.
SECRET_UNITS: Final = {
    "curl": "curl ",
    "mysql": "mysql ",
    "mariadb": "mariadb ",
    "wget": "wget ",
    "sshpass": "sshpass -p ",
    "curl -u": "curl -u a:",
    "=a": "=a",
    "x=": "x=",
    "password=": "password=",
    "TOKEN=": "TOKEN=",
    "Authorization:": "Authorization:",
    "Bearer": "Bearer ",
    "sk-": "sk-",
    "ghp_": "ghp_",
    "eyJ": "eyJ.",
    "://a:": "://a:",
    "-----BEGIN": "-----BEGIN ",
    "--password": "--password ",
    "AKIA": "AKIA",
    "xoxb-": "xoxb-",
    ": ": "a: ",
    "key=": "apiKey=",
}


def fill(unit: str, size: int) -> str:
    """``unit`` repeated to about ``size`` characters."""
    return unit * max(1, size // len(unit))


def command(unit: str, size: int) -> str:
    """A command of about ``size`` bytes built of ``unit``, ending with ``rm -rf /`` (behind the
    wrappers when ``unit`` is one, else on a line of its own)."""
    wrapper = unit.split(" ", 1)[0] in WRAPPERS
    return fill(unit, size - 10) + ("" if wrapper else "\n") + "rm -rf /"


WRAPPERS: Final = frozenset({"nice", "timeout", "nohup", "stdbuf", "time", "command"})


def nested(depth: int) -> Any:
    """A JSON value ``depth`` deep (``[[[...]]]``; depth 0 is a number)."""
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def nested_json(depth: int) -> bytes:
    """:func:`nested` as JSON text, written without recursion (any depth)."""
    return b"[" * depth + b"0" + b"]" * depth


__all__ = ["COMMAND_UNITS", "OPEN_UNITS", "SECRET_UNITS", "command", "fill", "nested", "nested_json"]
