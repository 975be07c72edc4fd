"""``hookbus up``: the whole platform from one command, and Ctrl-C leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bus.policy.loading import load_policy
from hookbus.platform.redis_server import free_port
from tests.conftest import REPLY_KEY_ENV, REPO, ready, wait_for

pytestmark = pytest.mark.system  # starts processes (or servers) itself

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


@pytest.mark.timeout(90)
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGTERM])
def test_up_serves_decisions_and_stops_every_child(tmp_path: Path, stop_signal: signal.Signals) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hookbus",
            "up",
            "--config",
            str(POLICY),
            "--port",
            str(port),
            "--dispatchers",
            "2",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: ready(port) or up.poll() is not None, timeout_s=60, interval_s=0.1)
        assert up.poll() is None, up.communicate()
        family = children_of(up.pid)
        assert len(family) >= 5  # redis, gateway, 2 dispatchers, worker
        deny = httpx.post(
            f"http://127.0.0.1:{port}/v1/hooks",
            json={
                "hook_event_name": "PreToolUse",
                "session_id": "s-up",
                "tool_name": "Bash",
                "tool_input": {"command": "sudo rm -rf /"},
            },
            timeout=5,
        ).json()
        assert deny["hookSpecificOutput"]["permissionDecision"] == "deny"
        # One reply key, made by `up` and shared by its roles (so the deny above verified); it
        # is in their environment only: never in up's output, a file of the state folder or Redis.
        reply_keys = {_environ(pid).get("HOOKBUS_REPLY_KEY") for pid in family} - {None}
        assert len(reply_keys) == 1
        reply_key = str(reply_keys.pop()).encode()
        assert len(reply_key) >= 32
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'hookbus_hook_duration_seconds_count{type="rule"}' in metrics  # the dispatchers' metrics too

        tail = subprocess.run(
            [sys.executable, "-m", "hookbus", "tail", "--from-start", "--count", "1", "--json"],
            env={**env, "HOOKBUS_STATE_DIR": str(tmp_path / "state")},
            capture_output=True,
            timeout=30,
            cwd=REPO,
        )
        record = json.loads(tail.stdout)
        assert (record["event"], record["decision"], record["session_id"]) == ("PreToolUse", "deny", "s-up")

        up.send_signal(stop_signal)
        out, err = up.communicate(timeout=30)
        assert up.returncode == 0, err.decode()
        assert b"embedded Redis" in out and b"stopped" in out
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in family), timeout_s=10)
        assert reply_key not in out + err
        written = [path for path in (tmp_path / "state").rglob("*") if path.is_file()]
        assert any(path.name.startswith("appendonly") for path in written)  # Redis's own files are read too
        assert [path for path in written if reply_key in path.read_bytes()] == []
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw.split(b"\0") if b"=" in item)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_up_refuses_a_broken_policy_with_its_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("hooks:\n  PreToolUse:\n    - hooks:\n        - {type: command, command: x, timeout: 0}\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookbus",
            "up",
            "--config",
            str(bad),
            "--port",
            str(free_port()),
            "--state-dir",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        timeout=30,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert b"bad.yaml:4" in result.stderr and b"timeout" in result.stderr


def test_policy_check_reports_every_error_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [{"hooks": [{"type": "command", "command": "x", "bogus": 1}]}],
                    "Stop": [{"hooks": [{"type": "nope"}]}],
                }
            },
            indent=2,
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "hookbus", "policy", "check", str(bad)], capture_output=True, timeout=30
    )
    assert result.returncode == 1
    lines = result.stderr.decode().splitlines()
    assert any("bogus" in line and line.startswith(f"{bad}:") for line in lines)
    assert any("nope" in line for line in lines)
    ok = subprocess.run(
        [sys.executable, "-m", "hookbus", "policy", "check", str(POLICY)], capture_output=True, timeout=30
    )
    assert ok.returncode == 0 and ok.stdout.startswith(b"ok: ")


# -- one platform per state folder, restarts, SIGHUP, status and stop -----------------------------

DENY_A = 'hooks:\n  PreToolUse:\n    - hooks: [{type: rule, deny: ["Bash(rm -rf /aaaa)"], reason: "not there"}]\n'


def hookbus_cli(
    *args: str, cwd: Path = REPO, timeout_s: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "hookbus", *args],
        env=full_env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


class Up:
    """A ``hookbus up`` child whose output goes to files (a pipe nobody reads could fill up)."""

    def __init__(
        self, tmp_path: Path, state: Path, port: int, *args: str, name: str = "up", env: dict[str, str] | None = None
    ) -> None:
        self.port, self.state = port, state
        self.out, self.err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}, **(env or {})}
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "hookbus", "up", "--port", str(port), "--state-dir", str(state), *args],
                env=env,
                cwd=tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        return self.err.read_text()

    def wait_ready(self) -> None:
        wait_for(lambda: ready(self.port) or self.process.poll() is not None, timeout_s=60, interval_s=0.1)
        assert self.process.poll() is None, self.stderr()

    def roles(self) -> dict[str, list[int | None]]:
        found: dict[str, list[int | None]] = {}
        state = json.loads((self.state / "hookbus.json").read_text())
        for role in state["roles"]:
            found.setdefault(role["role"], []).append(role["pid"])
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


@pytest.fixture
def ups() -> Iterator[list[Up]]:
    started: list[Up] = []
    yield started
    for up in started:
        up.stop()


def deny_of(port: int, command: str) -> str | None:
    reply = httpx.post(
        f"http://127.0.0.1:{port}/v1/hooks",
        json={
            "hook_event_name": "PreToolUse",
            "session_id": "s-up",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        },
        timeout=5,
    ).json()
    decision: str | None = (reply.get("hookSpecificOutput") or {}).get("permissionDecision")
    return decision


@pytest.mark.timeout(120)
def test_one_platform_per_folder_restarts_reloads_and_stops(tmp_path: Path, ups: list[Up]) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(DENY_A)
    state, port = tmp_path / "state", free_port()
    up = Up(tmp_path, state, port, "--config", str(policy))
    ups.append(up)
    up.wait_ready()

    # A second platform in the same folder is refused at once, naming the running one.
    second = hookbus_cli("up", "--port", str(free_port()), "--state-dir", str(state), timeout_s=30)
    assert second.returncode == 1 and second.stdout == ""
    assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr
    assert f"pid {up.pid}, port {port}" in second.stderr and "--state-dir" in second.stderr, second.stderr

    status = hookbus_cli("status", "--state-dir", str(state))
    assert status.returncode == 0, status.stderr
    revision = load_policy([policy]).revision
    for text in (f"(pid {up.pid}) running", "gateway", "dispatcher", "worker", "embedded", f"revision {revision}"):
        assert text in status.stdout, status.stdout

    # The async worker takes only the CPU the decision path leaves (SCHED_IDLE); the others are normal.
    roles = up.roles()
    (worker,) = roles["worker"]
    assert worker is not None
    wait_for(lambda: os.sched_getscheduler(worker) == os.SCHED_IDLE, timeout_s=30)
    for pid in (*roles["gateway"], *roles["dispatcher"]):
        assert pid is not None and os.sched_getscheduler(pid) == os.SCHED_OTHER

    # A crashed role is restarted, logged and counted; the platform keeps serving.
    (killed,) = up.roles()["dispatcher"]
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    wait_for(lambda: up.roles()["dispatcher"][0] not in (None, killed), timeout_s=30)
    up.wait_ready()
    assert f"dispatcher (pid {killed}) exited (killed by SIGKILL); restarting it in 0.5s" in up.stderr()
    metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    assert 'hookbus_role_restarts_total{role="dispatcher"} 1.0' in metrics
    assert 'hookbus_role_restarts_total{role="gateway"} 0.0' in metrics
    assert "restarted 1x" in hookbus_cli("status", "--state-dir", str(state)).stdout
    assert deny_of(port, "rm -rf /aaaa") == "deny"

    # SIGHUP reloads the policy in every role. The edit keeps the file's size and mtime, so that
    # only the signal (not the file watcher) can make the roles see it.
    before = up.roles()
    family = children_of(up.pid)
    stat = policy.stat()
    policy.write_text(DENY_A.replace("/aaaa", "/bbbb"))
    os.utime(policy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    new_revision = load_policy([policy]).revision
    up.process.send_signal(signal.SIGHUP)
    wait_for(lambda: deny_of(port, "rm -rf /bbbb") == "deny", timeout_s=20, interval_s=0.1)
    assert deny_of(port, "rm -rf /aaaa") is None
    pids = [pid for group in before.values() for pid in group]
    wait_for(
        lambda: all(f"hookbus.policy[{pid}]: policy reloaded: revision {new_revision}" in up.stderr() for pid in pids),
        timeout_s=20,
    )
    assert up.process.poll() is None and up.roles() == before  # nothing was restarted
    wait_for(
        lambda: f"revision {new_revision}" in hookbus_cli("status", "--state-dir", str(state)).stdout, timeout_s=10
    )

    # tail finds the platform's Redis from any directory, through the state folder.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tail = hookbus_cli(
        "tail",
        "--state-dir",
        str(state),
        "--from-start",
        "--count",
        "1",
        "--decision",
        "deny",
        "--json",
        cwd=elsewhere,
        timeout_s=30,
    )
    assert json.loads(tail.stdout)["decision"] == "deny", tail.stderr

    stop = hookbus_cli("stop", "--state-dir", str(state))
    assert (stop.returncode, stop.stdout) == (0, f"hookbus: stopped hookbus up (pid {up.pid}) from {state}\n")
    assert not any(_alive(pid) for pid in family)  # stop returns once every role and Redis are gone
    assert up.process.wait(timeout=10) == 0
    after = hookbus_cli("status", "--state-dir", str(state))
    assert (after.returncode, after.stdout) == (1, f"hookbus: nothing running from {state}\n")
    assert hookbus_cli("stop", "--state-dir", str(state)).returncode == 0  # nothing to stop is fine


@pytest.mark.timeout(120)
def test_a_role_that_cannot_run_with_its_configuration_stops_everything_at_once(tmp_path: Path, ups: list[Up]) -> None:
    # The dispatcher is told to take partition 5 of a one-partition bus: restarting it cannot help.
    up = Up(tmp_path, tmp_path / "state", free_port(), env={"HOOKBUS_DISPATCH_PARTITIONS": "5"})
    ups.append(up)
    assert up.process.wait(timeout=60) == 1
    err = up.stderr()
    assert "hookbus: --partitions names 5, but the policy has 1 partition(s)" in err
    assert "cannot run with this configuration; stopping everything" in err
    assert "restarting it" not in err


@pytest.mark.timeout(120)
def test_a_crash_loop_stops_everything_with_a_message(tmp_path: Path, ups: list[Up]) -> None:
    up = Up(tmp_path, tmp_path / "state", free_port(), "--restart-limit", "1")
    ups.append(up)
    up.wait_ready()
    family = children_of(up.pid)
    assert "hookbus: warning: no policy (no --config and no HOOKBUS_CONFIG): every event will get no opinion" in (
        up.stderr()
    )
    (first,) = up.roles()["worker"]
    assert first is not None
    os.kill(first, signal.SIGKILL)
    second = wait_for(lambda: (pid := up.roles()["worker"][0]) not in (None, first) and pid, timeout_s=30)
    os.kill(second, signal.SIGKILL)
    assert up.process.wait(timeout=60) == 1
    assert (
        f"hookbus: worker exited 2 times within 60s (last: pid {second}, killed by SIGKILL); "
        "giving up and stopping everything"
    ) in up.stderr()
    wait_for(lambda: not any(_alive(pid) for pid in family), timeout_s=10)
    assert hookbus_cli("status", "--state-dir", str(up.state)).returncode == 1


@pytest.mark.timeout(120)
def test_a_killed_platform_leaves_no_stale_lock(tmp_path: Path, ups: list[Up]) -> None:
    state, port = tmp_path / "state", free_port()
    first = Up(tmp_path, state, port, "--config", str(POLICY), name="first")
    ups.append(first)
    first.wait_ready()
    family = children_of(first.pid)
    first.process.send_signal(signal.SIGKILL)  # no clean-up at all
    first.process.wait(timeout=10)
    wait_for(lambda: not any(_alive(pid) for pid in family), timeout_s=20)
    assert hookbus_cli("status", "--state-dir", str(state)).returncode == 1
    again = Up(tmp_path, state, port, "--config", str(POLICY), name="again")
    ups.append(again)
    again.wait_ready()
    assert deny_of(port, "sudo rm -rf /") == "deny"
    assert hookbus_cli("stop", "--state-dir", str(state)).returncode == 0
    assert again.process.wait(timeout=10) == 0


def test_up_on_a_port_in_use_is_one_line_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = hookbus_cli("up", "--port", str(port), "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"hookbus: port {port} is in use; pass --port\n"
    assert not (tmp_path / "state" / "redis").exists()


def test_up_with_a_missing_plugin_is_one_line(tmp_path: Path) -> None:
    policy = tmp_path / "plugins.yaml"
    policy.write_text("hookbus:\n  plugins: [no_such_plugin_here]\n")
    result = hookbus_cli(
        "up", "--config", str(policy), "--port", str(free_port()), "--state-dir", str(tmp_path / "state"), cwd=tmp_path
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"{policy}: hookbus.plugins[0]: cannot import plugin 'no_such_plugin_here': "
        "ModuleNotFoundError: No module named 'no_such_plugin_here'\n"
    )


def test_a_dispatcher_with_a_missing_plugin_is_one_line(tmp_path: Path, redis_url: str) -> None:
    policy = tmp_path / "plugins.yaml"
    policy.write_text("hookbus:\n  plugins: [no_such_plugin_here]\n")
    result = hookbus_cli(
        "dispatcher", "--config", str(policy), "--redis-url", redis_url, cwd=tmp_path, env=REPLY_KEY_ENV
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1] == (
        "hookbus: cannot load plugin(s): no_such_plugin_here: ModuleNotFoundError: No module named "
        "'no_such_plugin_here'"
    )


@pytest.mark.parametrize("role", ["gateway", "dispatcher"])
def test_a_role_started_on_its_own_without_a_reply_key_is_one_line(role: str, tmp_path: Path, redis_url: str) -> None:
    # Not a key of its own: the other roles could not verify its replies, or it theirs.
    result = hookbus_cli(role, "--redis-url", redis_url, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == (
        "hookbus: no reply key: set HOOKBUS_REPLY_KEY (or HOOKBUS_REPLY_KEY_FILE) to the same secret on every "
        "gateway and dispatcher, e.g. python -c 'import secrets; print(secrets.token_hex(32))'\n"
    )
    short = hookbus_cli(role, "--redis-url", redis_url, cwd=tmp_path, env={"HOOKBUS_REPLY_KEY": "too-short"})
    assert short.returncode == 1 and "at least 32 characters" in short.stderr
    assert "too-short" not in short.stderr
