"""docs/cli.md, generated from the ``hookbus`` argument parsers (``hookbus.cli.build_parser``).

Regenerate it with ``python -m hookbus.cli_docs > docs/cli.md``; ``tests/hookbus/test_cli_docs.py``
fails when the file and the parsers disagree. The usage lines are built here from the parsers'
actions rather than by argparse's formatter, so the output does not depend on the terminal's
width or on the Python version.
"""

from __future__ import annotations

import argparse
import sys

from hookbus.cli import build_parser

COMMAND = "python -m hookbus.cli_docs > docs/cli.md"


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """``(name, help, parser)`` of each sub-command of ``parser``, in the order they were added."""
    found: list[tuple[str, str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, child in action.choices.items():
                found.append((name, str(helps.get(name, "")), child))
    return found


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _value(action: argparse.Action) -> str:
    """The value(s) an action takes, as usage spells them: ``FILE``, ``FILE [FILE ...]``, ``[ID ...]``."""
    name = _metavar(action)
    if isinstance(action, argparse._SubParsersAction):
        return f"{name} ..."
    if action.nargs == "+":
        return f"{name} [{name} ...]"
    if action.nargs == "*":
        return f"[{name} ...]"
    if action.nargs == "?":
        return f"[{name}]"
    return name


def _option(action: argparse.Action) -> str:
    """The option as the usage line spells it: its longest flag, and its value if it takes one (a
    positional of a group of exclusive choices: its name)."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    flag = max(action.option_strings, key=len)
    return f"{flag} {_value(action)}" if _takes_value(action) else flag


def _visible(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if action.help != argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)
    ]


def usage(parser: argparse.ArgumentParser, prog: str) -> str:
    """One usage line: options first (mutually exclusive ones joined by ``|``), then positionals."""
    grouped: dict[int, argparse._MutuallyExclusiveGroup] = {}
    for group in parser._mutually_exclusive_groups:
        for action in group._group_actions:
            grouped[id(action)] = group
    parts: list[str] = []
    done: set[int] = set()
    actions = _visible(parser)
    for action in (a for a in actions if a.option_strings):
        exclusive = grouped.get(id(action))
        if exclusive is None:
            text = _option(action)
            parts.append(text if action.required else f"[{text}]")
        elif id(exclusive) not in done:
            done.add(id(exclusive))
            members = [a for a in exclusive._group_actions if a.help != argparse.SUPPRESS]
            text = " | ".join(_option(a) for a in members)
            parts.append(f"({text})" if exclusive.required else f"[{text}]")
    parts += [_value(a) for a in actions if not a.option_strings and id(a) not in grouped]
    return " ".join([prog, *parts])


def _argument_lines(parser: argparse.ArgumentParser) -> list[str]:
    lines: list[str] = []
    for action in _visible(parser):
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.option_strings:
            flags = ", ".join(action.option_strings)
            name = f"{flags} {_value(action)}" if _takes_value(action) else flags
        else:
            name = _value(action)
        text = " ".join(str(action.help or "").split())
        if action.required and action.option_strings:
            text = f"required; {text}" if text else "required"
        lines.append(f"- `{name}`" + (f": {text}" if text else ""))
    return lines


def _section(parser: argparse.ArgumentParser, prog: str, summary: str, depth: int) -> list[str]:
    lines = [f"{'#' * depth} `{prog}`", ""]
    description = parser.description or summary
    if description:
        lines += [" ".join(description.split()), ""]
    lines += ["```text", usage(parser, prog), "```", ""]
    arguments = _argument_lines(parser)
    if arguments:
        lines += [*arguments, ""]
    children = _subcommands(parser)
    if children:
        names = ", ".join(f"`{name}`" for name, _, _ in children)
        lines += [f"Sub-commands: {names}.", ""]
    for name, help_text, child in children:
        lines += _section(child, f"{prog} {name}", help_text, min(depth + 1, 4))
    return lines


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """docs/cli.md: every command and sub-command with its usage, description and options."""
    root = build_parser() if parser is None else parser
    head = [
        f"<!-- Generated from hookbus/cli.py: do not edit; regenerate with `{COMMAND}`. -->",
        "",
        "# Command line",
        "",
        f"This page is generated from the `hookbus` argument parsers (`{COMMAND}`), so it lists",
        "every command, sub-command and option the installed `hookbus` accepts; `hookbus COMMAND",
        "--help` prints the same. Agents read `HOOKBUS_URL` and `HOOKBUS_TOKEN`; every other",
        "setting is in [operations.md](operations.md#settings).",
        "",
    ]
    body = _section(root, "hookbus", "", 2)
    while body and body[-1] == "":
        body.pop()
    return "\n".join(head + body) + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
