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
is counted from then on only. Redis 6.2 has no counters: nothing is counted there.
"""

from __future__ import annotations

from typing import Final

import redis.asyncio as aioredis

from bus.redis.keys import Keyspace

#: KEYS[1]: a decision log. Answers ``{group, trimmed unread, ...}`` for the groups that lost some.
COUNT_TRIMMED: Final = """
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
local stream = map(redis.call('XINFO', 'STREAM', KEYS[1]))
local added = stream['entries-added']
if not added then return {} end
local gone = added - stream['length']
local last = stream['last-generated-id']
local first = stream['first-entry'] and stream['first-entry'][1] or nil
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


async def count_trimmed_unread(redis: aioredis.Redis, keys: Keyspace) -> dict[str, int]:
    """Records of every partition's log trimmed before each group read them, since the last count
    (by group name; groups that lost none are absent)."""
    counts: dict[str, int] = {}
    for log in keys.decision_logs:
        answer = await redis.eval(COUNT_TRIMMED, 1, log)  # type: ignore[misc]
        for index in range(0, len(answer or ()), 2):
            name = answer[index].decode() if isinstance(answer[index], bytes) else str(answer[index])
            counts[name] = counts.get(name, 0) + int(answer[index + 1])
    return counts


__all__ = ["COUNT_TRIMMED", "count_trimmed_unread"]
