"""When a failed async hook job is tried again, and when it is given up.

A try that failed is retried when another try may help (the result is ``retryable``: a
connection error, a timeout, a 5xx or 429 from an ``http`` hook, a command's exit 1...), the
job has tries left (``maxTries``) and the next try would still start within ``maxAgeSeconds``
of the job being queued. The delay before try ``n + 1`` follows redis-py's equal-jitter
exponential curve (:class:`redis.backoff.EqualJitterBackoff`): between half and all of
``retryDelaySeconds * 2**(n - 1)``, capped at :data:`MAX_RETRY_DELAY_S`, so each delay is at
least the one before and a fleet of failing jobs does not retry in step. A ``Retry-After`` the
other side sent is a floor. Anything else is given up and dead-lettered
(:mod:`workers.jobs.deadletters`), with the reason in :class:`Verdict`.
"""

from __future__ import annotations

import dataclasses
import enum

from redis.backoff import EqualJitterBackoff

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import AsyncSettings, HandlerBase

#: The longest wait between two tries of a job (a ``Retry-After`` may ask for more).
MAX_RETRY_DELAY_S = 300.0


class GiveUp(enum.StrEnum):
    """Why a job was dead-lettered (the ``why`` of a dead letter)."""

    #: Every try failed (or the worker stopped during the last ones).
    OUT_OF_TRIES = "out_of_tries"
    #: The job was older than ``maxAgeSeconds`` before its next try.
    TOO_OLD = "too_old"
    #: The failure would repeat: a 4xx other than 408/429, a command's exit 2, a blocked URL.
    NOT_RETRYABLE = "not_retryable"
    #: The handler is no longer in the policy (edited or removed since the job was queued).
    NO_HANDLER = "no_handler"


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """One handler's delivery limits: its own ``maxTries``/``maxAgeSeconds``, else ``hookbus.async``'s."""

    max_tries: int
    max_age_s: float
    retry_delay_s: float

    @classmethod
    def of(cls, handler: HandlerBase, settings: AsyncSettings) -> Limits:
        return cls(
            max_tries=handler.max_tries or settings.max_tries,
            max_age_s=handler.max_age_seconds or settings.max_age_seconds,
            retry_delay_s=settings.retry_delay_seconds,
        )


def retry_delay_s(
    failed_tries: int, base_s: float, retry_after_s: float | None = None, cap_s: float = MAX_RETRY_DELAY_S
) -> float:
    """The wait after the ``failed_tries``-th failed try (1, 2, ...): jittered, doubling, capped; at
    least ``retry_after_s``."""
    curve = EqualJitterBackoff(cap=cap_s, base=base_s)
    delay = float(curve.compute(max(0, failed_tries - 1)))
    return max(delay, retry_after_s or 0.0)


def failed(result: HandlerResult) -> bool:
    """Whether an async try failed: an error, a timeout, or a block (exit 2), which an async hook cannot use."""
    return result.failed or result.outcome is Outcome.BLOCK


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What to do after a failed try: retry after ``delay_s``, or give up for ``give_up``."""

    delay_s: float | None = None
    give_up: GiveUp | None = None


def verdict(result: HandlerResult, job_try: int, age_s: float, limits: Limits) -> Verdict:
    """Retry or give up after try number ``job_try`` (from 1) failed with ``result``, ``age_s`` after queueing."""
    if result.outcome is Outcome.BLOCK or not result.retryable:
        return Verdict(give_up=GiveUp.NOT_RETRYABLE)
    if job_try >= limits.max_tries:
        return Verdict(give_up=GiveUp.OUT_OF_TRIES)
    delay_s = retry_delay_s(job_try, limits.retry_delay_s, result.retry_after_s)
    if age_s + delay_s > limits.max_age_s:
        return Verdict(give_up=GiveUp.TOO_OLD)
    return Verdict(delay_s=delay_s)


def before_try(job_try: int, age_s: float, limits: Limits) -> GiveUp | None:
    """Whether a job must be given up before it runs: tries used up by workers that stopped mid-try
    (each start counts), or queued longer than ``maxAgeSeconds`` (a backlog, or no worker)."""
    if job_try > limits.max_tries:
        return GiveUp.OUT_OF_TRIES
    if age_s > limits.max_age_s:
        return GiveUp.TOO_OLD
    return None


__all__ = ["MAX_RETRY_DELAY_S", "GiveUp", "Limits", "Verdict", "before_try", "failed", "retry_delay_s", "verdict"]
