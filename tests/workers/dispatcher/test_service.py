"""A dispatcher or worker run on its own: its metrics port (loopback, /healthz, a token) and SIGHUP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from bus.errors import ConfigError
from bus.runtime.settings import Settings
from hookbus.platform.redis_server import free_port
from tests.conftest import DENY_RM, REPO, clean_env, port_open, wait_for
from workers.jobs.worker import set_cpu_priority


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses a TCP socket listens on at ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, _, hex_port = fields[1].partition(":")
        if fields[3] == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


@pytest.mark.parametrize("role", ["dispatcher", "worker"])
def test_a_role_serves_metrics_on_loopback_with_a_token_and_reloads_on_sighup(
    role: str,
    redis_url: str,
    write_policy: Callable[..., Path],
    tmp_path: Path,
    children: list[subprocess.Popen[bytes]],
) -> None:
    port = free_port()
    log = tmp_path / "role.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hookbus",
                role,
                "--config",
                str(write_policy(DENY_RM)),
                "--redis-url",
                redis_url,
                "--metrics-port",
                str(port),
            ],
            env=clean_env(HOOKBUS_METRICS_TOKEN="m-secret"),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    children.append(process)
    wait_for(lambda: port_open(port) or process.poll() is not None, timeout_s=30)
    assert process.poll() is None, log.read_text()
    assert listening_on(port) == {"127.0.0.1"}
    base = f"http://127.0.0.1:{port}"
    assert httpx.get(f"{base}/healthz", timeout=5).json() == {"status": "ok"}
    assert httpx.get(f"{base}/metrics", timeout=5).status_code == 401
    scraped = httpx.get(f"{base}/metrics", headers={"Authorization": "Bearer m-secret"}, timeout=5)
    assert scraped.status_code == 200
    assert 'hookbus_hook_errors_total{outcome="timeout",type="command"} 0.0' in scraped.text

    # Wait for the role's reload handler (the dispatcher logs "serving", the worker "Starting worker").
    wait_for(lambda: "serving" in log.read_text() or "Starting worker" in log.read_text(), timeout_s=30)
    process.send_signal(signal.SIGHUP)
    wait_for(lambda: f"hookbus.policy[{process.pid}]: policy reloaded" in log.read_text(), timeout_s=20)
    assert process.poll() is None
    process.terminate()
    assert process.wait(timeout=30) == 0, log.read_text()


def test_metrics_host_binds_where_asked(redis_url: str, children: list[subprocess.Popen[bytes]]) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hookbus",
            "dispatcher",
            "--redis-url",
            redis_url,
            "--metrics-port",
            str(port),
            "--metrics-host",
            "0.0.0.0",
        ],
        env=clean_env(),
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    children.append(process)
    wait_for(lambda: port_open(port) or process.poll() is not None, timeout_s=30)
    assert listening_on(port) == {"0.0.0.0"}


def test_sighup_without_a_policy_file_is_harmless(
    redis_url: str, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "role.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "hookbus", "dispatcher", "--redis-url", redis_url],
            env=clean_env(),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    children.append(process)
    wait_for(lambda: "serving" in log.read_text() or process.poll() is not None, timeout_s=30)
    process.send_signal(signal.SIGHUP)  # its default action would end the process
    wait_for(lambda: "SIGHUP: no policy file to reload (started without --config)" in log.read_text(), timeout_s=20)
    assert process.poll() is None
    process.terminate()
    assert process.wait(timeout=30) == 0


def test_the_console_script_finds_plugins_in_its_working_directory(
    redis_url: str, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    (tmp_path / "local_guard.py").write_text(
        "from bus.hooks.plugins import register_hook\nregister_hook('PreToolUse', lambda hook_input: None)\n"
    )
    (tmp_path / "policy.yaml").write_text("hookbus:\n  plugins: [local_guard]\n")
    log = tmp_path / "role.log"
    console = Path(sys.executable).parent / "hookbus"  # not `python -m`: its sys.path has no working directory
    with log.open("wb") as err:
        process = subprocess.Popen(
            [str(console), "dispatcher", "--config", "policy.yaml", "--redis-url", redis_url],
            env=clean_env(),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    children.append(process)
    wait_for(lambda: "serving" in log.read_text() or process.poll() is not None, timeout_s=30)
    assert process.poll() is None, log.read_text()
    assert "plugin local_guard loaded" in log.read_text()


# -- the worker's CPU priority ----------------------------------------------------------------


def test_worker_cpu_is_read_from_the_environment_and_checked() -> None:
    assert Settings.from_env({}).worker_cpu == "normal"
    assert Settings.from_env({"HOOKBUS_WORKER_CPU": " Idle "}).worker_cpu == "idle"
    with pytest.raises(ConfigError, match=r"HOOKBUS_WORKER_CPU='low' is not one of: normal, idle"):
        Settings.from_env({"HOOKBUS_WORKER_CPU": "low"})


SCHEDULERS = """
import os, threading
from workers.jobs.worker import set_cpu_priority
release = threading.Event()
before = threading.Thread(target=release.wait)
before.start()
set_cpu_priority({choice!r})
seen = []
after = threading.Thread(target=lambda: seen.append(os.sched_getscheduler(0)))
after.start(); after.join()
print(os.sched_getscheduler(0), os.sched_getscheduler(before.native_id), seen[0])
release.set()
"""


@pytest.mark.parametrize(("choice", "expected"), [("idle", "SCHED_IDLE"), ("normal", "SCHED_OTHER")])
@pytest.mark.system
def test_set_cpu_priority_covers_every_thread(choice: str, expected: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCHEDULERS.format(choice=choice)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    policy = getattr(os, expected)
    # this thread, one started before the call, one started after it
    assert done.stdout.split() == [str(policy)] * 3, done.stderr


def test_a_system_without_sched_idle_gets_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refuse(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    set_cpu_priority("idle")
    [record] = [r for r in caplog.records if r.name == "hookbus.worker"]
    assert record.levelname == "WARNING"
    assert "cannot run the worker at idle priority" in record.getMessage()
    assert "running it at normal priority" in record.getMessage()
