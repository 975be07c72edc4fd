"""What a test does when a system tool it needs is missing: skip on a developer's machine, fail in CI.

CI (``.ci/run``, which installs the tools) sets ``HOOKBUS_CI=1``; ``CI`` set to anything but
``""``, ``0`` or ``false`` (as CI services set it) counts too. There a missing Redis 7 (Cluster,
Sentinel), ``promtool``/``prometheus``, Chromium or Helm wheel fails the run instead of skipping it.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def under_ci() -> bool:
    return os.environ.get("HOOKBUS_CI") == "1" or os.environ.get("CI", "").strip().lower() not in {"", "0", "false"}


def missing(message: str) -> NoReturn:
    """Skip the test saying ``message``; under CI, fail it with the same message."""
    if under_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
