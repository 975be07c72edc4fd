"""Fixtures for the real agent CLIs: a loopback-only network namespace."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.agents.harness import LoopbackNetns, loopback_netns


@pytest.fixture
def netns() -> Iterator[LoopbackNetns]:
    """A network namespace with only ``lo``, deleted after the test."""
    with loopback_netns() as ns:
        yield ns
