"""Counting what an audit consumer group read of the decision log, where Redis does not (6.2).

Redis >= 7 counts, per consumer group, the entries the group has read (``XINFO GROUPS``
``entries-read``); :mod:`bus.decisionlog.trimmed` compares that with how far the group got to
tell the records retention trimmed before the group read them. Redis 6.2 (the embedded Redis of
``hookbus up``) keeps no such counter, so there the audit followers read new records in a
transaction that also adds what the ``XREADGROUP ... >`` (without ``BLOCK``) delivered to the
group's count in ``{p}{tN}:decisions:read`` (:class:`CountedReads`). Waiting for new records is a
plain ``XREAD BLOCK`` from the group's last delivered entry, then the transaction again.

A group's count is ``<records> <entry id>``: the records of the log up to that entry that the
group read or that were counted as trimmed unread, and the group's last delivered entry when the
count was made. Each record's place in its partition's log is its sequence number in the
partition's hash chain (the record's ``ch`` field, ``partition:seq:prev:hash``: every record is
linked as it is appended, :mod:`bus.decisionlog.chain`), so a record's ``seq`` is how many
records the log had when it was added. A count whose entry id is not the group's last delivered
one (the group read without counting since: another client's ``XREADGROUP``) is not trusted:
the next counted read sets it anew to the ``seq`` of the last record it delivered (everything
before is taken as read, as Redis 7 estimates a group's counter it lost), and so does a group's
first counted read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

import redis.asyncio as aioredis

from bus.decisionlog.reader import RawEntry
from bus.redis.connection import read_streams, transaction
from bus.redis.keys import Keyspace
from bus.redis.lean import LeanLink

#: Lua: ``seq_of(flat fields)``, the sequence number of a record in its chain (nil: not linked), and
#: ``group_info(stream, name)``, a consumer group's ``XINFO GROUPS`` item as a table (nil: no such group).
SEQ_LUA: Final = """
local function seq_of(fields)
  for i = #fields - 1, 1, -2 do
    if fields[i] == 'ch' then
      return tonumber(string.match(fields[i + 1], '^%d+:(%d+):'))
    end
  end
  return nil
end
local function group_info(key, name)
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local group = {}
    for i = 1, #flat, 2 do group[flat[i]] = flat[i + 1] end
    if group['name'] == name then return group end
  end
  return nil
end
"""

_GROUP_LUA: Final = """
local group = redis.call('EXISTS', KEYS[1]) == 1 and group_info(KEYS[1], ARGV[1]) or nil
if not group then
  return redis.error_reply('NOGROUP No such key ' .. KEYS[1] .. ' or consumer group ' .. ARGV[1])
end
local count, at = string.match(redis.call('HGET', KEYS[2], ARGV[1]) or '', '^(%d+) (.+)$')
"""

#: Before the read (KEYS: a decision log, its read counts; ARGV: the group): answers the group's last
#: delivered id, and drops the group's count when it was made at another entry.
BEFORE_READ: Final = (
    SEQ_LUA
    + _GROUP_LUA
    + """
local before = group['last-delivered-id']
if count and at ~= before then redis.call('HDEL', KEYS[2], ARGV[1]) end
return before
"""
)

#: After the read (the same keys and argument): adds what it delivered to the group's count. The
#: records delivered are those the log holds after the entry of the count up to the group's last
#: delivered one, whose sequence numbers run on without a gap (retention trims the oldest only).
#: No count: it is set to the last delivered record's sequence number. Answers the records counted.
AFTER_READ: Final = (
    SEQ_LUA
    + _GROUP_LUA
    + """
local after = group['last-delivered-id']
if at == after then return 0 end
local last = redis.call('XRANGE', KEYS[1], after, after)
local last_seq = last[1] and seq_of(last[1][2])
local read, delivered = nil, 0
if count and last_seq then
  local first = redis.call('XRANGE', KEYS[1], '(' .. at, after, 'COUNT', 1)
  local first_seq = first[1] and seq_of(first[1][2])
  if first_seq then
    delivered = last_seq - first_seq + 1
    read = tonumber(count) + delivered
  end
else
  read = last_seq
end
if read then
  redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', read) .. ' ' .. after)
