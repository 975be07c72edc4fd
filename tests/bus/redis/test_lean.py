"""The lean round trips of :mod:`bus.redis.lean`: replies in order, errors in place, a broken or
cancelled round trip never leaves a reply for the next caller."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from bus.errors import RedisCommandError
from bus.redis.connection import connect, hookbus_error
from bus.redis.lean import LeanLink
from tests.conftest import async_wait_for

NAME = "lean-link-test"


async def test_replies_come_in_order_and_an_error_reply_stands_in_its_place(redis_url: str) -> None:
    client = connect(redis_url)
    link = LeanLink(client)
    try:
        replies = await link.execute(
            [["SET", "lean:a", "1"], ["XADD", "lean:a", "*", "f", b"v"], ["INCRBY", "lean:a", 2], ["GET", "lean:a"]]
        )
    finally:
        await link.aclose()
        await client.aclose()
    assert replies[0] == b"OK"
    wrongtype = hookbus_error(replies[1])  # read as a pipeline's error result is read
    assert isinstance(wrongtype, RedisCommandError) and wrongtype.code == "WRONGTYPE"
    assert replies[2:] == [3, b"3"]


async def test_a_killed_connection_fails_its_round_trip_and_the_next_one_reconnects(redis_url: str) -> None:
    client = connect(redis_url, client_name=NAME)
    probe = connect(redis_url)
    link = LeanLink(client)
    try:
        assert await link.execute([["PING"]]) == [b"PONG"]
        assert (
            await probe.client_kill_filter(
                _id=next(c["id"] for c in await probe.client_list() if c.get("name") == NAME)
            )
            == 1
        )
        with pytest.raises((OSError, aioredis.ConnectionError)) as failed:
            await link.execute([["PING"]])
        assert hookbus_error(failed.value) is not None  # an outage: the caller fails open
        assert (await link.execute([["DEL", "lean:n"], ["INCR", "lean:n"]]))[1] == 1
    finally:
        await link.aclose()
        await client.aclose()
        await probe.aclose()


async def test_a_cancelled_round_trip_leaves_no_reply_for_the_next_caller(redis_url: str) -> None:
    client = connect(redis_url, client_name=NAME)
    probe = connect(redis_url)
    link = LeanLink(client)
    try:
        waiting = asyncio.create_task(link.execute([["BLPOP", "lean:list", 5]]))

        async def blocked() -> bool:
            return any(c.get("name") == NAME and c.get("cmd") == "blpop" for c in await probe.client_list())

        await async_wait_for(blocked, timeout_s=5)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await probe.rpush("lean:list", "late")  # type: ignore[misc]  # the old connection's BLPOP is answered, or gone
        assert await link.execute([["SET", "lean:b", "x"], ["GET", "lean:b"]]) == [b"OK", b"x"]
    finally:
        await link.aclose()
        await client.aclose()
        await probe.aclose()
