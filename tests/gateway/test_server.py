"""``hookbus gateway`` as a process: its help, a port in use, no policy, metrics from the start."""

from __future__ import annotations

import contextlib
import http.client
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client import Counter, Histogram
from prometheus_client.parser import text_string_to_metric_families

from bus.runtime.metrics import Metrics
from hookbus.platform.redis_server import free_port
from tests.conftest import DENY_RM, REPO, clean_env, port_open, wait_for

pytestmark = pytest.mark.system  # starts processes (or servers) itself


def gateway(*args: str, **popen: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "hookbus", "gateway", *args],
        env=clean_env(),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_help_documents_host_port_and_insecure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookbus", "gateway", "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    text = " ".join(done.stdout.split())
    assert "--host HOST address to bind (default $HOOKBUS_HOST or 127.0.0.1)" in text
    assert "--port PORT port to bind (default $HOOKBUS_PORT or 8787)" in text
    assert "--insecure allow a non-loopback bind with no tokens" in text


def test_a_port_in_use_is_one_line_and_nothing_claims_to_listen(
    redis_url: str, write_policy: Callable[..., Path]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = gateway("--config", str(write_policy(DENY_RM)), "--redis-url", redis_url, "--port", str(port))
        out, err = process.communicate(timeout=30)
    assert (process.returncode, out) == (1, "")
    assert err == f"hookbus: port {port} is in use; pass --port\n"


@pytest.mark.timeout(60)
def test_a_kept_alive_connection_idle_longer_than_clients_keep_theirs_is_still_served(
    redis_url: str, write_policy: Callable[..., Path], children: list[subprocess.Popen[bytes]]
) -> None:
    # httpx keeps an idle connection 5 s and undici 4 s: a gateway closing its side at 5 s (uvicorn's
    # default) races a client reusing it, and the agent takes the failed request as no verdict.
    port = free_port()
    process = gateway("--config", str(write_policy(DENY_RM)), "--redis-url", redis_url, "--port", str(port))
    children.append(process)  # type: ignore[arg-type]
    wait_for(lambda: port_open(port) or process.poll() is not None, timeout_s=30)
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    with contextlib.closing(conn):
        conn.request("GET", "/healthz")
        assert conn.getresponse().read() and conn.sock is not None
        conn.sock.settimeout(7.0)
        with pytest.raises(TimeoutError):  # idle for 7 s, and the gateway has not closed its side
            conn.sock.recv(1)
        conn.sock.settimeout(5.0)
        conn.request("GET", "/healthz")  # on the same connection
        assert conn.getresponse().status == 200


def test_no_policy_is_loud_and_every_metric_exists_before_the_first_event(
    redis_url: str, children: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    process = gateway("--redis-url", redis_url, "--port", str(port))
    children.append(process)  # type: ignore[arg-type]
    wait_for(lambda: port_open(port) or process.poll() is not None, timeout_s=30)
    assert process.poll() is None
    base = f"http://127.0.0.1:{port}"
    text = httpx.get(f"{base}/metrics", timeout=5).text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    m = Metrics()  # the families, on a registry of their own
    ours = [value for value in vars(m).values() if isinstance(value, Counter | Histogram)]
    assert len(ours) >= 14
    for family in ours:
        assert family._name in families, family._name
    for family in (
        m.decisions,
        m.decision_latency,
        m.fail_open,
        m.hook_duration,
        m.async_jobs,
        m.fail_closed,
        m.shadow_decisions,
        m.stop_guard,
        m.hook_errors,
        m.expired,
        m.dead_letters,
        m.rejected,
        m.spooled,
        m.role_restarts,
    ):
        assert families[family._name].samples, family._name  # series at 0, not just the HELP line
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for family in families.values() for s in family.samples
    }
    for key in (
        ("hookbus_fail_open_total", (("event", "PreToolUse"), ("reason", "timeout"))),
        ("hookbus_fail_open_total", (("event", "Stop"), ("reason", "hook_timeout"))),
        ("hookbus_decisions_total", (("decision", "defer"), ("event", "PreToolUse"))),
        ("hookbus_rejected_requests_total", (("code", "429"),)),
        ("hookbus_async_jobs_total", (("status", "dead"),)),
        ("hookbus_spooled_events_total", (("status", "dropped"),)),
    ):
        assert samples[key] == 0.0, key
    # Cardinality stays sane: non-blocking events are not pre-created.
    assert not any(
        name == "hookbus_decisions_total" and ("event", "Notification") in labels for name, labels in samples
    )
    policy = httpx.get(f"{base}/readyz", timeout=5).json()["checks"]["policy"]
    assert (policy["empty"], policy["handlers"]) == (True, 0)
    process.terminate()
    _, err = process.communicate(timeout=30)
    assert err.splitlines()[0] == (
        "hookbus: warning: no policy (no --config and no HOOKBUS_CONFIG): every event will get no opinion"
    )
