"""OpenTelemetry traces through a real ``hookbus up``: gateway, dispatcher and worker processes
export over OTLP/HTTP to a real receiver, and one event's spans form one trace.

The policy denies ``git push --force`` with a rule, runs a command hook and asks a policy
service (an http hook, on 127.0.0.1) on every Bash call, and posts each Notification to the same
service from the async worker.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis as redis_sync
import yaml
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from bus.redis.keys import Keyspace
from tests.ci import missing
from tests.conftest import wait_for
from tests.deploy.promtool import promtool
from tests.otlp import OtlpReceiver, ReceivedSpan, otel_env
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

TOKEN = "tok-acme"
CHROMIUM = Path("/usr/bin/chromium")
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


class PolicyService:
    """An http hook's service on 127.0.0.1: answers ``{}`` and keeps each request's headers."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                service.headers.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/policy"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def write_policy(path: Path, service_url: str) -> Path:
    policy = {
        "hookbus": {"deadlineSeconds": 10.0, "http": {"allowedNetworks": ["127.0.0.0/8"]}},
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [
                        {"type": "rule", "deny": ["Bash(git push --force *)"]},
                        {"type": "command", "command": "exit 0"},
                        {"type": "http", "url": service_url, "timeout": 5},
                    ],
                }
            ],
            "Notification": [{"hooks": [{"type": "http", "url": service_url, "async": True, "timeout": 5}]}],
        },
    }
    path.write_text(yaml.safe_dump(policy))
    return path


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UpProcess, OtlpReceiver, PolicyService]]:
    tmp_path = tmp_path_factory.mktemp("traced")
    service = PolicyService()
    with OtlpReceiver() as receiver:
        policy = write_policy(tmp_path / "policy.yaml", service.url)
        env = {"HOOKBUS_TOKENS": f"acme:{TOKEN}", **otel_env(receiver)}
        try:
            with running_up(tmp_path, policy, env) as up:
                yield up, receiver, service
        finally:
            service.close()


def bash(command: str, session: str = "s-trace") -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "cwd": "/tmp",
    }


