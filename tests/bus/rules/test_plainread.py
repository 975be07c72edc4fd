"""The short reading path for a subcommand that runs only itself gives the general path's read."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bus.rules.bashsplit import parse_commands
from bus.rules.heredocs import fed_texts
from bus.rules.shellread import SubcommandRead, _make_read, _reading, plain_read, read_shell
from tests.bus.rules.test_bash_oracle import ENGINE_CASES, HOSTILE_CASES, nested_cases
from tests.bus.rules.test_readings_oracle import CASES as READINGS_CASES

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

CORPUS = Path(__file__).resolve().parents[3] / "bench" / "data" / "guards_corpus.jsonl"
PLAIN = [
    "cat src/x/index.ts",
    "grep -rn foo src | head -20",
    "curl -s https://example.com/api | jq .",
    "ls -la && git status && git log --oneline -n 3",
    "rm -rf build",
    "npm test -- --watch=false",
]


def commands() -> Iterator[str]:
    """Every Bash command of the guards corpus, the oracles' cases and a few plain ones."""
    for line in CORPUS.read_bytes().splitlines():
        case = orjson.loads(line)
        if case.get("tool") == "Bash" and isinstance(case.get("command"), str):
            yield case["command"]
    yield from ENGINE_CASES
    yield from nested_cases()
    yield from HOSTILE_CASES
    yield from (case if isinstance(case, str) else case[0] for case in READINGS_CASES)
    yield from PLAIN


def test_the_short_path_reads_as_the_general_path() -> None:
    shortened = general = 0
    for command in commands():
        parsed = parse_commands(command)
        if parsed is None:
            continue
        for cmd, stdin in zip(parsed, fed_texts(command, parsed), strict=True):
            plain = plain_read(cmd)
            if stdin is not None or plain is None:
                general += 1
                continue
            shortened += 1
            assert plain == _make_read(cmd, None, False), command
    # Both paths are taken: the corpus tells them apart.
    assert shortened > 500
    assert general > 500


@pytest.mark.parametrize(
    "command",
    [
        "sudo rm -rf /",
        "sh -c 'rm -rf /'",
        "/bin/rm -rf /",
        "find . -delete",
        "ls | xargs rm",
        "git -C repo reset --hard",
        "python3 -c 'import os'",
        "env rm -rf /",
        "timeout 5 rm -rf /",
        "rm -- -rf",
    ],
)
def test_a_command_that_runs_more_takes_the_general_path(command: str) -> None:
    parsed = parse_commands(command)
    assert parsed is not None
    assert plain_read(parsed[-1]) is None


def test_a_plain_command_is_read_as_itself() -> None:
    parsed = parse_commands("rm -r -f build")
    assert parsed is not None
    read = plain_read(parsed[0])
    assert read == SubcommandRead((_reading(parsed[0]),), False)
    assert "rm -rf build" in read_shell("rm -r -f build").texts
