"""Keys that name a session stay short whatever session id an agent sends: a short id is spelled as
it is (the keys of today), a long one by its SHA-256."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from bus.redis.keys import SESSION_ID_KEY_BYTES, Keyspace, session_key_part
from hookbus.platform.redis_server import EmbeddedRedis
from tests.conftest import async_wait_for, pre_tool_use
from tests.workers.jobs.test_worker import run_worker
from tests.workers.test_key_ttls import BLOCK, event, policy

KEYS = Keyspace()
LONG = "s" * 100_000

#: What no key that names a session may grow past: the prefix, the family, the tenant, the digest, a handler id.
BOUND = 200


def session_keys(keys: Keyspace, session: str) -> list[str]:
    return [
        keys.once("default", session, "PreToolUse:0:0"),
        keys.stop_guard("default", session),
        keys.pending_context("default", session),
    ]


def test_a_short_session_id_gives_the_keys_of_today() -> None:
    assert session_keys(KEYS, "s-1") == [
        "hookbus:once:default:s-1:PreToolUse:0:0",
        "hookbus:stopguard:default:s-1",
        "hookbus:context:default:s-1",
    ]
    at_the_limit = "é" * (SESSION_ID_KEY_BYTES // 2)  # 128 bytes in UTF-8
    assert KEYS.stop_guard("default", at_the_limit) == f"hookbus:stopguard:default:{at_the_limit}"


def test_a_long_session_id_gives_short_keys() -> None:
    digest = hashlib.sha256(LONG.encode()).hexdigest()
    assert KEYS.stop_guard("default", LONG) == f"hookbus:stopguard:default:h:{digest}"
    assert all(len(key.encode()) < BOUND for key in session_keys(KEYS, LONG))
    over = "é" * (SESSION_ID_KEY_BYTES // 2) + "x"  # 129 bytes: counted in bytes, not characters
    assert session_key_part(over) == f"h:{hashlib.sha256(over.encode()).hexdigest()}"


@pytest.mark.parametrize("key", [Keyspace.once, Keyspace.stop_guard, Keyspace.pending_context])
def test_long_session_ids_that_differ_only_at_the_end_have_keys_of_their_own(key: Callable[..., str]) -> None:
    args = ("PreToolUse:0:0",) if key is Keyspace.once else ()
    assert key(KEYS, "default", LONG + "a", *args) != key(KEYS, "default", LONG + "b", *args)


def test_a_short_id_spelled_like_a_digest_is_no_other_session() -> None:
    lookalike = session_key_part(LONG)
    assert session_key_part(lookalike) != lookalike


async def test_a_platform_writes_no_long_key_for_a_long_session_id(
    platform: Callable[..., Any], private_redis: EmbeddedRedis
) -> None:
    async with platform(policy(), on_redis=private_redis.url) as p:
        keys: Keyspace = p.settings.keys
        once_id = p.policy.entries("PreToolUse")[0].handler_id
        assert (await p.post(pre_tool_use("ls", session=LONG))).status_code == 200  # once: marked
        post = event("PostToolUse", LONG, tool_name="Edit", tool_input={"file_path": "/a.py"}, tool_response={})
        assert (await p.post(post)).json() == {}  # async: queued
        assert (await p.post(event("Stop", LONG, stop_hook_active=False))).json() == BLOCK  # guard: counted
        await run_worker(p)  # the async hook leaves context for the session's next turn
        probe = aioredis.Redis.from_url(private_redis.url)
        try:
            expected = {keys.once("default", LONG, once_id), keys.stop_guard("default", LONG)}
            expected.add(keys.pending_context("default", LONG))

            async def all_created() -> bool:
                return bool(await probe.exists(*expected) == len(expected))

            await async_wait_for(all_created, 10)
            names = [raw async for raw in probe.scan_iter(match=f"{keys.prefix}*", count=500)]
        finally:
            await probe.aclose()
    longest = max(names, key=len)
    assert len(longest) < BOUND, longest[:300]
