"""A non-blocking event decided again on a changing session too many times is settled on its last
decision without the version check (:data:`workers.dispatcher.sessions.MAX_ATTEMPTS`), counted in
``hookbus_session_unchecked_settles_total``; a blocking one never is (it is decided again until
its deadline); one that did not read the state is settled without it anyway, uncounted."""

from __future__ import annotations

from bus.redis.keys import Keyspace
from bus.runtime.metrics import Metrics
from bus.stream.protocol import Request, now_ms
from workers.dispatcher.sessions import MAX_ATTEMPTS, SessionStates
from workers.engine.sessions import SessionOutcome

UNCHECKED = "hookbus_session_unchecked_settles_total"


def outcome(expected: int | None = 7) -> SessionOutcome:
    return SessionOutcome(["I n:calls"], expected, [], 60_000, 10)


def test_past_the_attempts_a_non_blocking_event_is_settled_unchecked_and_counted() -> None:
    metrics = Metrics()
    states = SessionStates(Keyspace(), metrics, lambda op: None)
    request = Request("e1", "PostToolUse", "default", b"{}", now_ms())
    for attempt in range(MAX_ATTEMPTS):
        assert states.part(request, 0, "k", outcome(), attempt)[0].expected == 7  # still checked
    assert metrics.registry.get_sample_value(UNCHECKED) == 0
    assert states.part(request, 0, "k", outcome(), MAX_ATTEMPTS)[0].expected is None
    assert metrics.registry.get_sample_value(UNCHECKED) == 1
    unread = outcome(None)  # read no state: nothing to check
    assert states.part(request, 0, "k", unread, MAX_ATTEMPTS + 1)[0].expected is None
    assert metrics.registry.get_sample_value(UNCHECKED) == 1


def test_a_blocking_event_is_always_settled_checked() -> None:
    metrics = Metrics()
    states = SessionStates(Keyspace(), metrics, lambda op: None)
    request = Request("e1", "PreToolUse", "default", b"{}", now_ms(), now_ms() + 5_000, "hookbus:reply:e1")
    for attempt in (0, MAX_ATTEMPTS, 10 * MAX_ATTEMPTS):
        assert states.part(request, 0, "k", outcome(), attempt)[0].expected == 7
    assert metrics.registry.get_sample_value(UNCHECKED) == 0
