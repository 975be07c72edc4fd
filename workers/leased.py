"""arq's worker with a short, renewed lease on running jobs, and jobs claimed in batches.

**Lease.** arq marks a running job with an in-progress key that lives for the job's whole
timeout (plus 10 s), so the jobs of a SIGKILLed worker wait that long before anyone runs them
again. Here the key lives ``lease_s`` and the heartbeat renews it: a dead worker's jobs run
again within ``lease_s`` plus a poll (at least once, as arq promises).

**Batched claims.** arq starts a job with a WATCH / EXISTS / ZSCORE / MULTI-PSETEX-EXEC
transaction: four round trips per job, one job after the other on the poll loop, which caps a
worker at about a thousand trivial jobs a second. :meth:`LeasedWorker.start_jobs` claims every
job it has room for in one script (:data:`CLAIM`) that makes the same checks atomically (not
running elsewhere, still queued, due) and sets the same in-progress keys; the jobs then run as
arq runs them (:meth:`arq.worker.Worker.run_job`).
"""

from __future__ import annotations

import time
from typing import Any

from arq.constants import in_progress_key_prefix
from arq.utils import timestamp_ms
from arq.worker import Worker

#: How long a running job's claim outlives a worker that stopped renewing it, in seconds.
LEASE_S = 15.0

#: KEYS: the queue, then one in-progress key per job; ARGV: now (ms), the lease (ms), then the
#: job ids. Returns ``[job id, score, ...]`` of the jobs claimed (arq's checks of ``start_jobs``).
CLAIM = """
local claimed = {}
local now = tonumber(ARGV[1])
for i = 2, #KEYS do
  local id = ARGV[i + 1]
  if redis.call('EXISTS', KEYS[i]) == 0 then
    local score = redis.call('ZSCORE', KEYS[1], id)
    if score and tonumber(score) <= now then
      redis.call('PSETEX', KEYS[i], ARGV[2], '1')
      claimed[#claimed + 1] = id
      claimed[#claimed + 1] = score
    end
  end
end
return claimed
"""


class LeasedWorker(Worker):
    """A :class:`arq.worker.Worker` with leases and batched claims (see the module docstring)."""

    def __init__(self, *args: Any, lease_s: float = LEASE_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lease_s = lease_s
        self.in_progress_timeout_s = lease_s
        self._renewed_at = 0.0
        self._claim: Any = None

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """Claim and start as many of ``job_ids`` as there are free slots, waiting for a slot when none is."""
        ids = [job_id.decode() for job_id in job_ids]
        if self._claim is None:
            self._claim = self.pool.register_script(CLAIM)
        while ids:
            await self.sem.acquire()  # a slot for the first one (waits while max_jobs run)
            taken = 1
            while taken < len(ids) and not self.sem.locked():
                await self.sem.acquire()  # free slots: returns at once
                taken += 1
            batch, ids = ids[:taken], ids[taken:]
            self.job_counter += taken
            try:
                claimed = await self._claim(
                    keys=[self.queue_name, *(in_progress_key_prefix + job_id for job_id in batch)],
                    args=[timestamp_ms(), int(self.in_progress_timeout_s * 1000), *batch])
            except BaseException:
                for _ in batch:
                    self._release_sem_dec_counter_on_complete()
                raise
            for _ in range(taken - len(claimed) // 2):  # run elsewhere, finished, or re-queued for later
                self._release_sem_dec_counter_on_complete()
            for job_id, score in zip(claimed[::2], claimed[1::2], strict=True):
                key = job_id.decode() if isinstance(job_id, bytes) else str(job_id)
                task = self.loop.create_task(self.run_job(key, int(float(score))))
                task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
                self.tasks[key] = task

    async def heart_beat(self) -> None:
        await super().heart_beat()
        current = self.ctx.get("current")
        if current is not None:  # a reloaded policy's keepResultSeconds applies from the next job on
            self.keep_result_s = current["policy"].settings.async_.keep_result_seconds
        now = time.monotonic()
        if self.tasks and now - self._renewed_at >= self.lease_s / 3:
            self._renewed_at = now
            async with self.pool.pipeline(transaction=False) as pipe:
                for running in self.tasks:
                    pipe.pexpire(in_progress_key_prefix + running, int(self.lease_s * 1000))
                await pipe.execute()


__all__ = ["CLAIM", "LEASE_S", "LeasedWorker"]
