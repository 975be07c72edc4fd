"""Counting what an audit consumer group read of the decision log, where Redis does not (6.2).

Redis >= 7 counts, per consumer group, the entries the group has read (``XINFO GROUPS``
``entries-read``); :mod:`bus.decisionlog.trimmed` compares that with how far the group got to
tell the records retention trimmed before the group read them. Redis 6.2 (the embedded Redis of
``hookbus up``) keeps no such counter, so there the audit followers read new records through
:data:`COUNTED_READ`: one script does the ``XREADGROUP ... >`` (without ``BLOCK``) and adds what
it delivered to the group's count in ``{p}{tN}:decisions:read``, in the same atomic step. Waiting
for new records is a plain ``XREAD BLOCK`` from the group's last delivered entry, then the script
again (:class:`CountedReads`).

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
from typing import Any, Final

import redis.asyncio as aioredis

from bus.decisionlog.reader import RawEntry
from bus.redis.connection import read_streams
from bus.redis.keys import Keyspace

#: Lua: ``seq_of(flat fields)``, the sequence number of a record in its chain (nil: not linked).
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

#: KEYS: a decision log, its read counts (``{p}{tN}:decisions:read``). ARGV: group, consumer, count.
#: Answers ``{'', entries}`` (entries as ``XREADGROUP`` gives one stream's), or ``{last delivered id, {}}``
#: when there is nothing new (what to ``XREAD BLOCK`` from).
COUNTED_READ: Final = (
    SEQ_LUA
    + """
local group = redis.call('EXISTS', KEYS[1]) == 1 and group_info(KEYS[1], ARGV[1]) or nil
if not group then
  return redis.error_reply('NOGROUP No such key ' .. KEYS[1] .. ' or consumer group ' .. ARGV[1])
end
local before = group['last-delivered-id']
local reply = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', ARGV[3], 'STREAMS', KEYS[1], '>')
if not reply then return {before, {}} end
local entries = reply[1][2]
local last = entries[#entries]
local count, at = string.match(redis.call('HGET', KEYS[2], ARGV[1]) or '', '^(%d+) (.+)$')
local read = nil
if count and at == before then
  read = tonumber(count) + #entries
else
  read = seq_of(last[2])
end
if read then
  redis.call('HSET', KEYS[2], ARGV[1], string.format('%d', read) .. ' ' .. last[1])
else
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return {'', entries}
"""
)


async def has_stream_counters(redis: aioredis.Redis, log: str) -> bool:
    """Whether the Redis holding ``log`` (an existing stream) counts entries added and read (Redis >= 7)."""
    info = await redis.xinfo_stream(log)
    return "entries-added" in info or b"entries-added" in info


class CountedReads:
    """New records of each partition's log for one consumer of ``group``, counted as they are read
    (:data:`COUNTED_READ`); for a Redis without stream counters."""

    def __init__(self, redis: aioredis.Redis, keys: Keyspace, group: str, consumer: str) -> None:
        self.redis = redis
        self.keys = keys
        self.group = group
        self.consumer = consumer
        self._script = redis.register_script(COUNTED_READ)

    async def read_once(self, partition: int, count: int) -> tuple[list[RawEntry], str]:
        """What ``XREADGROUP ... COUNT count ... >`` delivers now (fields as ``[name, value, ...]``),
        and the group's last delivered entry when that is nothing."""
        keys = [self.keys.decision_log(partition), self.keys.decision_reads(partition)]
        mark, entries = await self._script(keys, [self.group, self.consumer, count])
        found: list[RawEntry] = [(entry_id, fields) for entry_id, fields in entries]
        return found, mark.decode() if isinstance(mark, bytes) else str(mark)

    async def read(self, partition: int, count: int, block_ms: int | None) -> list[RawEntry]:
        """New records of ``partition`` for this consumer, waiting up to ``block_ms`` (0: for ever;
        None: not at all) for some to come (an empty list when none did)."""
        loop = asyncio.get_running_loop()
        until = None if not block_ms else loop.time() + block_ms / 1000
        while True:
            found, after = await self.read_once(partition, count)
            if found or block_ms is None:
                return found
            wait_ms = 0 if until is None else int((until - loop.time()) * 1000)
            if until is not None and wait_ms <= 0:
                return []
            # Another consumer of the group may take what this wakes for: then the script finds nothing and waits again.
            await read_streams(self.redis, {self.keys.decision_log(partition): after}, count=1, block_ms=wait_ms)


def pairs(fields: Any) -> dict[bytes, bytes]:
    """A record's fields as ``[name, value, ...]`` made a mapping (as redis-py's ``XREADGROUP`` gives them)."""
    return dict(zip(fields[::2], fields[1::2], strict=True))


__all__ = ["COUNTED_READ", "SEQ_LUA", "CountedReads", "has_stream_counters", "pairs"]
