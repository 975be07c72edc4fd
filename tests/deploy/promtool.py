"""Running ``promtool`` and ``prometheus`` (Debian's ``prometheus`` package) from the deploy tests.

Without them on PATH the calling test is skipped, except under CI (``CI`` set to anything
but ``""``, ``0`` or ``false``), where it fails: CI must run these checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: Well under pytest-timeout's 60 s, so that a hung promtool fails with its output.
TIMEOUT_S = 45


def ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in {"", "0", "false"}


def required_binary(name: str) -> str:
    """The path of ``name`` (Debian's ``prometheus`` package); skip (fail under CI) when it is missing."""
    path = shutil.which(name)
    if path is None:
        message = f"{name} is not on PATH (apt-get install prometheus)"
        if ci():
            pytest.fail(f"{message}; CI must run the Prometheus checks")
        pytest.skip(message)
    return path


def promtool(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``promtool *args`` in ``cwd`` (``stdin`` as its input); skip (fail under CI) when promtool is missing."""
    path = required_binary("promtool")
    return subprocess.run(
        [path, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
