"""The records a gateway writes itself (inputs it refused) are linked into their chain like the
dispatchers' records: when Redis is up, and when they wait in the spool while it is down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bus.decisionlog.chain import Link
from bus.redis.keys import Keyspace
from hookbus.audit.verify import check_live
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import BusProbe, async_wait_for, pre_tool_use

DENY_RM = (
    "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks: [{type: rule, deny: ['Bash(rm -rf *)'], reason: no rm}]\n"
)
REFUSED = {"hook_event_name": "PreToolUse", "session_id": "s-1", "tool_name": "Bash", "tool_input": "rm -rf /"}


async def test_a_refused_input_is_recorded_in_its_chain_between_decided_ones(
    platform: Callable[..., Any], bus: BusProbe
) -> None:
    async with platform(DENY_RM) as p:
        await p.post(pre_tool_use("rm -rf /"))
        refused = await p.post(REFUSED)
        assert refused.headers["X-Hookbus-Refused"].startswith("invalid_field")
        await p.post(pre_tool_use("ls"))
        await async_wait_for(lambda: _count(bus, 3), timeout_s=5)
    records = await bus.log()
    assert [Link.parse(r.chain).seq for r in records] == [1, 2, 3]  # type: ignore[union-attr]
    assert records[1].event_id == refused.headers["X-Hookbus-Event-Id"] and "cannot judge" in records[1].reason
    check, _ = await check_live(bus.url, Keyspace())
    assert check.first_break() is None and check.checked == 3


async def test_a_refused_input_spooled_while_redis_is_down_is_linked_when_it_is_back(
    platform: Callable[..., Any], private_redis: EmbeddedRedis
) -> None:
    probe = BusProbe(private_redis.url)
    try:
        async with platform(DENY_RM, on_redis=private_redis.url) as p:
            await p.post(pre_tool_use("rm -rf /"))
            await async_wait_for(lambda: _count(probe, 1), timeout_s=5)
            private_redis.stop()
            refused = await p.post(REFUSED)
            assert refused.headers["X-Hookbus-Refused"].startswith("invalid_field")
            assert len(p.app.state.gateway.spool) == 1
            private_redis.start()  # empty again: the chain starts over with the spooled record
            await async_wait_for(lambda: _count(probe, 1, refused.headers["X-Hookbus-Event-Id"]), timeout_s=10)
        [record] = await probe.log()
        assert Link.parse(record.chain) is not None
        check, _ = await check_live(private_redis.url, Keyspace())
        assert check.first_break() is None and check.checked == 1
    finally:
        await probe.close()


async def _count(bus: BusProbe, count: int, event_id: str | None = None) -> bool:
    records = await bus.log()
    return len(records) >= count and (event_id is None or any(r.event_id == event_id for r in records))
