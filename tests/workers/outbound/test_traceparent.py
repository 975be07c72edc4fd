"""Outbound hooks carry the handler's trace context (:mod:`workers.outbound.client`): a real HTTP
server on 127.0.0.1 receives ``traceparent`` while a span is current, and nothing while tracing
is off; the answer's status lands on the span."""

from __future__ import annotations

import pytest

from bus.runtime import tracing
from tests.loopback import LoopbackServer, reply
from tests.otlp import finished, traced_in_process
from tests.workers.outbound.test_transport import http_policy
from workers.outbound.client import guarded_request
from workers.services import Services

pytestmark = pytest.mark.system


async def test_a_request_inside_a_span_sends_its_traceparent_and_records_the_status(services: Services) -> None:
    async with LoopbackServer(reply(202, "{}")) as server:
        policy = http_policy(server.url(), ["127.0.0.0/8"])
        await guarded_request(services, policy, "POST", server.url(), content=b"{}", timeout_s=5.0)
        with traced_in_process() as exporter:
            span = tracing.start("hookbus.handler")
            token = tracing.enter(span)
            try:
                await guarded_request(
                    services, policy, "POST", server.url(), content=b"{}", headers={"X-Team": "a"}, timeout_s=5.0
                )
            finally:
                tracing.leave(token)
                span.end()
            (ended,) = finished(exporter)
    untraced, traced = server.requests
    assert "traceparent" not in untraced.headers  # tracing off: the request is as before
    assert traced.headers["traceparent"] == tracing.traceparent(span) and traced.headers["x-team"] == "a"
    assert dict(ended.attributes or {}) == {"http.response.status_code": 202}
