"""Differential tests on random commands: a small bash grammar (quotes, ANSI-C and locale strings,
braces, redirections anywhere, substitutions in ``${ }``, ``$(( ))``, here-documents, groups,
functions, ``eval``, ``trap``, ``case``, ``[[ ]]``, stored substitutions) nested three deep, each
command run in bash with fake programs on ``PATH`` (:mod:`tests.bus.rules.test_bash_oracle`):
every program bash runs is one hookbus read, or the command cannot be judged."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bus.rules.bashsplit import parse_commands
from tests.bus.rules.test_bash_oracle import covers, run_in_bash, sandbox

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]  # bash runs as a child process

__all__ = ["sandbox"]  # the fixture, shared

#: Commands per seed, and the seeds (fixed: a failure names the command, and runs again).
COMMANDS = 150
SEEDS = (1, 2)


class Grammar:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)

    def pick(self, *choices: str) -> str:
        return self.random.choice(choices)

    def word(self, depth: int) -> str:
        r, deeper = self.random, depth < 3
        forms = [
            lambda: self.pick("rm", "git", "x", "-rf", "reset", "--hard", "a"),
            lambda: "'" + self.pick("rm", "a b", "-rf", "", "$(rm q)") + "'",
            lambda: '"' + self.pick("rm", "a b", "$x", "$(rm dq)", "`rm bq`", "${x:-$(rm pe)}") + '"',
            lambda: "$'" + self.pick("\\x72m", "\\162\\155", "a\\'b", "\\n") + "'",
            lambda: '$"' + self.pick("rm", "x") + '"',
            lambda: "{" + ",".join(self.pick("rm", "-rf", "/", "a", "") for _ in range(r.randint(1, 3))) + "}",
            lambda: self.pick("r\\m", "$x", "''"),
            lambda: "${x:-" + self.pick("rm", "$(rm pw)", "\\}", "'}'") + "}",
            lambda: "$((1+" + self.pick("1", "$(rm ar)", "`rm ar2`") + "))",
            lambda: "$(" + (self.command(depth + 1) if deeper else "rm cs") + ")",
            lambda: "`" + self.pick("rm bt", "git reset --hard") + "`",
            lambda: "<(" + (self.command(depth + 1) if deeper else "rm ps") + ")",
        ]
        if r.random() < 0.1:
            return "/"  # alone: a path from the root is only ever an argument of a fake
        return "".join(r.choice(forms)() for _ in range(r.randint(1, 2)))

    def simple(self, depth: int) -> str:
        redirect = ">/dev/null", "2>&1", "2>/dev/null", "</dev/null", "&>/dev/null", ">out", "<<<x", ">$(rm rt)"
        parts = [self.pick("rm", "git", "$'\\x72m'", "{rm,-rf}", "r''m", "\\rm", "x=1 rm")]
        for _ in range(self.random.randint(0, 3)):
            parts.append(self.word(depth) if self.random.random() < 0.8 else self.pick(*redirect))
        if self.random.random() < 0.3:
            parts.insert(self.random.randint(0, len(parts)), self.pick(*redirect))
        return " ".join(parts)

    def command(self, depth: int = 0) -> str:
        plain = self.simple(depth).replace("'", "")  # for the forms that quote it
        if depth >= 3:
            return plain

        def inner() -> str:
            return self.command(depth + 1)

        forms = [
            lambda: self.simple(depth),
            lambda: "{ " + inner() + "; }",
            lambda: "(" + inner() + ")",
            lambda: "f() { " + inner() + "; }; f",
            lambda: "if true; then " + inner() + "; fi",
            lambda: "for i in 1; do " + inner() + "; done",
            lambda: "eval '" + plain + "'",
            lambda: "time " + inner(),
            lambda: inner() + " && " + inner(),
            lambda: inner() + " | " + inner(),
            lambda: "case a in a) " + inner() + ";; esac",
            lambda: "[[ -n x ]] && " + inner(),
            lambda: "cat <<EOF\n$(" + inner() + ")\nEOF",
            lambda: "! " + inner(),
            lambda: "trap '" + plain + "' EXIT",
            lambda: "(( 1 << 1 ))\n" + inner(),
            lambda: "x='a[$(" + plain + ")]'; echo $((x))",
        ]
        return self.random.choice(forms)()


@pytest.mark.parametrize("seed", SEEDS)
def test_random_commands_are_read_as_bash_runs_them(sandbox: Path, seed: int) -> None:
    grammar = Grammar(seed)
    home = str(sandbox / "work")
    ran = refused = 0
    for _ in range(COMMANDS):
        case = grammar.command()
        records = run_in_bash(sandbox, case)
        ran += bool(records)
        read = parse_commands(case)
        if read is None:  # cannot be judged: a `$(((` bash reads as `$(` and `((`, a quote in arithmetic
            refused += 1
            continue
        missed = [argv for argv in records if not any(covers(cmd, argv, home) for cmd in read)]
        assert missed == [], f"{case!r}: bash ran {missed}, hookbus read {[cmd.plain for cmd in read]}"
    assert ran > 0.8 * COMMANDS  # the commands do run programs
    assert refused < 0.1 * COMMANDS  # and are read, not refused
