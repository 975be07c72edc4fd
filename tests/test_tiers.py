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


def collect(tiers: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """Per tier, (tests selected by ``-m tier``, tests collected in all): the collections run at
    once, each in its own process (one takes about half a minute on a slow host)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m"]
    running = {
        tier: subprocess.Popen([*command, tier], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for tier in tiers
    }
    counts = {}
    try:
        for tier, child in running.items():
            stdout, stderr = child.communicate(timeout=150)
            assert child.returncode == 0, stdout[-3000:] + stderr[-3000:]
            found = COLLECTED.search(stdout)
            assert found is not None, stdout[-3000:]
            total = int(found["total"])
            counts[tier] = (int(found["selected"] or total), total)
    finally:
        for child in running.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    return counts


def test_the_tiers_select_every_test_exactly_once() -> None:
    counts = collect(TIERS)
    totals = {total for _, total in counts.values()}
    assert len(totals) == 1, counts  # one suite, collected three times
    (total,) = totals
    selected = {tier: n for tier, (n, _) in counts.items()}
    assert all(selected.values()), selected  # no tier is empty
    assert sum(selected.values()) == total, selected
