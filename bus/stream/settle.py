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
  says ``fail-open`` with the reason: in its ``o`` field and in its JSON (``r``), whose
  outcome the script rewrites (:meth:`~bus.stream.protocol.LogRecord.meta` writes it first);
* the gateway's :data:`CLAIM_FAIL_OPEN` runs when its deadline passes: it returns a stored reply (the
  decision was made in time; the gateway answers with it), or marks the event ``G<reason>``
  and answers fail-open.

A gateway that answered fail-open without settling the key (Redis could not be reached for the
append or for the claim) sends the event's entry again once Redis is back, with its reason
(*forced*): its settle writes the record as ``fail-open``. When the event was logged as
``decided`` meanwhile (its reply was published, and lost with the connection, just before
Redis went away), that settle writes a second record, ``fail-open``, and turns the key into
``F``: the event's last record says what the agent got.

A blocking event whose record takes a while (an input masked in a worker thread) is answered
before its record is ready: the dispatcher's :data:`ANSWER` runs as soon as the decision is
made and, if the key is unset and the deadline not passed, stores the reply as ``P<reply>``
(answered, record pending; it lives until :data:`ANSWERED_GRACE_MS` past the deadline, so a
re-delivery after an outage still finds it) and publishes it; otherwise it does
nothing (the gateway claimed first: the settle records fail-open as above). The later
:data:`SETTLE` takes ``P`` as "decided in time", whatever the clock says by then: it writes
the record as ``decided``, turns the key into ``D`` with the reply the agent got, queues the
jobs and acknowledges, and publishes nothing. The gateway's claim returns a ``P`` reply as it
does a ``D`` one (the forced settle of a gateway that could not claim logs ``fail-open``). So the
record still says what the agent got, one record per event: after a
crash between the two steps, the re-delivered entry's settle finds ``P``. Its record's
decision is the re-evaluation's, which may differ from the answered one when a handler is not
deterministic or the policy changed meanwhile; an entry re-delivered past its deadline is not
re-evaluated, and its record takes the decision and output from the stored reply. Under
``maxmemory`` :data:`ANSWER` writes and publishes nothing, and the settle answers as usual.
Events settled within their own step (every event with an input up to 64 KiB) never go
through ``P``.

The record is written before the acknowledgement, in one script, so a crash leaves either
both or neither: a re-delivered entry is written once (a second settle sees ``D``/``F``/``R``
and only acknowledges, re-publishing a stored reply still in time; a forced one on ``D`` is the
exception above). The outcome key lives until :data:`OUTCOME_GRACE_MS` past the deadline (past
the settle for a non-blocking event), so past the entry's append (its id's time) at least; a
settle later than that which finds no key also reads whether its entry is still pending: one
that is still in the stream and acknowledged was settled by another dispatcher (this one
stalled past the key's life), and the settle writes nothing and counts nothing in its session.
(Settles in time do not read it: an ``XPENDING`` costs Redis as much as ten ``GET`` calls.) Redis checks
``maxmemory`` only before a script's first write: under OOM nothing is written at all, and
the entry stays pending until a retry succeeds.

One :data:`SETTLE` call settles a batch of events (the dispatcher sends everything that
finished while its previous write was in flight, up to :data:`SETTLE_MAX_EVENTS`): the rules
above hold per event, the batch's replies to one gateway go out as one message (one sealed
reply per line, :mod:`bus.runtime.replykey`) and its
entries are acknowledged by one ``XACK`` per stream, so the cost per event falls with load.

The first settle also queues the event's async hook jobs (:mod:`workers.jobs.enqueue`), after the
XADD, as arq's own enqueue would: a job whose ``arq:job:<id>`` or ``arq:result:<id>`` exists
is skipped; past ``maxQueued`` jobs in the queue (``ZCARD``) it is dropped; otherwise its
record is written (``PSETEX``) and it joins the queue (``ZADD``, score: now in ms, arq's
score for a job not deferred). So the jobs are queued exactly when the record is written:
a re-delivered event queues nothing again, with no arq result kept to tell. The script
returns how many jobs it queued and dropped. :data:`QUEUE_JOBS` is the same step alone, for
a queue on a Redis of its own.

