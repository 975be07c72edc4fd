"""``POST /v1/policy/replay``: a bad time is a one-line ``invalid_time`` before any child runs, and a
child over its memory limit is a clear ``400``, never a traceback, a hang or a ``500``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway import console as console_module
from tests.conftest import DENY_RM, assert_error


@pytest.mark.parametrize("since", ["0001-01-01", "99999999999999999999", "whenever"])
async def test_a_bad_time_is_one_line(platform: Callable[..., Any], since: str) -> None:
    async with platform(DENY_RM) as p:
        answer = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": "hooks: {}", "since": since})
        body = assert_error(answer, 400, "invalid_time")
    assert "\n" not in body["detail"] and "Traceback" not in body["detail"] and since in body["detail"]


async def test_a_child_over_its_memory_limit_is_a_clear_error(
    platform: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_module, "REPLAY_MEMORY_BYTES", 48 << 20)  # too little to start Python
    async with platform(DENY_RM) as p:
        answer = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": "hooks: {}"}, timeout=60)
        body = assert_error(answer, 400, "replay_too_large")
        assert "\n" not in body["detail"] and "Traceback" not in body["detail"] and "48 MiB" in body["detail"]
        # The gateway goes on: the next replay, within the limit, runs.
        monkeypatch.setattr(console_module, "REPLAY_MEMORY_BYTES", 1 << 30)
        again = await p.client.post(f"{p.url}/v1/policy/replay", json={"policy": "hooks: {}"}, timeout=60)
        assert again.status_code == 200, again.text
