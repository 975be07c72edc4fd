"""Differential tests of the readings: what real wrappers run is one of a command's readings.

Each case runs in ``bash --noprofile --norc -c`` in a temporary directory whose ``PATH`` holds the
real wrappers (``env``, ``nice``, ``timeout``, ``xargs``, ``find``, ``sh``...) and fake ``rm`` and
``git`` that append their argv to a log and do nothing else. Every argv logged must be the words
of one of the readings hookbus gives the command (:func:`bus.rules.readings.read_command`), so a
rule that meets what runs meets the command. No case may let a program search another ``PATH``
(``env -i`` without one, a login shell): only the fakes may run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from bus.rules.bashsplit import parse_commands
from bus.rules.heredocs import fed_texts
from bus.rules.readings import STDIN_ARGS, read_command
from tests.bus.rules.fakebash import RECORDER, run_fakes

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # bash runs as a child process

#: Real programs the cases run: each runs another command for its caller.
REAL = ("env", "nice", "timeout", "nohup", "stdbuf", "setsid", "xargs", "find", "flock", "ionice", "sh", "bash")

CASES = [
    "env rm -rf x",
    'env -i -u HOME PATH="$PATH" LOG="$HOOKBUS_ORACLE_LOG" rm -rf x',  # with PATH: only the fakes run
    "env -S 'rm -rf' x",
    'env - PATH="$PATH" LOG="$HOOKBUS_ORACLE_LOG" git reset --hard',
    "nice -n 5 rm -rf x",
    "timeout -s KILL 5 rm -r -f x",
    "nohup rm -rf x",
    "stdbuf -o0 rm -rf x",
    "setsid -w rm -rf x",
    "ionice -c 3 rm -rf x",
    "flock lockfile rm -rf x",
    "flock lockfile -c 'rm -rf x'",
    "nice env timeout 5 rm -rf x",
    "sh -c 'rm -rf x'",
    'bash -ec "rm -rf x; git reset --hard"',  # not -l: a login shell's profile sets PATH
    "sh -ec 'sh -c \"rm -rf x\"'",
    "bash -o pipefail -c 'git -C . reset --hard'",
    "sh <<EOF\nrm -rf x\nEOF",
    "bash <<'EOF'\nnice rm -rf x\nEOF",
    'bash <<< "rm -rf x"',
    "echo x | xargs rm -rf",
    "echo a b | xargs -r -t rm -f y",  # what echo feeds xargs is read
    "echo 'a  b\n c' | xargs rm -rf",
    "echo 'rm -rf x; git reset --hard' | sh",  # and what it feeds a shell
    "printf 'a\\0b' | xargs -0 rm -rf",
    "echo x | xargs -I{} rm -rf {}",
    "echo x | xargs -n 1 env rm -rf",
    "find . -maxdepth 0 -exec rm -rf {} \\;",
    "find . -maxdepth 0 -execdir git reset --hard \\;",
    "find . -maxdepth 0 -exec sh -c 'rm -rf x' \\;",
]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readings-oracle")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name in ("rm", "git"):
        fake = bin_dir / name
        fake.write_text(RECORDER)
        fake.chmod(0o755)
    for name in REAL:
        real = shutil.which(name)
        if real is None:
            pytest.skip(f"{name} is not installed")
        (bin_dir / name).symlink_to(real)
    return root


def run_in_bash(sandbox: Path, case: str) -> list[list[str]]:
    """The argv of every fake program run for ``case``."""
    return [[argv[0].rsplit(os.sep, 1)[-1], *argv[1:]] for argv in run_fakes(sandbox, case, 20)]


def read(case: str) -> list[list[str]]:
    """The words of every reading of ``case``; one ending in what xargs reads ends in ``...``."""
    commands = parse_commands(case)
    assert commands is not None, case
    found = []
    for cmd, stdin in zip(commands, fed_texts(case, commands), strict=True):
        for reading in read_command(cmd, stdin).commands:
            found.append(["..." if w is STDIN_ARGS else w.value for w in reading.words])
    return found


def covered(argv: list[str], readings: list[list[str]]) -> bool:
    for words in readings:
        if words == argv:
            return True
        if words and words[-1] == "..." and argv[: len(words) - 1] == words[:-1]:
            return True  # what xargs read ends the command
        if "{}" in words and len(words) == len(argv):  # xargs -I{}: what it read stands there
            if all(w == a or w == "{}" for w, a in zip(words, argv, strict=True)):
                return True
    return False


@pytest.mark.parametrize("case", CASES)
def test_what_runs_is_a_reading(sandbox: Path, case: str) -> None:
    records = run_in_bash(sandbox, case)
    assert records, f"bash ran no fake program for {case!r}: the case tests nothing"
    readings = read(case)
    for argv in records:
        assert covered(argv, readings), f"{case!r} ran {argv}, not one of its readings {readings}"
