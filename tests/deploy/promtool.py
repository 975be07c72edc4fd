"""Running ``promtool`` and ``prometheus`` (Debian's ``prometheus`` package) from the deploy tests.

Without them on PATH the calling test is skipped, except under CI (``HOOKBUS_CI=1``, see
:mod:`tests.ci`), where it fails: CI must run these checks.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.ci import missing

#: Well under pytest-timeout's 60 s, so that a hung promtool fails with its output.
TIMEOUT_S = 45


def required_binary(name: str) -> str:
    """The path of ``name`` (Debian's ``prometheus`` package); skip (fail under CI) when it is missing."""
    path = shutil.which(name)
    if path is None:
        missing(f"{name} is not on PATH (apt-get install prometheus)")
    return path


def promtool(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``promtool *args`` in ``cwd`` (``stdin`` as its input); skip (fail under CI) when promtool is missing."""
    path = required_binary("promtool")
    return subprocess.run(
        [path, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
