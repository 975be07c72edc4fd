"""Running ``promtool`` (Debian's ``prometheus`` package) from the deploy tests.

Without promtool on PATH the calling test is skipped, except under CI (``CI`` set to anything
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


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``promtool *args`` in ``cwd``; skip (fail under CI) when promtool is missing."""
    path = shutil.which("promtool")
    if path is None:
        message = "promtool is not on PATH (apt-get install prometheus)"
        if ci():
            pytest.fail(f"{message}; CI must run the Prometheus checks")
        pytest.skip(message)
    return subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
