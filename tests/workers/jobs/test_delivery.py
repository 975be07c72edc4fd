"""When a failed async try is retried, after how long, and when it is given up (:mod:`workers.jobs.delivery`)."""

from __future__ import annotations

import itertools

import pytest

from bus.hooks.results import HandlerResult, Outcome
from bus.policy.schema import AsyncSettings, CommandHandler
from workers.jobs.delivery import MAX_RETRY_DELAY_S, GiveUp, Limits, before_try, failed, retry_delay_s, verdict

LIMITS = Limits(max_tries=4, max_age_s=60.0, retry_delay_s=2.0)


def error(**fields: object) -> HandlerResult:
    return HandlerResult(Outcome.ERROR, reason="boom", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("failed_tries", [1, 2, 3, 4, 5, 6])
def test_each_delay_is_between_half_and_all_of_the_doubled_base(failed_tries: int) -> None:
    ceiling = 2.0 * 2 ** (failed_tries - 1)
    for _ in range(200):
        assert ceiling / 2 <= retry_delay_s(failed_tries, 2.0) <= ceiling


def test_delays_never_shrink_below_the_cap_and_stay_under_it() -> None:
    for _ in range(200):
        delays = [retry_delay_s(n, 1.0) for n in range(1, 10)]  # 1 s * 2**8 = 256 s: under the 300 s cap
        assert all(a <= b for a, b in itertools.pairwise(delays))
        assert all(MAX_RETRY_DELAY_S / 2 <= retry_delay_s(n, 1.0) <= MAX_RETRY_DELAY_S for n in (10, 20, 60))


def test_retry_after_is_a_floor_not_a_cap() -> None:
    assert retry_delay_s(1, 2.0, retry_after_s=30.0) == 30.0
    assert 1.0 <= retry_delay_s(1, 2.0, retry_after_s=0.5) <= 2.0


def test_a_retryable_failure_with_tries_and_time_left_is_retried() -> None:
    decided = verdict(error(), job_try=1, age_s=0.0, limits=LIMITS)
    assert decided.give_up is None and decided.delay_s is not None and 1.0 <= decided.delay_s <= 2.0


@pytest.mark.parametrize(
    ("result", "job_try", "age_s", "why"),
    [
        (error(retryable=False), 1, 0.0, GiveUp.NOT_RETRYABLE),
        (HandlerResult(Outcome.BLOCK, reason="exit 2"), 1, 0.0, GiveUp.NOT_RETRYABLE),
        (error(), 4, 0.0, GiveUp.OUT_OF_TRIES),
        (error(), 2, 59.0, GiveUp.TOO_OLD),  # the next try (>= 2 s later) would start past 60 s
        (error(retry_after_s=120.0), 1, 0.0, GiveUp.TOO_OLD),  # the sink asks for a wait past maxAgeSeconds
    ],
)
def test_what_is_given_up(result: HandlerResult, job_try: int, age_s: float, why: GiveUp) -> None:
    assert verdict(result, job_try, age_s, LIMITS).give_up is why


def test_a_job_is_given_up_before_it_runs_when_killed_workers_used_its_tries_or_it_waited_too_long() -> None:
    assert before_try(4, 10.0, LIMITS) is None
    assert before_try(5, 10.0, LIMITS) is GiveUp.OUT_OF_TRIES
    assert before_try(1, 61.0, LIMITS) is GiveUp.TOO_OLD


def test_a_block_is_a_failure_for_an_async_hook_and_an_answer_is_not() -> None:
    assert failed(HandlerResult(Outcome.BLOCK)) and failed(HandlerResult(Outcome.TIMEOUT))
    assert not failed(HandlerResult(Outcome.OK, output={"systemMessage": "hi"}))


def test_a_handlers_own_limits_win_over_the_policys() -> None:
    defaults = AsyncSettings()
    plain = CommandHandler(type="command", command="true")
    own = CommandHandler.model_validate({"type": "command", "command": "true", "maxTries": 9, "maxAgeSeconds": 5})
    assert Limits.of(plain, defaults) == Limits(5, 3600.0, 2.0)
    assert Limits.of(own, defaults) == Limits(9, 5.0, 2.0)