else
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return delivered
"""
)


async def has_stream_counters(redis: aioredis.Redis, log: str) -> bool:
    """Whether the Redis holding ``log`` (an existing stream) counts entries added and read (Redis >= 7)."""
    info = await redis.xinfo_stream(log)
    return "entries-added" in info or b"entries-added" in info


class CountedReads:
    """New records of each partition's log for one consumer of ``group``, counted as they are read;
    for a Redis without stream counters.

    A read is one transaction (``MULTI``): :data:`BEFORE_READ`, ``XREADGROUP ... COUNT n ... >``,
    :data:`AFTER_READ`. The records themselves come as ``XREADGROUP`` sends them, never through a
    script. ``link`` (on a single Redis): each partition's :class:`~bus.redis.lean.LeanLink`, which
    frames the transaction with hiredis (fields as ``[name, value, ...]``); without it redis-py
    sends it (fields as a mapping), on a cluster over a connection of its own to the slot's node.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        keys: Keyspace,
        group: str,
        consumer: str,
        link: Callable[[int], LeanLink] | None = None,
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.group = group
        self.consumer = consumer
        self.link = link
        #: Each partition's last delivered entry after a read that took all there was.
        self._caught_up: dict[int, str] = {}

    async def read_once(self, partition: int, count: int) -> tuple[list[RawEntry], str]:
        """What ``XREADGROUP ... COUNT count ... >`` delivers now, and the group's last delivered entry
        before it (where to wait from when that is nothing)."""
        log, reads = self.keys.decision_log(partition), self.keys.decision_reads(partition)
        if self.link is not None:
            xread: list[bytes | str | int] = ["XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", count]
            commands: list[list[bytes | str | int]] = [
                ["MULTI"],
                ["EVAL", BEFORE_READ, 2, log, reads, self.group],
                [*xread, "STREAMS", log, ">"],
                ["EVAL", AFTER_READ, 2, log, reads, self.group],
                ["EXEC"],
            ]
            replies = await self.link(partition).execute(commands)
            for reply in (*replies, *(replies[-1] or ())):
                if isinstance(reply, Exception):  # NOGROUP: raised as redis-py raises it
                    raise reply
            before, found, _ = replies[-1]
        else:
            async with transaction(self.redis, log) as pipe:
                pipe.eval(BEFORE_READ, 2, log, reads, self.group)
                pipe.xreadgroup(self.group, self.consumer, {log: ">"}, count=count)
                pipe.eval(AFTER_READ, 2, log, reads, self.group)
                before, found, _ = await pipe.execute()
        entries: list[RawEntry] = [entry for _, stream_entries in found or () for entry in stream_entries]
        return entries, before.decode() if isinstance(before, bytes) else str(before)

    async def read(self, partition: int, count: int, block_ms: int | None) -> list[RawEntry]:
        """New records of ``partition`` for this consumer, waiting up to ``block_ms`` (0: for ever;
        None: not at all) for some to come (an empty list when none did).

        After a read that took all there was, the next one waits first: a trickle costs one ``XREAD``
        and one transaction a wake-up, not a transaction more that finds nothing."""
        loop = asyncio.get_running_loop()
        until = None if not block_ms else loop.time() + block_ms / 1000
        after = self._caught_up.pop(partition, None) if block_ms is not None else None
        while True:
            if after is not None:
                wait_ms = 0 if until is None else int((until - loop.time()) * 1000)
                if until is not None and wait_ms <= 0:
                    return []
                # Another consumer of the group may take what this wakes for: the read finds nothing, waits again.
                await self._wait(partition, after, wait_ms)
            found, after = await self.read_once(partition, count)
            if len(found) < count:
                self._caught_up[partition] = found[-1][0].decode() if found else after
            if found or block_ms is None:
                return found

    async def _wait(self, partition: int, after: str, block_ms: int) -> None:
        """Until ``partition``'s log has an entry after ``after``, or ``block_ms`` passed (0: for ever)."""
        log = self.keys.decision_log(partition)
        if self.link is None:
            await read_streams(self.redis, {log: after}, count=1, block_ms=block_ms)
            return
        (reply,) = await self.link(partition).execute([["XREAD", "COUNT", 1, "BLOCK", block_ms, "STREAMS", log, after]])
        if isinstance(reply, Exception):
            raise reply


__all__ = ["AFTER_READ", "BEFORE_READ", "SEQ_LUA", "CountedReads", "has_stream_counters"]