An event under a policy with session state (``hookbus.session``) also changes its session's
state in the step that writes its record (:mod:`bus.session.script`): its operations apply
exactly when its record is written. A blocking event still to be answered whose decision read
the state names the version it read; when another event of the session settled meanwhile, the
event is not settled at all (no record, no reply, no acknowledgement) and the script returns the
state as it is now, for the dispatcher to decide the event again on it.

Key values: ``G<reason>`` gateway answered fail-open, not logged yet; ``P<reply>`` answered
in time, not logged yet; ``D<reply>`` decided and logged; ``F<reason>`` logged as fail-open;
``R`` a non-blocking event, logged. A settle's result says ``A`` for an entry acknowledged already
whose key is gone.
"""

from __future__ import annotations

from typing import Final

from bus.session.script import APPLY_LUA

#: How long an outcome key outlives its event's deadline (and a non-blocking event's
#: de-duplication window), in milliseconds.
OUTCOME_GRACE_MS: Final = 10_000
#: How long an answered event's key (``P``) outlives its deadline while it waits for its record:
#: as long as its entry may wait to be re-delivered (its dispatchers down), so that the record
#: written then still says what the agent got. Its settle gives the key the usual lifetime.
ANSWERED_GRACE_MS: Final = 3_600_000

#: Arguments of one job after the fixed ones (:data:`QUEUE_JOBS_LUA`): id, lifetime ms, maxQueued, record.
JOB_ARGS: Final = 4
#: Arguments of one event in :data:`SETTLE`, before its jobs' (see the script's comment).
EVENT_ARGS: Final = 14
#: Arguments of an event's session part in :data:`SETTLE`, after its jobs': operations, expected
#: version, state lifetime ms, sessions per tenant, tenant counters to count (``''``: none), the
#: state the dispatcher decided on (``<version>:<first seen>``, ``''``: none); its keys: the
#: state, the tenant's sessions, the partition's events pending a tenant count.
SESSION_ARGS: Final = 6
#: Keys of one event in :data:`SETTLE` without jobs (with jobs: the arq queue, and two per job).
EVENT_KEYS: Final = 4
#: The hash a partition's first record follows (:mod:`bus.decisionlog.chain`).
CHAIN_GENESIS: Final = "0" * 40
#: The most events one :data:`SETTLE` call takes (a script blocks Redis while it runs).
SETTLE_MAX_EVENTS: Final = 128

# Queues the jobs named by KEYS[first_key..last_key] (job key, result key per job) and
# ARGV[first_arg..] (JOB_ARGS per job) on the arq queue ``queue``, as arq's enqueue does;
# returns queued, dropped.
QUEUE_JOBS_LUA: Final = """
local function queue_jobs(queue, first_key, last_key, first_arg, now_ms)
  local queued, dropped, depth = 0, 0, nil
  local arg = first_arg
  for k = first_key, last_key - 1, 2 do
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

# Links a record into its partition's hash chain (bus.decisionlog.chain): chain_link returns
# the record's ``ch`` field (partition:seq:previous hash:hash) and a function that moves the
# chain's head to it, called once the record is written. One head per chain key, read once per call.
CHAIN_LUA: Final = """
local chain_heads = {}
local function chain_link(chain_key, partition, digest, outcome, reason)
  local head = chain_heads[chain_key]
  if head == nil then
    local seq, hash = string.match(redis.call('GET', chain_key) or '', '^(%d+):(%x+)$')
    head = {tonumber(seq) or 0, hash or 'GENESIS'}
    chain_heads[chain_key] = head
  end
  local seq = string.format('%d', head[1] + 1)
  local hash = redis.sha1hex(head[2] .. '\\n' .. partition .. '\\n' .. seq .. '\\n' .. digest .. '\\n' ..
                             outcome .. '\\n' .. reason)
  local value = partition .. ':' .. seq .. ':' .. head[2] .. ':' .. hash
  return value, function()
    head[1], head[2] = head[1] + 1, hash
    redis.call('SET', chain_key, seq .. ':' .. hash)
  end
end
""".replace("GENESIS", CHAIN_GENESIS)

