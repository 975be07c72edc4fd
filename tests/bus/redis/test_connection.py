"""bus.redis.connection: clients pack commands with hiredis, byte for byte as redis-py would; errors
are mapped to BusUnavailable with a message that says what happened."""

from __future__ import annotations

import enum
import socket
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.exceptions
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection

from bus.errors import BusUnavailable
from bus.hooks.decisions import RecordOutcome
from bus.redis.connection import TCP_KEEPALIVE_OPTIONS, connect, hiredis_packing, redis_errors
from hookbus.platform.redis_server import EmbeddedRedis

pytestmark = pytest.mark.timeout(30)


class IntFlag(enum.IntEnum):
    A = 1


ARGS: list[tuple[Any, ...]] = [
    ("SET", "k", "v"),
    ("CONFIG GET", "maxmemory"),  # two words in the command name: two arguments
    (b"CLIENT SETNAME", b"x"),
    ("XADD", b"s", "MAXLEN", "~", 1000, "*", b"m", b"\x00\xff" * 5000, "p", "é ünï"),
    ("EVALSHA", "a" * 40, 2, "k1", "k2", -5, 0, 2**70, b""),
    ("SET", "k", 1.5),  # a float: redis-py's own packing
    ("SET", RecordOutcome.DECIDED, IntFlag.A),  # a StrEnum is its value; an int subclass goes to redis-py
    ("SET", "k", memoryview(b"abc")),
]


@pytest.mark.parametrize("args", ARGS, ids=lambda args: str(args[0]))
def test_packing_matches_redis_py(args: tuple[Any, ...]) -> None:
    def packed(connection: AbstractConnection) -> bytes:
        return b"".join(bytes(chunk) for chunk in connection.pack_command(*args))

    assert packed(hiredis_packing(Connection)()) == packed(Connection())


def test_a_bool_is_still_refused() -> None:
    with pytest.raises(Exception, match="bool"):
        hiredis_packing(Connection)().pack_command("SET", "k", True)


def test_each_scheme_keeps_its_connection_class() -> None:
    for url, base in (
        ("redis://127.0.0.1:1", Connection),
        ("rediss://127.0.0.1:1", SSLConnection),
        ("unix:///tmp/none.sock", UnixDomainSocketConnection),
    ):
        cls = connect(url).connection_pool.connection_class
        assert issubclass(cls, base) and cls is hiredis_packing(base) is hiredis_packing(cls)


async def test_values_round_trip_through_a_real_redis(redis_url: str) -> None:
    client = connect(redis_url)
    try:
        values: list[Any] = [b"\x00\xff" * 4000, "é ünï", 2**62, -7, 1.25, b""]
        async with client.pipeline(transaction=False) as pipe:
            for n, value in enumerate(values):
                pipe.set(f"test-connection:{n}", value)
            for n in range(len(values)):
                pipe.get(f"test-connection:{n}")
            replies = await pipe.execute()
        assert replies[len(values) :] == [
            b"\x00\xff" * 4000,
            "é ünï".encode(),
            b"4611686018427387904",
            b"-7",
            b"1.25",
            b"",
        ]
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (TimeoutError(), "timed out"),  # a deadline ran out: the builtin error has no message
        (ConnectionRefusedError(), "ConnectionRefusedError"),
        (redis.exceptions.ConnectionError("Connection reset by peer"), "Connection reset by peer"),
    ],
)
def test_an_outage_says_what_happened(error: Exception, said: str) -> None:
    with pytest.raises(BusUnavailable) as raised:
        with redis_errors("redis://:secret@127.0.0.1:6390/0"):
            raise error
    assert str(raised.value).endswith(f": {said}")
    assert "secret" not in str(raised.value)
    assert raised.value.__cause__ is error


async def test_tcp_connections_notice_a_vanished_peer_in_seconds(private_redis: EmbeddedRedis) -> None:
    """Keepalive probes, and a bound on unacknowledged data, on every TCP connection to Redis."""
    client = connect(private_redis.url)
    try:
        await client.ping()
        connection = await client.connection_pool.get_connection()
        try:
            sock = connection._writer.transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            for option, value in TCP_KEEPALIVE_OPTIONS.items():
                assert sock.getsockopt(socket.IPPROTO_TCP, option) == value
        finally:
            await client.connection_pool.release(connection)
    finally:
        await client.aclose()
    if sys.platform == "linux":
        assert socket.TCP_USER_TIMEOUT in TCP_KEEPALIVE_OPTIONS


@pytest.mark.system
async def test_a_unix_socket_gets_no_tcp_options(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path / "redis", persistent=False) as server:
        assert server.url.startswith("unix:")
        client = connect(server.url)
        try:
            assert await client.ping()
        finally:
            await client.aclose()
