"""``scripts/_venv.sh``, which ``./scripts/up`` and ``./scripts/check`` source: one line per step, pip's
output only when a step fails.

The script runs for real in a temporary folder whose ``.venv/bin/python`` is a stub that talks
as much as pip does (and fails when asked), so no package is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.system  # it runs bash

CHATTER = [f"Collecting package-{i} (from hookbus)" for i in range(60)]
STUB = """#!/bin/sh
for i in $(seq 0 59); do echo "Collecting package-$i (from hookbus)"; done
case "$*" in *" -e "*) exit "${STUB_EXIT:-0}";; esac
"""


def setup(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / "scripts" / "_venv.sh", tmp_path / "scripts" / "_venv.sh")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(STUB)
    python.chmod(0o755)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", "-c", 'EXTRAS=dev source scripts/_venv.sh; echo "after setup in $PWD"'],
        cwd=tmp_path,
        env={**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path / "tmp"), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_scripts_parse() -> None:
    for name in ("_venv.sh", "up", "check"):
        assert subprocess.run(["bash", "-n", str(REPO / "scripts" / name)]).returncode == 0, name


def test_a_setup_that_works_prints_one_line_per_step(tmp_path: Path) -> None:
    done = setup(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"after setup in {tmp_path}\n"
    assert done.stderr.splitlines() == [
        "setup: updating pip ... ok",
        "setup: installing hookbus (.[dev]) and its dependencies into .venv ... ok",
    ]
    assert list((tmp_path / "tmp").iterdir()) == []  # the log is gone


def test_a_step_that_fails_shows_pip_output_and_stops(tmp_path: Path) -> None:
    failed = setup(tmp_path, STUB_EXIT="3")
    assert failed.returncode == 3
    assert failed.stdout == ""  # the sourcing script stops there
    lines = failed.stderr.splitlines()
    assert lines[:2] == [
        "setup: updating pip ... ok",
        "setup: installing hookbus (.[dev]) and its dependencies into .venv ... failed (exit 3):",
    ]
    assert lines[2:] == CHATTER
    assert list((tmp_path / "tmp").iterdir()) == []