# Settles a batch of events (one or many), each by the rules of the module docstring.
# KEYS: per event its outcome key, decision log, work stream and chain head, then (only for an
#       event with jobs) the arq queue and a job key and result key per job
# ARGV: the group and the publish command (PUBLISH, or SPUBLISH for a shard channel on a
#       cluster), then per event: entry id, log maxlen, record meta, hook input, deadline ms
#       (0: non-blocking), reply (may be empty), outcome if decided, fail-open reason if
#       decided, forced reason, reply channel, partition, record digest, number of jobs, 1 if it
#       has a session part; then JOB_ARGS per job, then SESSION_ARGS (its keys after the jobs':
#       the session's state, the tenant's sessions, the partition's pending tenant counts)
# The replies of one channel go out as one message (one per line when there are several), and
# the entries of one stream are acknowledged by one XACK, after every record is written.
# Returns, per event, {1, outcome, jobs queued, jobs dropped, session} when it wrote the record
# (session: '' or the JSON of bus.session.script), {2, 'conflict', 0, 0, session} when its session
# changed since its decision, else {0, state, 0, 0, ''}, flattened.
SETTLE: Final = (
    QUEUE_JOBS_LUA
    + CHAIN_LUA
    + APPLY_LUA
    + """
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_text = string.format('%d', now_ms)
local results, acks, streams, replies, channels = {}, {}, {}, {}, {}
-- The record's JSON saying the outcome settled on, not the one the dispatcher wrote into it
-- (LogRecord.meta() writes it first, so that no value of the record can be mistaken for it).
local function settled_meta(meta, written, outcome)
  local head = '{"outcome":"' .. written .. '"'
  if outcome == written or string.sub(meta, 1, #head) ~= head then
    return meta
  end
  return '{"outcome":"' .. outcome .. '"' .. string.sub(meta, #head + 1)
end
local function add_reply(channel, reply)
  if not replies[channel] then
    replies[channel] = {}
    channels[#channels + 1] = channel
  end
  table.insert(replies[channel], reply)
end
-- Whether entry ``id`` of ``stream`` was acknowledged already: still in the stream, no longer
-- pending (another dispatcher settled it, and its outcome key has expired since). A group or
-- stream that is gone (Redis lost its data) says nothing: the record is written.
local function acknowledged(stream, id)
  local pending = redis.pcall('XPENDING', stream, ARGV[1], id, id, 1)
  if type(pending) ~= 'table' or pending.err or #pending > 0 then
    return false
  end
  return #redis.call('XRANGE', stream, id, id) > 0
end
local k, a = 1, 3
local function ack(stream, id)
  if not acks[stream] then
    acks[stream] = {}
    streams[#streams + 1] = stream
  end
  table.insert(acks[stream], id)
end
while a <= #ARGV do
  local stream, jobs = KEYS[k + 2], tonumber(ARGV[a + 12])
  local sk, sa = k + EVENT_KEYS + (jobs > 0 and 1 + 2 * jobs or 0), a + EVENT_ARGS + JOB_ARGS * jobs
  local session = ARGV[a + 13] == '1'
  local prior = redis.call('GET', KEYS[k])
  -- An earlier settle's key lives past the entry's append by GRACE_MS at least: only a settle
  -- later than that may find none, and only such a settle reads whether its entry is pending.
  if not prior and now_ms - (tonumber(string.match(ARGV[a], '^%d+')) or 0) >= GRACE_MS
      and acknowledged(stream, ARGV[a]) then
    prior = 'A'  -- settled once already: a stalled dispatcher's late settle writes and counts nothing
  end
  local state = prior and string.sub(prior, 1, 1)
  local now_state, current = '', nil
  if session and (not prior or state == 'G' or state == 'P') then
    local expected, deadline = ARGV[sa + 1], tonumber(ARGV[a + 4])
    if prior or deadline == 0 or now_ms >= deadline or ARGV[a + 8] ~= '' then
      expected = ''  -- answered already (or never waited for): no decision left to take again
    end
    local ok, found = apply_session(KEYS[sk], KEYS[sk + 1], ARGV[sa], expected, ARGV[sa + 2], ARGV[sa + 3], now_text,
                                    KEYS[sk + 2], ARGV[sa + 4], ARGV[sa + 5])
    if ok then now_state = found else current = found end
  end
  if current then
    table.insert(results, 2)
    table.insert(results, 'conflict')
    table.insert(results, 0)
    table.insert(results, 0)
    table.insert(results, current)
  else
    ack(stream, ARGV[a])
    if state == 'P' and ARGV[a + 8] == '' then
      -- Answered in time by ANSWER: the record says decided, the key keeps the reply the agent got.
      local reason = ARGV[a + 6] == 'decided' and ARGV[a + 7] or ''
      local link, linked = chain_link(KEYS[k + 3], ARGV[a + 10], ARGV[a + 11], 'decided', reason)
      redis.call('XADD', KEYS[k + 1], 'MAXLEN', '~', ARGV[a + 1], '*', 'r',
                 settled_meta(ARGV[a + 2], ARGV[a + 6], 'decided'), 'in', ARGV[a + 3], 'o', 'decided', 'fo', reason,
                 'ch', link)
      linked()
      redis.call('SET', KEYS[k], 'D' .. string.sub(prior, 2), 'PX',
                 math.max(tonumber(ARGV[a + 4]) - now_ms, 0) + GRACE_MS)
      local queued, dropped = 0, 0
      if jobs > 0 then
        queued, dropped = queue_jobs(KEYS[k + 4], k + 5, k + 5 + 2 * jobs, a + EVENT_ARGS, now_text)
      end
      table.insert(results, 1)
      table.insert(results, 'decided')
      table.insert(results, queued)
      table.insert(results, dropped)
      table.insert(results, now_state)
    elseif state == 'F' or state == 'R' or state == 'A' or (state == 'D' and ARGV[a + 8] == '') then
      if state == 'D' and now_ms < tonumber(ARGV[a + 4]) then
        -- Logged by a call that failed on a later event of its batch, before publishing: answer now.
        add_reply(ARGV[a + 9], string.sub(prior, 2))
      end
      table.insert(results, 0)
      table.insert(results, state)
      table.insert(results, 0)
      table.insert(results, 0)
      table.insert(results, '')
    else
      -- Not logged yet (unset, G, or P the gateway did not answer with), or logged as decided
      -- while the gateway answered fail-open (its forced reason): a second record says so.
      local deadline = tonumber(ARGV[a + 4])
      local reply = ARGV[a + 5]
      local outcome, reason, value
      if deadline == 0 then
        outcome, reason, value = ARGV[a + 6], ARGV[a + 7], 'R'
      elseif state == 'G' then
        outcome, reason = 'fail-open', string.sub(prior, 2)
      elseif ARGV[a + 8] ~= '' then
        outcome, reason = 'fail-open', ARGV[a + 8]
      elseif now_ms >= deadline or reply == '' then
        outcome, reason = 'fail-open', 'timeout'
      else
        outcome, reason, value = ARGV[a + 6], ARGV[a + 7], 'D' .. reply
      end
      if value == nil then
        value = 'F' .. reason
      end
      local meta = settled_meta(ARGV[a + 2], ARGV[a + 6], outcome)
      local link, linked = chain_link(KEYS[k + 3], ARGV[a + 10], ARGV[a + 11], outcome, reason)
      redis.call('XADD', KEYS[k + 1], 'MAXLEN', '~', ARGV[a + 1], '*', 'r', meta, 'in', ARGV[a + 3],
                 'o', outcome, 'fo', reason, 'ch', link)
      linked()
      redis.call('SET', KEYS[k], value, 'PX', math.max(deadline - now_ms, 0) + GRACE_MS)
      if string.sub(value, 1, 1) == 'D' then
        add_reply(ARGV[a + 9], reply)
      end
      local queued, dropped = 0, 0
      if jobs > 0 and state ~= 'D' then  -- the first record queued them
        queued, dropped = queue_jobs(KEYS[k + 4], k + 5, k + 5 + 2 * jobs, a + EVENT_ARGS, now_text)
      end
      table.insert(results, 1)
      table.insert(results, outcome)
      table.insert(results, queued)
      table.insert(results, dropped)
      table.insert(results, now_state)
    end
  end
  if session then
    k, a = sk + 3, sa + SESSION_ARGS
  else
    k, a = sk, sa
  end
end
for _, stream in ipairs(streams) do
  local ids = acks[stream]
  for first = 1, #ids, 1000 do
    redis.call('XACK', stream, ARGV[1], unpack(ids, first, math.min(first + 999, #ids)))
  end
end
for _, channel in ipairs(channels) do
  local list = replies[channel]
  redis.call(ARGV[2], channel, table.concat(list, '\\n'))
end
return results
""".replace("GRACE_MS", str(OUTCOME_GRACE_MS))
    .replace("EVENT_ARGS", str(EVENT_ARGS))
    .replace("EVENT_KEYS", str(EVENT_KEYS))
    .replace("SESSION_ARGS", str(SESSION_ARGS))
    .replace("JOB_ARGS", str(JOB_ARGS))
)

