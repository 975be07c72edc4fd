"""``hookbus up``: the whole platform from one command, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hookbus.redis_server import free_port
from tests.conftest import REPO, wait_for

POLICY = REPO / "examples" / "policy.yaml"


def children_of(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def ready(port: int) -> bool:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).json()
    except (httpx.HTTPError, ValueError):
        return False
    return bool(answer["ready"] and answer["checks"].get("dispatchers", {}).get("alive"))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_up_serves_decisions_and_stops_every_child(tmp_path: Path, stop_signal: signal.Signals) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    up = subprocess.Popen(
        [sys.executable, "-m", "hookbus", "up", "--config", str(POLICY), "--port", str(port), "--dispatchers", "2",
         "--state-dir", str(tmp_path / "state")],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: ready(port) or up.poll() is not None, timeout_s=60, interval_s=0.1)
        assert up.poll() is None, up.communicate()
        family = children_of(up.pid)
        assert len(family) >= 5  # redis, gateway, 2 dispatchers, worker
        deny = httpx.post(f"http://127.0.0.1:{port}/v1/hooks", json={
            "hook_event_name": "PreToolUse", "session_id": "s-up", "tool_name": "Bash",
            "tool_input": {"command": "sudo rm -rf /"}}, timeout=5).json()
        assert deny["hookSpecificOutput"]["permissionDecision"] == "deny"
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'hookbus_hook_duration_seconds_count{type="rule"}' in metrics  # the dispatchers' metrics too

        tail = subprocess.run([sys.executable, "-m", "hookbus", "tail", "--from-start", "--count", "1", "--json"],
                              env={**env, "HOOKBUS_STATE_DIR": str(tmp_path / "state")}, capture_output=True,
                              timeout=30, cwd=REPO)
        record = json.loads(tail.stdout)
        assert (record["event"], record["decision"], record["session_id"]) == ("PreToolUse", "deny", "s-up")

        up.send_signal(stop_signal)
        out, err = up.communicate(timeout=30)
        assert up.returncode == 0, err.decode()
        assert b"embedded Redis" in out and b"stopped" in out
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in family), timeout_s=10)
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_up_refuses_a_broken_policy_with_its_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("hooks:\n  PreToolUse:\n    - hooks:\n        - {type: command, command: x, timeout: 0}\n")
    result = subprocess.run([sys.executable, "-m", "hookbus", "up", "--config", str(bad), "--port", str(free_port()),
                             "--state-dir", str(tmp_path / "state")], capture_output=True, timeout=30, cwd=tmp_path)
    assert result.returncode == 1
    assert b"bad.yaml:4" in result.stderr and b"timeout" in result.stderr


def test_policy_check_reports_every_error_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "x", "bogus": 1}]}],
                                         "Stop": [{"hooks": [{"type": "nope"}]}]}}, indent=2))
    result = subprocess.run([sys.executable, "-m", "hookbus", "policy", "check", str(bad)], capture_output=True,
                            timeout=30)
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert any("bogus" in line and line.startswith(f"{bad}:") for line in lines)
    assert any("nope" in line for line in lines)
    ok = subprocess.run([sys.executable, "-m", "hookbus", "policy", "check", str(POLICY)], capture_output=True,
                        timeout=30)
    assert ok.returncode == 0 and ok.stdout.startswith(b"ok: ")
