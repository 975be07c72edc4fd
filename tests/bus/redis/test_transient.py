"""bus.redis.connection: an error reply is classified from its code, however redis-py delivers it.

A real Redis sends each reply (a Lua ``redis.error_reply``), raised by a call, held among a
pipeline's results, or raised by a pipeline (which wraps it in the failed command's text: the
asyncio client puts the repr of the error's args there, the other clients the text itself).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import pytest
import pytest_asyncio
import redis
import redis.asyncio as aioredis
import redis.exceptions

from bus.errors import BusUnavailable, RedisCommandError
from bus.redis.connection import connect, error_reply, hookbus_error, is_transient

pytestmark = pytest.mark.timeout(30)

TRANSIENT = ["MISCONF", "LOADING", "BUSY", "READONLY", "OOM", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"]
#: Codes of replies that are answers, not outages (``BUSYGROUP`` is no ``BUSY``). redis-py
#: strips ``ERR`` off the text as it does ``OOM``: those are covered by the class.
FOR_GOOD = ["WRONGTYPE", "BUSYGROUP", "NOGROUP", "NOSCRIPT", "NOTBUSY"]

Deliver = Callable[[aioredis.Redis, str], Awaitable[BaseException]]


def script(reply: str) -> str:
    return f"return redis.error_reply('{reply}')"


async def raised(client: aioredis.Redis, reply: str) -> BaseException:
    try:
        await cast(Awaitable[Any], client.eval(script(reply), 0))
    except redis.exceptions.RedisError as exc:
        return exc
    raise AssertionError("no error")


async def _pipelined(client: aioredis.Redis, reply: str, *, raising: bool, transaction: bool) -> BaseException:
    try:
        async with client.pipeline(transaction=transaction) as pipe:
            pipe.set("before", 1)
            pipe.eval(script(reply), 0)
            results = await pipe.execute(raise_on_error=raising)
    except redis.exceptions.RedisError as exc:  # raising, or LOADING (redis-py raises it at once)
        return exc
    error = results[1]
    assert isinstance(error, redis.exceptions.RedisError)
    return error


async def held(client: aioredis.Redis, reply: str) -> BaseException:
    return await _pipelined(client, reply, raising=False, transaction=False)


async def pipeline_raised(client: aioredis.Redis, reply: str) -> BaseException:
    return await _pipelined(client, reply, raising=True, transaction=False)


async def transaction_raised(client: aioredis.Redis, reply: str) -> BaseException:
    return await _pipelined(client, reply, raising=True, transaction=True)


async def sync_pipeline_raised(client: aioredis.Redis, reply: str) -> BaseException:
    """The blocking client's pipeline (as the cluster pipelines): the reply's text, not a repr."""
    kwargs = client.connection_pool.connection_kwargs
    sync = redis.Redis(host=kwargs["host"], port=kwargs["port"])
    try:
        with sync.pipeline(transaction=False) as pipe:
            pipe.set("before", 1)
            pipe.eval(script(reply), 0)
            pipe.execute()
    except redis.exceptions.RedisError as exc:
        return exc
    finally:
        sync.close()
    raise AssertionError("no error")


DELIVERIES = [raised, held, pipeline_raised, transaction_raised, sync_pipeline_raised]


@pytest_asyncio.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    found = connect(redis_url)
    yield found
    await found.aclose()


@pytest.mark.parametrize("deliver", DELIVERIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("code", TRANSIENT)
async def test_a_transient_reply_is_an_outage_however_it_comes(
    client: aioredis.Redis, code: str, deliver: Deliver
) -> None:
    error = await deliver(client, f"{code} the text of the reply")
    assert is_transient(error)
    mapped = hookbus_error(error)
    assert isinstance(mapped, BusUnavailable)


@pytest.mark.parametrize("deliver", DELIVERIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("code", FOR_GOOD)
async def test_a_refusal_for_good_keeps_its_code_however_it_comes(
    client: aioredis.Redis, code: str, deliver: Deliver
) -> None:
    error = await deliver(client, f"{code} the text of the reply")
    assert not is_transient(error)
    mapped = hookbus_error(error)
    assert isinstance(mapped, RedisCommandError)
    assert mapped.code == code


async def test_the_reply_is_read_out_of_a_pipeline_error(client: aioredis.Redis) -> None:
    """Whatever the failed command's arguments say, the reply is what follows redis-py's wrapping."""
    async with client.pipeline(transaction=False) as pipe:
        pipe.eval(script("MISCONF disk full"), 0, "of pipeline caused error: ('ERR not this',)")
        with pytest.raises(redis.exceptions.ResponseError) as caught:
            await pipe.execute()
    assert str(caught.value).startswith("Command # 1 (EVAL ")
    assert error_reply(caught.value) == "MISCONF disk full"
    assert is_transient(caught.value)


def test_a_code_inside_the_text_is_no_code() -> None:
    assert not is_transient(redis.exceptions.ResponseError("ERR key not-LOADING here"))
    assert not is_transient(redis.exceptions.ResponseError("ERR BUSYGROUP MISCONF"))
    # ...but a script's failed call and an aborted MULTI carry the code of the reply inside.
    assert is_transient(redis.exceptions.ResponseError("ERR Error running script: @user_script: 1: -MISCONF x"))
    assert is_transient(redis.exceptions.ExecAbortError("Transaction discarded because of: OOM command not allowed"))