# KEYS: the arq queue, then a job key and result key per job; ARGV: JOB_ARGS per job.
# Returns {jobs queued, jobs dropped}.
QUEUE_JOBS: Final = (
    QUEUE_JOBS_LUA
    + """
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local queued, dropped = queue_jobs(KEYS[1], 2, #KEYS + 1, 1, string.format('%d', now_ms))
return {queued, dropped}
"""
)

# KEYS: outcome; ARGV: deadline ms, sealed reply, reply channel, the publish command (as in
# SETTLE). Returns 1 when it stored and published the reply, else 0 (settled, claimed or late).
ANSWER: Final = """
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local deadline = tonumber(ARGV[1])
if now_ms >= deadline or redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('SET', KEYS[1], 'P' .. ARGV[2], 'PX', deadline - now_ms + ANSWERED_MS)
redis.call(ARGV[4], ARGV[3], ARGV[2])
return 1
""".replace("ANSWERED_MS", str(ANSWERED_GRACE_MS))

# Appends a record the gateway writes itself (an input it refused), linked into its chain like a
# settled one. KEYS: decision log, chain head; ARGV: log maxlen, record meta, hook input,
# outcome, fail-open reason, partition, record digest. Returns the entry id.
APPEND_RECORD: Final = (
    CHAIN_LUA
    + """
local link, linked = chain_link(KEYS[2], ARGV[6], ARGV[7], ARGV[4], ARGV[5])
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'r', ARGV[2], 'in', ARGV[3], 'o', ARGV[4],
                      'fo', ARGV[5], 'ch', link)
linked()
return id
"""
)

# KEYS: outcome; ARGV: fail-open reason, ttl ms. Returns the stored reply, or nil (fail open).
CLAIM_FAIL_OPEN: Final = """
local prior = redis.call('GET', KEYS[1])
if prior then
  local state = string.sub(prior, 1, 1)
  if state == 'D' or state == 'P' then
    return string.sub(prior, 2)
  end
  return false
end
redis.call('SET', KEYS[1], 'G' .. ARGV[1], 'PX', ARGV[2])
return false
"""

__all__ = [
    "ANSWER",
    "ANSWERED_GRACE_MS",
    "APPEND_RECORD",
    "CHAIN_GENESIS",
    "CHAIN_LUA",
    "CLAIM_FAIL_OPEN",
    "EVENT_ARGS",
    "EVENT_KEYS",
    "JOB_ARGS",
    "OUTCOME_GRACE_MS",
    "QUEUE_JOBS",
    "QUEUE_JOBS_LUA",
    "SESSION_ARGS",
    "SETTLE",
    "SETTLE_MAX_EVENTS",
]
