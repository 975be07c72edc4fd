"""``hookbus.decisionLog`` retention, enforced on a real Redis by a running dispatcher.

Each record's ``XADD`` trims with ``MAXLEN ~`` (whole stream nodes only); the dispatchers'
janitor then trims to ``maxLength`` and ``maxAgeSeconds`` exactly, about every second.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bus.stream.protocol import now_ms
from tests.conftest import BusProbe, async_wait_for, policy_yaml
from tests.hookbus.audit.test_command import record


def notification(i: int) -> dict[str, Any]:
    return {"hook_event_name": "Notification", "session_id": "ret-1", "message": f"n{i}"}


async def test_records_older_than_max_age_are_trimmed(platform: Callable[..., Any], bus: BusProbe) -> None:
    now = now_ms()
    for i in range(3):  # two hours old
        await bus.redis.xadd(bus.keys.decision_log(), record(i).encode(), id=f"{now - 7_200_000 + i}-0")  # type: ignore[arg-type]
    for i in range(3, 5):  # a minute old
        await bus.redis.xadd(bus.keys.decision_log(), record(i).encode(), id=f"{now - 60_000 + i}-0")  # type: ignore[arg-type]
    async with platform(policy_yaml({}, decisionLog={"maxLength": 1000, "maxAgeSeconds": 3600})):

        async def kept() -> list[str] | None:
            found = [r.event_id for r in await bus.log()]
            return found if len(found) == 2 else None

        assert await async_wait_for(kept, timeout_s=10) == ["ev-0003", "ev-0004"]


async def test_the_log_is_trimmed_to_max_length_exactly(platform: Callable[..., Any], bus: BusProbe) -> None:
    async with platform(policy_yaml({}, decisionLog={"maxLength": 5, "maxAgeSeconds": None})) as p:
        ids = [(await p.post(notification(i))).headers["X-Hookbus-Event-Id"] for i in range(40)]

        async def trimmed() -> list[str] | None:
            found = [r.event_id for r in await bus.log()]
            return found if len(found) == 5 and found[-1] == ids[-1] else None

        assert await async_wait_for(trimmed, timeout_s=10) == ids[-5:]  # the newest five
