"""The durations of an event's in-process handlers, observed in one step per evaluation.

A rule pack puts two or three ``rule`` handlers on every tool call, each decided in a few
microseconds; observing each duration on its own (``hookbus_hook_duration_seconds``) took a
lock for the sum and another for the bucket per handler, plus the histogram's own checks, about
as long as deciding a kept verdict. :func:`observe_all` adds an evaluation's durations to the
histogram child at once: the sum once, each bucket once for all the durations that fall in it.
The histogram's samples are those of observing each duration in turn.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from typing import Any


def observe_all(histogram: Any, amounts: Sequence[float]) -> None:
    """Observe each of ``amounts`` on ``histogram`` (a labelled child of a prometheus-client
    ``Histogram``), in one step: the same samples as ``histogram.observe`` for each."""
    try:
        bounds: Sequence[float] = histogram._upper_bounds
        buckets: Sequence[Any] = histogram._buckets
        total: Any = histogram._sum
    except AttributeError:  # not the histogram child this was written for: one at a time
        for amount in amounts:
            histogram.observe(amount)
        return
    total.inc(sum(amounts))
    index, count = -1, 0  # the durations of an evaluation mostly share one bucket: one lock for them
    for amount in amounts:
        found = bisect_left(bounds, amount)  # the first bound >= amount, as observe's; the last is +Inf
        if found != index:
            if count:
                buckets[index].inc(count)
            index, count = found, 0
        count += 1
    if count:
        buckets[index].inc(count)


__all__ = ["observe_all"]
