"""A mistyped option is named by the sub-command it was given to, with that command's usage."""

from __future__ import annotations

import pytest

from hookbus.cli import main


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["tail", "-n", "5"], "usage: hookbus tail "),
        (["audit", "export", "--backlog", "10"], "usage: hookbus audit export "),
        (["policy", "check", "p.yaml", "--bogus", "1"], "usage: hookbus policy check "),
    ],
)
def test_an_unknown_option_gets_its_own_commands_usage(
    argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage), err
    assert err.rstrip().endswith(f"error: unrecognized arguments: {' '.join(argv[-2:])}")


def test_an_unknown_command_still_gets_the_top_level_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["tial"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("usage: hookbus ")
