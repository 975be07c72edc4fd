"""An event decided again on a changing session too many times is settled on its last decision
without the version check (:data:`workers.dispatcher.sessions.MAX_ATTEMPTS`), counted in
``hookbus_session_unchecked_settles_total``; one that did not read the state is settled without it anyway, uncounted."""

from __future__ import annotations

from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request, now_ms
from workers.dispatcher.sessions import MAX_ATTEMPTS, SessionStates
from workers.engine.sessions import SessionOutcome

UNCHECKED = "hookbus_session_unchecked_settles_total"


def test_past_the_attempts_an_event_is_settled_unchecked_and_counted() -> None:
    metrics = Metrics()
    states = SessionStates(Keyspace(), metrics, lambda op: None)
    request = Request("e1", "PreToolUse", "default", b"{}", now_ms(), now_ms() + 5_000, "gw")
    for attempt in range(MAX_ATTEMPTS):
        outcome = SessionOutcome(["I n:calls"], 7, [], 60_000, 10)
        assert states.part(request, 0, "k", outcome, attempt)[0].expected == 7  # still checked
    assert metrics.registry.get_sample_value(UNCHECKED) == 0
    outcome = SessionOutcome(["I n:calls"], 7, [], 60_000, 10)
    assert states.part(request, 0, "k", outcome, MAX_ATTEMPTS)[0].expected is None
    assert metrics.registry.get_sample_value(UNCHECKED) == 1
    unread = SessionOutcome(["I n:calls"], None, [], 60_000, 10)  # read no state: nothing to check
    assert states.part(request, 0, "k", unread, MAX_ATTEMPTS + 1)[0].expected is None
    assert metrics.registry.get_sample_value(UNCHECKED) == 1
