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

Redis 6.2 (the embedded Redis of ``hookbus up``) has no counters: nothing is counted there, and
that is said once per process in a warning. What 6.2 can show is said instead: each group whose
last delivered entry is older than the log's first (retention trimmed past where it read), and
that has read something, is named in a warning once until it reads past that point again. Such a
group has at least the whole retained log unread; how many records, if any, were trimmed
between its last read and the log's first entry, 6.2 cannot tell.
"""

from __future__ import annotations

import logging
from typing import Final

import redis.asyncio as aioredis

from bus.redis.keys import Keyspace

logger = logging.getLogger("hookbus.audit.trimmed")

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
local last = stream['last-generated-id']
local first = stream['first-entry'] and stream['first-entry'][1] or nil
if not added then
  -- Redis 6.2: no counters. '!', then the groups that read something and are behind the first entry.
  local behind = {'!'}
  for _, flat in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
    local group = map(flat)
    local delivered = group['last-delivered-id']
    if first and delivered ~= '0-0' and before(delivered, first) then
      table.insert(behind, group['name'])
      table.insert(behind, delivered)
      table.insert(behind, first)
    end
  end
  return behind
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


class _Without:
    """What was said about a Redis without stream counters (once per process, and per group behind)."""

    said = False
    behind: set[tuple[str, str]] = set()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def count_trimmed_unread(redis: aioredis.Redis, keys: Keyspace) -> dict[str, int]:
    """Records of every partition's log trimmed before each group read them, since the last count
    (by group name; groups that lost none are absent). On Redis 6.2: nothing, and warnings instead."""
    counts: dict[str, int] = {}
    behind: set[tuple[str, str]] = set()
    for log in keys.decision_logs:
        answer = await redis.eval(COUNT_TRIMMED, 1, log)  # type: ignore[misc]
        if answer and _text(answer[0]) == "!":
            _without_counters(log, answer[1:], behind)
            continue
        for index in range(0, len(answer or ()), 2):
            name = _text(answer[index])
            counts[name] = counts.get(name, 0) + int(answer[index + 1])
    _Without.behind = behind
    return counts


def _without_counters(log: str, answer: list[object], behind: set[tuple[str, str]]) -> None:
    """Say that a Redis without counters counts nothing (once), and name each group newly behind the log's retention."""
    if not _Without.said:
        _Without.said = True
        logger.warning(
            "this Redis has no stream counters (Redis >= 7.0 has them): decision-log records trimmed "
            "before an audit group read them are not counted (hookbus_audit_trimmed_unread_total stays 0); "
            "a group behind the log's retention is named instead"
        )
    for index in range(0, len(answer), 3):
        name, delivered, first = (_text(value) for value in answer[index : index + 3])
        behind.add((log, name))
        if (log, name) not in _Without.behind:
            logger.warning(
                "audit group %s is behind the retention of %s: it last read %s, the log now starts at %s; "
                "records between them, if any, were trimmed before it read them (this Redis cannot count them)",
                name,
                log,
                delivered,
                first,
            )


__all__ = ["COUNT_TRIMMED", "count_trimmed_unread"]