def post(up: UpProcess, hook_input: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    reply = httpx.post(f"{up.url}/v1/hooks", json=hook_input, headers={**HEADERS, **(headers or {})}, timeout=15)
    assert reply.status_code == 200, reply.text
    return reply


def spans_of(receiver: OtlpReceiver, event_id: str, names: set[str]) -> dict[str, list[ReceivedSpan]]:
    """The event's spans by name, once every name in ``names`` has arrived."""

    def arrived() -> dict[str, list[ReceivedSpan]] | None:
        # An async job's spans name the event too, in a trace of their own, and may arrive first.
        traces = {s.trace_id: None for s in receiver.spans if s.attributes.get("hookbus.event_id") == event_id}
        for trace_id in traces:
            found: dict[str, list[ReceivedSpan]] = {}
            for span in receiver.trace(trace_id):
                found.setdefault(span.name, []).append(span)
            if names <= found.keys():
                return found
        return None

    found: dict[str, list[ReceivedSpan]] = receiver.wait_for_spans(lambda _: arrived())
    return found


def record_of(up: UpProcess, event_id: str) -> dict[str, Any]:
    keys = Keyspace()
    with redis_sync.Redis.from_url(up.redis_url()) as redis:

        def found() -> dict[str, Any] | None:
            for _, fields in redis.xrange(keys.decision_log(0)):
                meta: dict[str, Any] = orjson.loads(fields[b"r"])
                if meta["id"] == event_id:
                    return meta
            return None

        record: dict[str, Any] = wait_for(found, timeout_s=20, interval_s=0.05)
        return record


SPANS = {
    "hookbus.request",
    "hookbus.append",
    "hookbus.wait_reply",
    "hookbus.dispatch",
    "hookbus.evaluate",
    "hookbus.handler",
    "hookbus.settle",
}


def test_one_event_is_one_trace_across_the_gateway_and_a_dispatcher(
    platform: tuple[UpProcess, OtlpReceiver, PolicyService],
) -> None:
    up, receiver, service = platform
    reply = post(up, bash("ls -la"))
    event_id = reply.headers["x-hookbus-event-id"]
    spans = spans_of(receiver, event_id, SPANS)
    (request,) = spans["hookbus.request"]
    (dispatch,) = spans["hookbus.dispatch"]
    (evaluate,) = spans["hookbus.evaluate"]
    assert request.parent_span_id == ""  # the agent sent no traceparent: the gateway started the trace
    assert request.role == "gateway" and dispatch.role == "dispatcher" and evaluate.role == "dispatcher"
    assert request.resource["service.name"] == "hookbus-test"
    assert {s.parent_span_id for s in spans["hookbus.append"] + spans["hookbus.wait_reply"]} == {request.span_id}
    assert dispatch.parent_span_id == request.span_id  # across processes, through the stream entry
    assert dispatch.attributes["hookbus.stream.dwell_ms"] >= 0
    assert dispatch.attributes["hookbus.decision"] == "none" and dispatch.attributes["hookbus.outcome"] == "decided"
    assert evaluate.parent_span_id == dispatch.span_id
    assert spans["hookbus.settle"][0].parent_span_id == dispatch.span_id
    handlers = {s.attributes["hookbus.handler.type"]: s for s in spans["hookbus.handler"]}
    assert set(handlers) == {"rule", "command", "http"}
    assert {s.parent_span_id for s in handlers.values()} == {evaluate.span_id}
    assert {s.attributes["hookbus.handler.outcome"] for s in handlers.values()} == {"ok"}
    assert handlers["command"].attributes["process.exit.code"] == 0
    assert handlers["http"].attributes["http.response.status_code"] == 200
    assert handlers["http"].attributes["hookbus.handler.name"] == service.url
    assert handlers["command"].attributes["hookbus.handler.name"] == "exit"
    assert request.attributes["hookbus.outcome"] == "decided" and request.attributes["hookbus.agent"] == "claude"
    # The spans nest in time too: the gateway's request covers the dispatcher's work.
    assert request.start_ns <= dispatch.start_ns and dispatch.end_ns <= request.end_ns + 50_000_000
    # The policy service got the http handler's span as its parent.
    sent = [h["traceparent"] for h in service.headers if h.get("traceparent", "").split("-")[1] == request.trace_id]
    (version, trace_id, parent_id, flags), *more = [h.split("-") for h in sent]
    assert not more and (version, trace_id, parent_id) == ("00", request.trace_id, handlers["http"].span_id)
    assert int(flags, 16) & 1  # sampled
    assert record_of(up, event_id)["tid"] == request.trace_id


def test_a_traceparent_from_the_agent_is_continued(platform: tuple[UpProcess, OtlpReceiver, PolicyService]) -> None:
    up, receiver, _ = platform
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    reply = post(up, bash("git push --force origin main"), {"traceparent": f"00-{trace_id}-{parent_id}-01"})
    assert reply.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    spans = spans_of(receiver, reply.headers["x-hookbus-event-id"], {"hookbus.request", "hookbus.dispatch"})
    (request,) = spans["hookbus.request"]
    assert request.trace_id == trace_id and request.parent_span_id == parent_id
    assert request.attributes["hookbus.decision"] == "deny"
    assert spans["hookbus.dispatch"][0].attributes["hookbus.decision"] == "deny"


def test_an_async_job_on_the_worker_links_to_its_event(
    platform: tuple[UpProcess, OtlpReceiver, PolicyService],
) -> None:
    up, receiver, service = platform
    hook_input = {"hook_event_name": "Notification", "session_id": "s-async", "message": "done", "cwd": "/tmp"}
    event_id = post(up, hook_input).headers["x-hookbus-event-id"]
    (request,) = spans_of(receiver, event_id, {"hookbus.request", "hookbus.dispatch"})["hookbus.request"]

    def job() -> ReceivedSpan | None:
        jobs = [s for s in receiver.named("hookbus.job") if s.attributes.get("hookbus.event_id") == event_id]
        return jobs[0] if jobs else None

    found: ReceivedSpan = receiver.wait_for_spans(lambda _: job())
    assert found.role == "worker" and found.parent_span_id == ""
    assert found.trace_id != request.trace_id and found.links == [(request.trace_id, request.span_id)]
    handler = [s for s in receiver.trace(found.trace_id) if s.name == "hookbus.handler"]
    assert handler and handler[0].parent_span_id == found.span_id
    # The delivery to the service carried the job's context.
    assert any(h.get("traceparent", "").split("-")[1] == found.trace_id for h in service.headers)


def test_latency_exemplars_in_openmetrics_and_none_in_the_classic_text(
    platform: tuple[UpProcess, OtlpReceiver, PolicyService], tmp_path: Path
) -> None:
    up, receiver, _ = platform
    reply = post(up, bash("echo exemplar"))
    (request,) = spans_of(receiver, reply.headers["x-hookbus-event-id"], {"hookbus.request"})["hookbus.request"]
    answer = httpx.get(f"{up.url}/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10)
    assert answer.headers["content-type"].startswith("application/openmetrics-text")
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}  # type: ignore[no-untyped-call]  # strict
    exemplars = [
        s.exemplar.labels["trace_id"]
        for s in families["hookbus_decision_latency_seconds"].samples
        if s.exemplar is not None and s.labels.get("event") == "PreToolUse"
    ]
    assert exemplars and set(exemplars) <= {s.trace_id for s in receiver.named("hookbus.request")}
    classic = httpx.get(f"{up.url}/metrics", timeout=10)
    assert classic.headers["content-type"].startswith("text/plain") and "trace_id" not in classic.text
    checked = promtool("check", "metrics", cwd=tmp_path, stdin=classic.text)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert request.trace_id  # the event traced above is one of those the exemplars may name


def test_sampling_is_honoured_and_denials_kept_when_asked(tmp_path: Path) -> None:
    """A 0 ratio exports nothing, but for a sampled parent from the agent (within its tenant's
    share of forced traces) and, with ``HOOKBUS_TRACE_ALWAYS=deny``, for a denied event (decided
    at its end)."""
    service = PolicyService()
    try:
        with OtlpReceiver() as receiver:
            policy = write_policy(tmp_path / "policy.yaml", service.url)
            env = {
                "HOOKBUS_TOKENS": f"acme:{TOKEN}",
                "HOOKBUS_TRACE_ALWAYS": "deny",
                "HOOKBUS_TRACE_FORCED_PER_S": "0.001",  # one forced trace, the next in 1000 s
                **otel_env(receiver, OTEL_TRACES_SAMPLER_ARG="0"),
            }
            with running_up(tmp_path, policy, env) as up:
                allowed = post(up, bash("ls")).headers["x-hookbus-event-id"]
                trace_id = secrets.token_hex(16)
                parent = f"00-{trace_id}-{secrets.token_hex(8)}-01"
                chosen = post(up, bash("pwd"), {"traceparent": parent}).headers["x-hookbus-event-id"]
                over_id = secrets.token_hex(16)
                over_parent = f"00-{over_id}-{secrets.token_hex(8)}-01"
                over = post(up, bash("pwd"), {"traceparent": over_parent}).headers["x-hookbus-event-id"]
                denied = post(up, bash("git push --force origin main")).headers["x-hookbus-event-id"]
                spans = spans_of(receiver, denied, {"hookbus.request", "hookbus.dispatch", "hookbus.handler"})
                assert spans["hookbus.request"][0].attributes["hookbus.keep"] is True
                assert spans["hookbus.dispatch"][0].parent_span_id == spans["hookbus.request"][0].span_id
                assert record_of(up, denied)["tid"] == spans["hookbus.request"][0].trace_id
                assert spans_of(receiver, chosen, {"hookbus.request", "hookbus.dispatch"})
                assert receiver.trace(trace_id)
                assert "tid" not in record_of(up, allowed)
                # The allowed one and the forced one past the tenant's share were recorded before
                # the denied one: none of their spans came.
                assert not [s for s in receiver.spans if s.attributes.get("hookbus.event_id") in (allowed, over)]
                assert not receiver.trace(over_id) and "tid" not in record_of(up, over)
                metrics = httpx.get(f"{up.url}/metrics", timeout=10).text
                assert "hookbus_traces_forced_ignored_total 1.0" in metrics.splitlines()
    finally:
        service.close()


@pytest.mark.timeout(120)
def test_the_consoles_detail_view_shows_the_trace_id(platform: tuple[UpProcess, OtlpReceiver, PolicyService]) -> None:
    """Debian's chromium (Playwright, no downloaded browser) opens the traced platform's console."""
    if not CHROMIUM.exists():
        missing("no /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    up, receiver, _ = platform
    reply = post(up, bash("git push --force origin console", session="s-console"))
    (request,) = spans_of(receiver, reply.headers["x-hookbus-event-id"], {"hookbus.request"})["hookbus.request"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{up.url}/ui")
            expect(page.locator("#token-dialog")).to_be_visible(timeout=10_000)
            page.fill("#token-input", TOKEN)
            page.click("#token-ok")
            deny = page.locator('#feed li[data-verdict="deny"]', has_text="s-console")
            expect(deny).to_be_visible(timeout=10_000)
            deny.click()
            detail = page.locator("#detail")
            expect(detail).to_contain_text("trace id")
            expect(detail).to_contain_text(request.trace_id)
        finally:
            browser.close()


def test_spans_still_batched_when_the_platform_stops_are_exported(tmp_path: Path) -> None:
    """A batch delay longer than the run: only stopping ``up`` can export the spans, and does."""
    service = PolicyService()
    try:
        with OtlpReceiver() as receiver:
            policy = write_policy(tmp_path / "policy.yaml", service.url)
            env = {"HOOKBUS_TOKENS": f"acme:{TOKEN}", **otel_env(receiver), "OTEL_BSP_SCHEDULE_DELAY": "600000"}
            with running_up(tmp_path, policy, env) as up:
                event_id = post(up, bash("ls")).headers["x-hookbus-event-id"]
                hook_input = {"hook_event_name": "Notification", "session_id": "s", "message": "m", "cwd": "/tmp"}
                job_id = post(up, hook_input).headers["x-hookbus-event-id"]
                wait_for(lambda: len(service.headers) >= 2, timeout_s=20, interval_s=0.05)  # the job ran
                assert receiver.spans == []
            roles = {s.role for s in receiver.spans if s.attributes.get("hookbus.event_id") in (event_id, job_id)}
            assert roles == {"gateway", "dispatcher", "worker"}
    finally:
        service.close()
