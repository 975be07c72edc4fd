"""The Lua that changes a session's state, run by the settle script in the step that writes the
event's record (:data:`bus.stream.settle.SETTLE`): a re-delivered event, whose record is written
already, changes nothing again, and an event whose dispatcher died changes it when the claiming
dispatcher settles it.

``apply_session(state, sessions, ops, expected, ttl_ms, max_sessions, now_ms, pending, entry, known)``:

* ``expected``: the state's version the decision read (``''``: it read none). When the state
  has another version now, another event of the session settled meanwhile; nothing is written
  and the function returns ``false`` and the state as it is (JSON: the fields and values of
  ``{"s": [field, value, ...]}``), for the dispatcher to decide again on it. So two events of one session never
  both decide on the same state, and two calls cannot both take a budget's last unit.
* otherwise it applies ``ops`` (:func:`bus.session.effects.effects`, one per line), records when
  the session was first seen, bumps the version when something changed, lets the state live
  ``ttl_ms`` more, and keeps the session in the tenant's set ``sessions`` (scored by last use):
  past ``max_sessions`` the least recently used sessions' states are deleted. Returns ``true``
  and JSON ``{"e": how many it deleted, "s": the state now}``; or, when ``known`` (the
  ``<version>:<first seen>`` of the state the dispatcher decided on, ``''``: none) is the state's
  before the operations, ``{"e": ..., "n": now_ms}``: the dispatcher applies the operations to the
  state it knows at ``now_ms`` (:func:`bus.session.apply.apply_ops`, which does as this does) and
  reads no copy of the whole state.
* ``entry`` (when not ``''``): the event's tenant and agent counters still to count, added to the
  partition's sorted set ``pending`` (scored by now) in the same step: counted after the settle,
  and counted still if the dispatcher dies first (:mod:`workers.dispatcher.fleet`).
"""

from __future__ import annotations

from typing import Final

from bus.session.definitions import BUCKETS, FIRST_SEEN_FIELD, VERSION_FIELD

APPLY_LUA: Final = (
    """
local function apply_session(state, sessions, ops, expected, ttl_ms, max_sessions, now_ms, pending, entry, known)
  if expected ~= '' and (redis.call('HGET', state, 'VERSION') or '0') ~= expected then
    return false, cjson.encode({s = redis.call('HGETALL', state)})
  end
  local before = ''
  if known ~= '' then
    local got = redis.call('HMGET', state, 'VERSION', 'FIRST_SEEN')
    before = (got[1] or '0') .. ':' .. (got[2] or '')
  end
  if entry ~= '' then
    redis.call('ZADD', pending, now_ms, entry)
  end
  local changed = false
  for line in string.gmatch(ops, '[^\\n]+') do
    local op, field, arg = string.match(line, '^(%a) (%S+) ?(%d*)$')
    if op == 'S' then
      redis.call('HSET', state, field, now_ms)
    elseif op == 'D' then
      redis.call('HDEL', state, field)
    elseif op == 'I' then
      redis.call('HINCRBY', state, field, 1)
    elseif op == 'A' then
      redis.call('HINCRBY', state, field, arg)
    elseif op == 'M' then
      if tonumber(arg) > tonumber(redis.call('HGET', state, field) or '0') then
        redis.call('HSET', state, field, arg)
      end
    elseif op == 'Z' then
      redis.call('HSET', state, field, 0)
    elseif op == 'R' then
      local bucket = math.floor(tonumber(now_ms) / tonumber(arg))
      local slot = field .. ':' .. (bucket % (BUCKETS + 1))
      local prior = redis.call('HGET', state, slot) or ''
      local head = string.format('%d', bucket) .. ':'
      local count = 1
      if string.sub(prior, 1, #head) == head then
        count = tonumber(string.sub(prior, #head + 1)) + 1
      end
      redis.call('HSET', state, slot, head .. count)
    end
    changed = true
  end
  if not changed and redis.call('EXISTS', state) == 0 then
    return true, '{"e":0,"s":[]}'
  end
  redis.call('HSETNX', state, 'FIRST_SEEN', now_ms)
  if changed then
    redis.call('HINCRBY', state, 'VERSION', 1)
  end
  redis.call('PEXPIRE', state, ttl_ms)
  redis.call('ZADD', sessions, now_ms, state)
  redis.call('PEXPIRE', sessions, ttl_ms)
  local evicted = 0
  local over = redis.call('ZCARD', sessions) - tonumber(max_sessions)
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', sessions, over)
    for i = 1, #oldest, 2 do
      redis.call('DEL', oldest[i])
      evicted = evicted + 1
    end
  end
  if known ~= '' and before == known and redis.call('EXISTS', state) == 1 then
    return true, cjson.encode({e = evicted, n = now_ms})  -- the dispatcher applies ops to the state it knows
  end
  return true, cjson.encode({e = evicted, s = redis.call('HGETALL', state)})
end
""".replace("VERSION", VERSION_FIELD)
    .replace("FIRST_SEEN", FIRST_SEEN_FIELD)
    .replace("BUCKETS", str(BUCKETS))
)

__all__ = ["APPLY_LUA"]
