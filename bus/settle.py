"""Settling an event: one atomic step decides what the agent got and what the log says.

A blocking event has two parties that may answer it: the dispatcher (with a decision) and
the gateway (fail-open, when the deadline passes first). Without coordination the decision
log can say ``decided`` while the agent received ``{}``: a reply published while the
gateway's reader was reconnecting, or one that arrived a millisecond late. So every event
has a small *outcome key* (``{p}outcome:{event_id}``), and each party settles it with a
Lua script, atomically:

* the dispatcher's :data:`SETTLE` appends the decision-log record and acknowledges the work
  entry in the same step. Before the deadline it stores the reply (``D<reply>``),
  publishes it to the waiting gateway and the record says ``decided``; past the deadline,
  or when the gateway got there first (``G<reason>``), nothing is published and the record
  says ``fail-open`` with the reason;
* the gateway's :data:`CLAIM` runs when its deadline passes: it returns a stored reply (the
  decision was made in time; the gateway answers with it), or marks the event ``G<reason>``
  and answers fail-open.

The record is written before the acknowledgement, in one script, so a crash leaves either
both or neither: a re-delivered entry is written once (a second settle sees ``D``/``F``/``R``
and only acknowledges). The first write of the script is the XADD, because Redis checks
``maxmemory`` only before a script's first write: under OOM nothing is written at all, and
the entry stays pending until a retry succeeds.

The first settle also queues the event's async hook jobs (:mod:`workers.queue`), after the
XADD, as arq's own enqueue would: a job whose ``arq:job:<id>`` or ``arq:result:<id>`` exists
is skipped; past ``maxQueued`` jobs in the queue (``ZCARD``) it is dropped; otherwise its
record is written (``PSETEX``) and it joins the queue (``ZADD``, score: now in ms, arq's
score for a job not deferred). So the jobs are queued exactly when the record is written:
a re-delivered event queues nothing again, with no arq result kept to tell. The script
returns how many jobs it queued and dropped. :data:`QUEUE_JOBS` is the same step alone, for
a queue on a Redis of its own.

Key values: ``G<reason>`` gateway answered fail-open, not logged yet; ``D<reply>`` decided
and logged; ``F<reason>`` logged as fail-open; ``R`` a non-blocking event, logged.
"""

from __future__ import annotations

from typing import Final

#: How long an outcome key outlives its event's deadline (and a non-blocking event's
#: de-duplication window), in milliseconds.
OUTCOME_GRACE_MS: Final = 10_000

#: Arguments of one job after the fixed ones (:data:`QUEUE_JOBS_LUA`): id, lifetime ms, maxQueued, record.
JOB_ARGS: Final = 4

# Queues the jobs named by KEYS[first_key..] (job key, result key per job) and ARGV[first_arg..]
# (JOB_ARGS per job) on the arq queue ``queue``, as arq's enqueue does; returns queued, dropped.
QUEUE_JOBS_LUA: Final = """
local function queue_jobs(queue, first_key, first_arg, now_ms)
  local queued, dropped, depth = 0, 0, nil
  local arg = first_arg
  for k = first_key, #KEYS - 1, 2 do
    if redis.call('EXISTS', KEYS[k], KEYS[k + 1]) == 0 then
      depth = depth or redis.call('ZCARD', queue)
      if depth >= tonumber(ARGV[arg + 2]) then
        dropped = dropped + 1
      else
        redis.call('PSETEX', KEYS[k], ARGV[arg + 1], ARGV[arg + 3])
        redis.call('ZADD', queue, now_ms, ARGV[arg])
        depth = depth + 1
        queued = queued + 1
      end
    end
    arg = arg + JOB_ARGS
  end
  return queued, dropped
end
""".replace("JOB_ARGS", str(JOB_ARGS))

# KEYS: outcome, decision log, work stream, then (only with jobs) the arq queue, and a job key
#       and result key per job
# ARGV: entry id, group, log maxlen, record meta, hook input, deadline ms (0: non-blocking),
#       reply (may be empty), outcome if decided, fail-open reason if decided, forced reason,
#       reply channel, publish command (PUBLISH, or SPUBLISH for a shard channel on a cluster),
#       then JOB_ARGS per job
# Returns {1, outcome, jobs queued, jobs dropped} when it wrote the record, else {0, state}.
SETTLE: Final = QUEUE_JOBS_LUA + """
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local prior = redis.call('GET', KEYS[1])
if prior then
  local state = string.sub(prior, 1, 1)
  if state == 'D' or state == 'F' or state == 'R' then
    redis.call('XACK', KEYS[3], ARGV[2], ARGV[1])
    return {0, state}
  end
end
local deadline = tonumber(ARGV[6])
local outcome, reason, value
if deadline == 0 then
  outcome, reason, value = ARGV[8], ARGV[9], 'R'
elseif prior then
  outcome, reason = 'fail-open', string.sub(prior, 2)
elseif ARGV[10] ~= '' then
  outcome, reason = 'fail-open', ARGV[10]
elseif now_ms >= deadline or ARGV[7] == '' then
  outcome, reason = 'fail-open', 'timeout'
else
  outcome, reason, value = ARGV[8], ARGV[9], 'D' .. ARGV[7]
end
if value == nil then
  value = 'F' .. reason
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 'r', ARGV[4], 'in', ARGV[5], 'o', outcome, 'fo', reason)
redis.call('SET', KEYS[1], value, 'PX', math.max(deadline - now_ms, 0) + GRACE_MS)
redis.call('XACK', KEYS[3], ARGV[2], ARGV[1])
if string.sub(value, 1, 1) == 'D' then
  redis.call(ARGV[12], ARGV[11], ARGV[7])
end
local queued, dropped = 0, 0
if #KEYS > 3 then
  queued, dropped = queue_jobs(KEYS[4], 5, 13, string.format('%d', now_ms))
end
return {1, outcome, queued, dropped}
""".replace("GRACE_MS", str(OUTCOME_GRACE_MS))

# KEYS: the arq queue, then a job key and result key per job; ARGV: JOB_ARGS per job.
# Returns {jobs queued, jobs dropped}.
QUEUE_JOBS: Final = QUEUE_JOBS_LUA + """
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local queued, dropped = queue_jobs(KEYS[1], 2, 1, string.format('%d', now_ms))
return {queued, dropped}
"""

# KEYS: outcome; ARGV: fail-open reason, ttl ms. Returns the stored reply, or nil (fail open).
CLAIM: Final = """
local prior = redis.call('GET', KEYS[1])
if prior then
  if string.sub(prior, 1, 1) == 'D' then
    return string.sub(prior, 2)
  end
  return false
end
redis.call('SET', KEYS[1], 'G' .. ARGV[1], 'PX', ARGV[2])
return false
"""

__all__ = ["CLAIM", "JOB_ARGS", "OUTCOME_GRACE_MS", "QUEUE_JOBS", "QUEUE_JOBS_LUA", "SETTLE"]
