"""The tiers (tests/conftest.py): ``-m unit``, ``-m redis`` and ``-m system`` select every test once.

Each tier's selection is collected by a real ``pytest --collect-only`` (the tiers are assigned
while collecting, before ``-m`` selects), so a test with no tier or with two shows here.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, TIERS

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]  # pytest runs in child processes

COLLECTED = re.compile(r"^(?:(?P<selected>\d+)/)?(?P<total>\d+) tests? collected", re.MULTILINE)


def collect(tier: str) -> tuple[int, int]:
    """(tests selected by ``-m tier``, tests collected in all)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", tier],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = COLLECTED.search(done.stdout)
    assert found is not None, done.stdout[-3000:]
    total = int(found["total"])
    return int(found["selected"] or total), total


def test_the_tiers_select_every_test_exactly_once() -> None:
    counts = {tier: collect(tier) for tier in TIERS}
    totals = {total for _, total in counts.values()}
    assert len(totals) == 1, counts  # one suite, collected three times
    (total,) = totals
    selected = {tier: n for tier, (n, _) in counts.items()}
    assert all(selected.values()), selected  # no tier is empty
    assert sum(selected.values()) == total, selected
