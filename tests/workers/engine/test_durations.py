"""An evaluation's rule-handler durations observed in one step give the histogram's samples of
observing each in turn."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram

from bus.runtime.metricvalues import LATENCY_BUCKETS
from workers.engine.durations import observe_all


def _samples(registry: CollectorRegistry, kind: str) -> dict[tuple[str, str], float]:
    found = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.labels.get("type") == kind and not sample.name.endswith("_created"):
                found[(sample.name, sample.labels.get("le", ""))] = sample.value
    return found


@pytest.mark.parametrize(
    "amounts",
    [
        [0.00002],
        [0.0001],  # on a bound: that bucket, as observe puts it
        [0.00002, 0.00003],
        [0.00002, 0.0003, 0.00001, 0.0003],
        [7.0, 10.0, 11.0, 0.0, -1.0],
        [0.0001, 0.00010000001, 0.00025, 2.5, 1e9],
    ],
)
def test_observe_all_gives_the_samples_of_observing_each(amounts: list[float]) -> None:
    registry = CollectorRegistry()
    family = Histogram("t_seconds", "t", ["type"], buckets=LATENCY_BUCKETS, registry=registry)
    one, all_ = family.labels("one"), family.labels("all")
    for round_ in range(3):  # added to what is there
        for amount in amounts:
            one.observe(amount)
        observe_all(all_, amounts)
        each, at_once = _samples(registry, "one"), _samples(registry, "all")
        assert each.keys() == at_once.keys()
        for key, value in each.items():
            assert math.isclose(value, at_once[key], rel_tol=1e-9, abs_tol=1e-12), (key, round_)


def test_observe_all_falls_back_to_observe() -> None:
    seen: list[float] = []

    class Plain:
        def observe(self, amount: float) -> None:
            seen.append(amount)

    observe_all(Plain(), [0.1, 0.2])
    assert seen == [0.1, 0.2]
