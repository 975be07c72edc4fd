"""The metrics server of a role on its own (/metrics, /healthz, a token) and the series at start-up."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY

from bus.errors import ConfigError
from bus.runtime import metrics
from hookbus.platform.redis_server import free_port


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


def test_the_metrics_server_answers_metrics_and_healthz_on_loopback(served: list[object]) -> None:
    port = free_port()
    served.append(metrics.start_http_server(port))
    assert listening_on(port) == {"127.0.0.1"}
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
    scraped = httpx.get(f"{base}/metrics")
    assert scraped.status_code == 200 and "hookbus_decisions_total" in scraped.text
    missing = httpx.get(f"{base}/nope")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert metrics.start_http_server(None) is None


def test_the_metrics_token_guards_metrics_but_not_healthz(served: list[object]) -> None:
    port = free_port()
    served.append(metrics.start_http_server(port, "127.0.0.1", token="m-secret"))
    base = f"http://127.0.0.1:{port}"
    refused = httpx.get(f"{base}/metrics")
    assert refused.status_code == 401 and refused.json() == {
        "error": "unauthorized",
        "detail": "missing or wrong metrics token",
    }
    assert httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer m-secret"}).status_code == 200
    assert httpx.get(f"{base}/healthz").status_code == 200


def test_a_metrics_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"^metrics port {port} is in use; pass --metrics-port$"):
            metrics.start_http_server(port)


def test_authorized_compares_bearer_tokens() -> None:
    assert metrics.authorized(None, None) and metrics.authorized("anything", "")
    assert metrics.authorized("Bearer t0k", "t0k") and metrics.authorized("bearer  t0k ", "t0k")
    assert not metrics.authorized(None, "t0k") and not metrics.authorized("Basic t0k", "t0k")
    assert not metrics.authorized("Bearer t0", "t0k")


def test_init_metrics_creates_the_known_series_at_zero() -> None:
    metrics.init_metrics()
    metrics.init_metrics()  # idempotent
    text = metrics.render()[0].decode()
    for line in (
        'hookbus_fail_open_total{event="PermissionRequest",reason="redis_unavailable"}',
        'hookbus_decisions_total{decision="none",event="UserPromptSubmit"}',
        'hookbus_role_restarts_total{role="worker"}',
        'hookbus_hook_errors_total{outcome="timeout",type="http"}',
        'hookbus_dead_letters_total{stream="blocking"}',
    ):
        assert line in text, line
    # The series exists (its value may not be 0: other tests of this process may have queued jobs).
    assert REGISTRY.get_sample_value("hookbus_async_jobs_total", {"status": "queued"}) is not None
    # No zero series up front for an event that never waits (other tests of this process may
    # have counted a real Notification fail-open while Redis was down: that one is not zero).
    fail_open = text.split("hookbus_fail_open_total", 1)[1].split("# HELP", 1)[0]
    notification = [line for line in fail_open.splitlines() if 'event="Notification"' in line]
    assert not [line for line in notification if line.endswith(" 0.0")], notification
