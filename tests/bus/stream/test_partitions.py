"""Partitions: a session's partition, the layout every node agrees on, merged logs."""

from __future__ import annotations

import pytest
from redis.crc import key_slot

from bus.errors import ConfigError
from bus.redis.connection import connect
from bus.redis.entries import entry_order
from bus.redis.keys import Keyspace, partition_tags
from bus.runtime.settings import Settings, parse_partitions
from bus.stream.partitions import bus_keyspace, claim_layout


def test_one_partition_keeps_every_session_in_partition_zero() -> None:
    keys = Keyspace()
    assert {keys.partition_of(f"s-{i}") for i in range(100)} == {0}


def test_sessions_spread_over_partitions_and_keep_theirs() -> None:
    keys = Keyspace(partitions=4)
    seen = {keys.partition_of(f"session-{i}") for i in range(200)}
    assert seen == {0, 1, 2, 3}
    assert keys.partition_of("session-7") == Keyspace(partitions=4).partition_of("session-7")


def test_a_partitions_keys_share_one_hash_tag() -> None:
    keys = Keyspace(partitions=8)
    for part in range(8):
        names = [
            keys.blocking_stream(part),
            keys.events_stream(part),
            keys.dead_letter_stream(part),
            keys.decision_log(part),
            keys.outcome("e-1", part),
        ]
        assert len({key_slot(name.encode()) for name in names}) == 1
    assert len({key_slot(log.encode()) for log in keys.decision_logs}) == 8
    assert Keyspace().blocking_stream() == "hookbus:{p0}:stream:blocking"  # one partition: the plain tag


def redis_cli_masters(masters: int) -> list[range]:
    """The slot ranges ``redis-cli --cluster create`` gives ``masters`` masters (its own arithmetic)."""
    per_node, ranges, first, cursor = 16384 / masters, [], 0, 0.0
    for index in range(masters):
        last = round(cursor + per_node - 1)
        if last > 16384 or index == masters - 1:
            last = 16383
        ranges.append(range(first, last + 1))
        first, cursor = last + 1, cursor + per_node
    return ranges


@pytest.mark.parametrize("masters", [1, 2, 3, 4, 5, 6, 8, 16])
def test_partitions_spread_evenly_over_masters_that_split_the_slots(masters: int) -> None:
    for partitions in (masters, 2 * masters, 4 * masters):
        slots = [key_slot(tag.encode()) for tag in partition_tags(partitions)]
        held = [sum(slot in owned for slot in slots) for owned in redis_cli_masters(masters)]
        assert held == [partitions // masters] * masters, (partitions, held)


def test_control_keys_changed_together_share_one_tag() -> None:
    keys = Keyspace("acme:")
    assert {
        keys.tokens.split("}")[0],
        keys.token_lookup("x").split("}")[0],
        keys.policy_current.split("}")[0],
        keys.policy_version("v").split("}")[0],
        keys.policy_versions("org").split("}")[0],
    } == {"{acme"}


@pytest.mark.parametrize(("spec", "expected"), [("0-3", (0, 1, 2, 3)), ("5", (5,)), ("0-1,4,6-7", (0, 1, 4, 6, 7))])
def test_partition_lists(spec: str, expected: tuple[int, ...]) -> None:
    assert parse_partitions(spec) == expected


@pytest.mark.parametrize("spec", ["", "a", "3-1", "-2", "1,,x"])
def test_bad_partition_lists_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError, match="partitions"):
        parse_partitions(spec)


def test_cluster_flag_marks_the_url() -> None:
    settings = Settings.from_env({"HOOKBUS_REDIS_URL": "redis://:pw@10.0.0.1:7000/0", "HOOKBUS_REDIS_CLUSTER": "1"})
    assert settings.redis_url == "redis+cluster://:pw@10.0.0.1:7000/0"
    assert "pw" not in repr(settings)
    with pytest.raises(ConfigError, match="HOOKBUS_QUEUE_REDIS_URL"):
        _ = settings.queue_url
    queued = Settings.from_env(
        {
            "HOOKBUS_REDIS_URL": "redis://10.0.0.1:7000",
            "HOOKBUS_REDIS_CLUSTER": "yes",
            "HOOKBUS_QUEUE_REDIS_URL": "redis://10.0.0.9:6379",
        }
    )
    assert queued.queue_url == "redis://10.0.0.9:6379"
    assert Settings.from_env({"HOOKBUS_REDIS_URL": "redis://h:1"}).queue_url == "redis://h:1"


def test_entry_ids_order_as_time() -> None:
    assert entry_order("12-3") == (12, 3)
    assert sorted([b"3-0", b"10-0", b"3-2"], key=entry_order) == [b"3-0", b"3-2", b"10-0"]


async def test_the_first_node_fixes_the_layout_and_another_count_is_refused(redis_url: str) -> None:
    redis = connect(redis_url)
    try:
        assert (await bus_keyspace(redis, Keyspace())).partitions == 1  # nothing recorded yet
        await claim_layout(redis, Keyspace(partitions=4))
        await claim_layout(redis, Keyspace(partitions=4))  # the same count: fine
        assert (await bus_keyspace(redis, Keyspace())).partitions == 4
        with pytest.raises(ConfigError, match=r"the bus has 4 partitions.*says hookbus\.streams\.partitions: 2"):
            await claim_layout(redis, Keyspace(partitions=2))
    finally:
        await redis.aclose()


def test_entry_ids_are_checked_as_redis_writes_them() -> None:
    from bus.redis.entries import entry_ms, is_entry_id

    assert is_entry_id("1700000000000-3") and entry_ms(b"1700000000000-3") == 1700000000000
    assert not any(map(is_entry_id, ["1700000000000", "1-2-3", "-1", "1-2\n", "1" * 21 + "-0", "yesterday"]))


def test_a_comma_list_is_stripped_values_in_order_from_one_or_several() -> None:
    from bus.runtime.settings import comma_list, parse_partitions

    assert comma_list(" a, b,,a ") == ["a", "b", "a"]
    assert comma_list(["a,b", " c", ""]) == ["a", "b", "c"]
    assert comma_list(None) == []
    assert parse_partitions("0-2, 5,") == (0, 1, 2, 5)
