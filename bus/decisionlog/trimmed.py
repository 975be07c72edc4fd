"""Counting decision-log records that retention trimmed before an audit consumer group read them.

A stream on Redis 7 counts every entry ever added (``entries-added``) and, per consumer group,
the entries the group has read (``entries-read``). Trimming removes the oldest entries, so
when a group's last delivered entry is older than the stream's first entry, every entry the
stream no longer holds was either read by the group or trimmed unread: ``entries-added -
length - entries-read`` of them were trimmed unread. When a group has read up to the stream's
last entry, ``entries-added - entries-read`` is the count (Redis 7.0 and 7.2 do not move a
group's read counter past the entries trimmed before it reads on, so a gap crossed between
two looks shows there).

:data:`COUNT_TRIMMED` does that for every group of one partition's log, in one script (the
read and the correction are atomic), and then sets the group's read counter to the count
just established (``XGROUP SETID ... ENTRIESREAD``, at the same last delivered id): the
records it reported are not reported again, by this process or another gateway, and
``XINFO GROUPS`` reports the group's lag right from then on. A group that has not read yet
(no counter) is set the same way and reports nothing: what was trimmed before it first read
is counted from then on only.

Redis 6.2 (the embedded Redis of ``hookbus up``) has no counters; there the audit followers count
what each group reads themselves, in the step that reads it (:mod:`bus.decisionlog.readcount`:
``{p}{tN}:decisions:read`` holds ``<records> <entry id>`` per group), and every record's
sequence number in its partition's hash chain tells its place in the log. A group's place is then
the sequence number of its last delivered record while the log still holds it, or the first
retained record's less one once retention trimmed past it (every record before that one is gone),
or the chain head's when the log holds nothing. What the group read, and what was counted before,
is its count; the difference was trimmed before the group read it. The script reports it and
sets the count to the group's place at its last delivered entry, atomically as on Redis 7, so
nothing is counted twice. This is exact at every look (Redis 7 counts a group whose last
delivered entry lies inside the retained log only once it reaches the log's end or falls behind
its first entry). A group with no count yet, or whose count was made at another entry than its
last delivered one (it read without counting: an older follower, another client), is set to its
place and reports nothing; the count of a group that no longer exists is removed.
"""

from __future__ import annotations

from typing import Final

import redis.asyncio as aioredis

from bus.decisionlog.readcount import SEQ_LUA
from bus.redis.keys import Keyspace

#: KEYS: a decision log, its chain head, its read counts (the last two for Redis 6.2 only). Answers
#: ``{group, trimmed unread, ...}`` for the groups that lost some.
COUNT_TRIMMED: Final = (
    SEQ_LUA
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
local function map(flat)
  local found = {}
  for i = 1, #flat, 2 do found[flat[i]] = flat[i + 1] end
  return found
end
local function parts(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end
local function before(a, b)
  local a_ms, a_seq = parts(a)
  local b_ms, b_seq = parts(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end
-- Redis 6.2: places from the records' chain sequence numbers, counts from KEYS[3] (see the docstring).
local function count_by_seq(stream, first, last)
  local head = tonumber(string.match(redis.call('GET', KEYS[2]) or '', '^(%d+):'))
  local counts = map(redis.call('HGETALL', KEYS[3]))
  local out = {}
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local group = map(flat)
    local name, delivered = group['name'], group['last-delivered-id']
    local known = nil
    if not first then
      known = head or (last == '0-0' and 0 or nil)
    elseif before(delivered, first) then
      local seq = seq_of(stream['first-entry'][2])
      known = seq and seq - 1
    else
      local at = redis.call('XRANGE', KEYS[1], delivered, delivered)
      known = at[1] and seq_of(at[1][2])
    end
    local count, at = string.match(counts[name] or '', '^(%d+) (.+)$')
    counts[name] = nil
    local kept = count and at == delivered
    if known then
      count = tonumber(count)
      if kept and known > count then
        table.insert(out, name)
        table.insert(out, known - count)
      end
      if not kept or known ~= count then
        redis.call('HSET', KEYS[3], name, string.format('%d', known) .. ' ' .. delivered)
      end
    elseif count and not kept then
      redis.call('HDEL', KEYS[3], name)
    end
  end
  for name in pairs(counts) do redis.call('HDEL', KEYS[3], name) end
  return out
end
local stream = map(redis.call('XINFO', 'STREAM', KEYS[1]))
local added = stream['entries-added']
local last = stream['last-generated-id']
local first = stream['first-entry'] and stream['first-entry'][1] or nil
if not added then
  return count_by_seq(stream, first, last)
end
local gone = added - stream['length']
local out = {}
for _, flat in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local group = map(flat)
  local delivered = group['last-delivered-id']
  local read = group['entries-read']
  local known = nil
  if (first and before(delivered, first)) or (not first and before(delivered, last)) then
    known = gone
  elseif delivered == last then
    known = added
  end
  if known then
    if read and known > read then
      table.insert(out, group['name'])
      table.insert(out, known - read)
    end
    if read ~= known then
      redis.call('XGROUP', 'SETID', KEYS[1], group['name'], delivered, 'ENTRIESREAD', known)
    end
  end
end
return out
"""
)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def count_trimmed_unread(redis: aioredis.Redis, keys: Keyspace) -> dict[str, int]:
    """Records of every partition's log trimmed before each group read them, since the last count
    (by group name; groups that lost none are absent)."""
    counts: dict[str, int] = {}
    for partition in keys.all_partitions:
        log_keys = (keys.decision_log(partition), keys.decision_chain(partition), keys.decision_reads(partition))
        answer = await redis.eval(COUNT_TRIMMED, len(log_keys), *log_keys)  # type: ignore[misc]
        for index in range(0, len(answer or ()), 2):
            name = _text(answer[index])
            counts[name] = counts.get(name, 0) + int(answer[index + 1])
    return counts


__all__ = ["COUNT_TRIMMED", "count_trimmed_unread"]
