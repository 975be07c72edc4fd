"""The metrics server of a role on its own (/metrics, /healthz, a token) and the series at start-up."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bus.errors import ConfigError
from bus.runtime.metrics import Metrics
from bus.runtime.metrics_server import authorized, start_http_server
from hookbus.platform.redis_server import free_port


@pytest.fixture
def m() -> Metrics:
    """Metrics of this test alone (a registry of its own)."""
    return Metrics()


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses a TCP socket listens on at ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


@pytest.fixture
def served() -> Iterator[list[object]]:
    servers: list[object] = []
    yield servers
    for server in servers:
        server.shutdown()  # type: ignore[attr-defined]
        server.server_close()  # type: ignore[attr-defined]


def test_the_metrics_server_answers_metrics_and_healthz_on_loopback(served: list[object], m: Metrics) -> None:
    port = free_port()
    m.init()
    served.append(start_http_server(m, port))
    assert listening_on(port) == {"127.0.0.1"}
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
    scraped = httpx.get(f"{base}/metrics")
    assert scraped.status_code == 200 and "hookbus_decisions_total" in scraped.text
    missing = httpx.get(f"{base}/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert start_http_server(m, None) is None


def test_the_metrics_token_guards_metrics_but_not_healthz(served: list[object], m: Metrics) -> None:
    port = free_port()
    served.append(start_http_server(m, port, "127.0.0.1", token="m-secret"))
    base = f"http://127.0.0.1:{port}"
    refused = httpx.get(f"{base}/metrics")
    assert refused.status_code == 401 and refused.json() == {
        "error": "unauthorized",
        "detail": "missing or wrong metrics token",
    }
    assert httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer m-secret"}).status_code == 200
    assert httpx.get(f"{base}/healthz").status_code == 200


def test_a_metrics_port_in_use_is_a_clear_error(m: Metrics) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"^metrics port {port} is in use; pass --metrics-port$"):
            start_http_server(m, port)


def test_authorized_compares_bearer_tokens() -> None:
    assert authorized(None, None) and authorized("anything", "")
    assert authorized("Bearer t0k", "t0k") and authorized("bearer  t0k ", "t0k")
    assert not authorized(None, "t0k") and not authorized("Basic t0k", "t0k")
    assert not authorized("Bearer t0", "t0k")


def test_init_metrics_creates_the_known_series_at_zero(m: Metrics) -> None:
    m.init()
    m.init()  # idempotent
    text = m.render()[0].decode()
    for line in (
        'hookbus_fail_open_total{event="PermissionRequest",reason="redis_unavailable"}',
        'hookbus_decisions_total{decision="none",event="UserPromptSubmit"}',
        'hookbus_role_restarts_total{role="worker"}',
        'hookbus_hook_errors_total{outcome="timeout",type="http"}',
        'hookbus_dead_letters_total{stream="blocking"}',
    ):
        assert line in text, line
    assert m.registry.get_sample_value("hookbus_async_jobs_total", {"status": "queued"}) == 0
    # No series up front for an event that never waits.
    fail_open = text.split("hookbus_fail_open_total", 1)[1].split("# HELP", 1)[0]
    assert 'event="PreToolUse"' in fail_open and 'event="Notification"' not in fail_open
