"""arq's worker with a short, renewed lease on running jobs, and jobs claimed in batches.

**Lease.** arq marks a running job with an in-progress key that lives for the job's whole
timeout (plus 10 s), so the jobs of a SIGKILLed worker wait that long before anyone runs them
again. Here the key lives ``lease_s`` and the heartbeat renews it: a dead worker's jobs run
again within ``lease_s`` plus a poll (at least once, as arq promises).

**Batched claims.** arq starts a job with a WATCH / EXISTS / ZSCORE / MULTI-PSETEX-EXEC
transaction: four round trips per job, one job after the other on the poll loop, which caps a
worker at about a thousand trivial jobs a second. :meth:`LeasedWorker.start_jobs` claims every
job it has room for in one script (:data:`CLAIM_JOBS`) that makes the same checks atomically (not
running elsewhere, still queued, due) and sets the same in-progress keys; the jobs then run as
arq runs them (:meth:`arq.worker.Worker.run_job`).

**Batched finishes.** arq ends each job with a transaction of its own, on a connection of its
own. :meth:`LeasedWorker.finish_job` makes the same writes, but the jobs that finish while one
such write is in flight go out together in the next: one ``MULTI``/``EXEC`` for all of them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from arq.constants import abort_jobs_ss, in_progress_key_prefix, job_key_prefix, result_key_prefix, retry_key_prefix
from arq.utils import timestamp_ms, to_ms
from arq.worker import Worker
from redis.asyncio.client import Pipeline

#: How long a running job's claim outlives a worker that stopped renewing it, in seconds.
LEASE_S = 15.0

#: KEYS: the queue, then one in-progress key per job; ARGV: now (ms), the lease (ms), then the
#: job ids. Returns ``[job id, score, ...]`` of the jobs claimed (arq's checks of ``start_jobs``).
CLAIM_JOBS = """
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


@dataclasses.dataclass(slots=True)
class Finish:
    """What :meth:`arq.worker.Worker.finish_job` is told about one job, and who waits for it."""

    job_id: str
    finish: bool
    result_data: bytes | None
    result_timeout_s: float | None
    keep_result_forever: bool
    incr_score: int | None
    keep_in_progress: float | None
    done: asyncio.Future[None]


class LeasedWorker(Worker):
    """A :class:`arq.worker.Worker` with leases, batched claims and batched finishes (see the module docstring)."""

    def __init__(self, *args: Any, lease_s: float = LEASE_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lease_s = lease_s
        self.in_progress_timeout_s = lease_s
        self._renewed_at = 0.0
        self._claim: Any = None
        self._finishing: list[Finish] = []
        self._finisher: asyncio.Task[None] | None = None

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """Claim and start as many of ``job_ids`` as there are free slots, waiting for a slot when none is."""
        ids = [job_id.decode() for job_id in job_ids]
        if self._claim is None:
            self._claim = self.pool.register_script(CLAIM_JOBS)
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
                    args=[timestamp_ms(), int(self.in_progress_timeout_s * 1000), *batch],
                )
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

    async def finish_job(
        self,
        job_id: str,
        finish: bool,
        result_data: bytes | None,
        result_timeout_s: float | None,
        keep_result_forever: bool,
        incr_score: int | None,
        keep_in_progress: float | None,
    ) -> None:
        """arq's writes at the end of a job, sent with those of every job that finished meanwhile."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._finishing.append(
            Finish(
                job_id, finish, result_data, result_timeout_s, keep_result_forever, incr_score, keep_in_progress, done
            )
        )
        if self._finisher is None or self._finisher.done():
            self._finisher = asyncio.create_task(self._write_finishes())
        await done

    async def _write_finishes(self) -> None:
        while self._finishing:
            batch, self._finishing = self._finishing, []
            try:
                async with self.pool.pipeline(transaction=True) as tr:
                    for job in batch:
                        self._queue_finish(tr, job)
                    await tr.execute()
            except BaseException as exc:  # each job's run_job sees it, as it would its own write's
                for job in batch:
                    if not job.done.done():
                        job.done.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
            else:
                for job in batch:
                    if not job.done.done():
                        job.done.set_result(None)

    def _queue_finish(self, tr: Pipeline, job: Finish) -> None:
        """The writes of :meth:`arq.worker.Worker.finish_job` (arq 0.26-0.28) for one job."""
        delete_keys = []
        in_progress_key = in_progress_key_prefix + job.job_id
        if job.keep_in_progress is None:
            delete_keys.append(in_progress_key)
        else:
            tr.pexpire(in_progress_key, to_ms(job.keep_in_progress))
        if job.finish:
            if job.result_data:
                expire = None if job.keep_result_forever else job.result_timeout_s
                tr.set(result_key_prefix + job.job_id, job.result_data, px=to_ms(expire))
            delete_keys += [retry_key_prefix + job.job_id, job_key_prefix + job.job_id]
            tr.zrem(abort_jobs_ss, job.job_id)
            tr.zrem(self.queue_name, job.job_id)
        elif job.incr_score:
            tr.zincrby(self.queue_name, job.incr_score, job.job_id)
        if delete_keys:
            tr.delete(*delete_keys)

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


__all__ = ["CLAIM_JOBS", "LEASE_S", "Finish", "LeasedWorker"]
