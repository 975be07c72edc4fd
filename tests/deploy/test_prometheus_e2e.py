"""A real Prometheus scraping a real ``hookbus up`` with the shipped configuration.

One ``hookbus up`` for the module, on free ports in a temporary state folder, with a policy
that allows, denies, asks and (a command hook sleeping past a short deadline) fails open. The
``prometheus`` binary runs on loopback with a configuration made from
``deploy/prometheus/prometheus-up.yml``: the same job and the same rules, the target rewritten
to the test's port, everything at 1 s, storage in the temporary folder. It scrapes once before
the mix is sent, so that every counter starts at 0 in its storage; then the tests ask its HTTP
API what a dashboard would show and compare it with what was sent.

Without ``prometheus`` on PATH the Prometheus tests are skipped, except under CI, where they
fail. The other checks of the running platform (every dashboard and alert metric exists,
``promtool check metrics``, multiprocess mode across a restart) need only ``hookbus up``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from hookbus.platform.redis_server import free_port
from tests.conftest import clean_env, exposition_samples, policy_yaml, ready, wait_for
from tests.deploy.metric_names import metric_names
from tests.deploy.promtool import promtool, required_binary
from tests.deploy.test_grafana import BLOCK_RATE, dashboard_metric_names

pytestmark = pytest.mark.timeout(150)

REPO = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = REPO / "deploy" / "prometheus"

POLICY = policy_yaml(
    {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {"type": "rule", "deny": ["Bash(rm -rf *)"], "ask": ["Bash(git push *)"], "allow": ["Bash(ls *)"]}
                ],
            }
        ],
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "sleep 1"}]}],
    },
    deadlineSeconds=10.0,
    deadlines={"UserPromptSubmit": 0.3},
)
#: Bash commands by the decision the policy gives them ("none": no rule matches).
MIX = {
    "deny": ["rm -rf /", "rm -rf /tmp/x", "rm -rf ~/src"],
    "ask": ["git push origin main", "git push --tags"],
    "allow": ["ls -la", "ls /tmp", "ls src", "ls -R ."],
    "none": ["echo hi"],
}
#: UserPromptSubmit events, each answered fail-open at its 0.3 s deadline.
FORCED_FAIL_OPENS = 2
#: A planted file from "a previous run": `hookbus up` must clear it before the roles start.
STALE_DENIES = 1000


@dataclasses.dataclass
class Mixed:
    """The running platform after the mix, and what the agents got."""

    port: int
    state_dir: Path
    stdout: Path
    prometheus: str | None
    decisions: Counter[str]
    gateway_fail_opens: int

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


def query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    """An instant query through Prometheus's HTTP API."""
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert answer["status"] == "success", answer
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


def by_label(result: list[dict[str, Any]], label: str) -> dict[str, float]:
    return {series["metric"].get(label, ""): float(series["value"][1]) for series in result}


def eventually(read: Callable[[], Any], expected: Any, timeout_s: float = 30.0) -> None:
    """Poll ``read`` until it returns ``expected`` (the scrape and rule intervals are 1 s)."""
    seen: list[Any] = []

    def matches() -> bool:
        seen[:] = [read()]
        return bool(seen[0] == expected)

    try:
        wait_for(matches, timeout_s=timeout_s, interval_s=0.2)
    except AssertionError:
        raise AssertionError(f"still {seen[0]!r}, expected {expected!r}") from None


def prometheus_config(port: int) -> dict[str, Any]:
    """prometheus-up.yml with its one target moved to ``port`` and every interval at 1 s."""
    config: dict[str, Any] = yaml.safe_load((PROMETHEUS_DIR / "prometheus-up.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="1s", evaluation_interval="1s")
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "hookbus" and job["static_configs"] == [{"targets": ["127.0.0.1:8787"]}]
    job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    return config


def plant_stale_metrics(metrics_dir: Path) -> None:
    metrics_dir.mkdir(parents=True)
    script = (
        "from bus.runtime.metrics import process_metrics; m = process_metrics(); "
        f"m.child(m.decisions, 'PreToolUse', 'deny').inc({STALE_DENIES})"
    )
    env = {**clean_env(), "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
    subprocess.run([sys.executable, "-c", script], env=env, cwd=REPO, check=True, timeout=30)
    assert list(metrics_dir.glob("counter_*.db"))


def send_mix(port: int) -> tuple[Counter[str], int]:
    """Post the mix; the decisions the agents got, and how many were answered fail-open."""
    url = f"http://127.0.0.1:{port}/v1/hooks"
    got: Counter[str] = Counter()
    fail_opens = 0
    with httpx.Client(timeout=15) as client:
        for n, command in enumerate(command for commands in MIX.values() for command in commands):
            answer = client.post(
                url,
                json={
                    "hook_event_name": "PreToolUse",
                    "session_id": f"s-{n}",
                    "tool_name": "Bash",
                    "tool_input": {"command": command},
                },
            )
            got[answer.json().get("hookSpecificOutput", {}).get("permissionDecision", "none")] += 1
        for n in range(FORCED_FAIL_OPENS):
            answer = client.post(
                url,
                json={"hook_event_name": "UserPromptSubmit", "session_id": f"s-late-{n}", "prompt": "take your time"},
            )
            assert answer.json() == {}
            got["none"] += 1
            fail_opens += answer.headers["X-Hookbus-Outcome"] == "fail-open"
    return got, fail_opens


def start_prometheus(folder: Path, port: int) -> tuple[subprocess.Popen[bytes], str]:
    folder.mkdir()
    shutil.copy(PROMETHEUS_DIR / "alerts.yaml", folder / "alerts.yaml")  # rule_files: [alerts.yaml], as shipped
    (folder / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(port)))
    listen = free_port()
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            str(shutil.which("prometheus")),
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{listen}",
            "--log.level=warn",
        ],
        cwd=folder,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    log.close()
    url = f"http://127.0.0.1:{listen}"

    def scraped() -> bool:
        assert process.poll() is None, (folder / "prometheus.log").read_text()
        try:
            return bool(query(url, 'up{job="hookbus"} == 1') and query(url, "hookbus_decisions_total"))
        except (httpx.HTTPError, ValueError):
            return False

    wait_for(scraped, timeout_s=60, interval_s=0.2)
    return process, url


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    folder = tmp_path_factory.mktemp("e2e")
    (folder / "policy.yaml").write_text(POLICY)
    state_dir = folder / "state"
    plant_stale_metrics(state_dir / "metrics")
    port = free_port()
    stdout, stderr = folder / "up.out", folder / "up.err"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hookbus",
                "up",
                "--config",
                str(folder / "policy.yaml"),
                "--port",
                str(port),
                "--state-dir",
                str(state_dir),
            ],
            env=clean_env(),
            cwd=folder,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        wait_for(lambda: ready(port) or up.poll() is not None, timeout_s=60, interval_s=0.1)
        assert up.poll() is None, stderr.read_text()
        url = None
        if shutil.which("prometheus"):
            prometheus, url = start_prometheus(folder / "prometheus", port)
        decisions, gateway_fail_opens = send_mix(port)
        yield Mixed(port, state_dir, stdout, url, decisions, gateway_fail_opens)
    finally:
        stop(prometheus)
        stop(up)


# -- Prometheus ----------------------------------------------------------------------------------


def prometheus_url(mixed: Mixed) -> str:
    """The test's Prometheus (skipped without the binary, failed under CI)."""
    required_binary("prometheus")
    assert mixed.prometheus is not None
    return mixed.prometheus


def test_the_mix_was_answered_as_the_policy_says(mixed: Mixed) -> None:
    assert mixed.decisions == Counter({"allow": 4, "deny": 3, "ask": 2, "none": 1 + FORCED_FAIL_OPENS})


def test_prometheus_counts_the_decisions_by_decision(mixed: Mixed) -> None:
    prometheus = prometheus_url(mixed)
    expected = {"allow": 4.0, "deny": 3.0, "ask": 2.0, "none": float(1 + FORCED_FAIL_OPENS), "defer": 0.0, "block": 0.0}
    eventually(lambda: by_label(query(prometheus, "sum by (decision) (hookbus_decisions_total)"), "decision"), expected)
    # The handler that decided each one (the one rule), by its id in the policy.
    handlers = query(prometheus, "sum by (handler, decision) (hookbus_handler_decisions_total)")
    assert by_label(handlers, "decision") == {"allow": 4.0, "deny": 3.0, "ask": 2.0}
    assert len({series["metric"]["handler"] for series in handlers}) == 1


def test_prometheus_counts_the_events_by_agent_of_the_dashboard(mixed: Mixed) -> None:
    prometheus = prometheus_url(mixed)
    # The mix is Claude Code's format (no dialect): every answered event is the agent claude's.
    expected = {"claude": float(sum(mixed.decisions.values()))}
    eventually(lambda: by_label(query(prometheus, "sum by (agent) (hookbus_events_total)"), "agent"), expected)


def test_prometheus_computes_the_block_rate_of_the_dashboard(mixed: Mixed) -> None:
    prometheus = prometheus_url(mixed)
    sent = sum(mixed.decisions.values())

    def block_rate() -> float | None:
        result = query(prometheus, BLOCK_RATE)
        return round(float(result[0]["value"][1]), 9) if result else None

    # Every series was 0 in the first scrape, so rate() scales them all alike: the ratio is exact.
    eventually(block_rate, round(3 / sent, 9))


def test_prometheus_counts_the_forced_fail_opens(mixed: Mixed) -> None:
    prometheus = prometheus_url(mixed)
    eventually(lambda: by_label(query(prometheus, "sum(hookbus_fail_open_total)"), ""), {"": float(FORCED_FAIL_OPENS)})
    # The reasons the gateway answered fail-open itself (the alert's) match the X-Hookbus-Outcome headers.
    answered = 'sum(hookbus_fail_open_total{reason=~"timeout|redis_unavailable|dispatcher_error"})'
    assert by_label(query(prometheus, answered), "") == {"": float(mixed.gateway_fail_opens)}
    assert by_label(query(prometheus, 'sum(hookbus_timeouts_total{stage="reply"})'), "") == {
        "": float(mixed.gateway_fail_opens)
    }


def test_prometheus_evaluates_every_shipped_rule_without_error(mixed: Mixed) -> None:
    prometheus = prometheus_url(mixed)
    shipped = {
        rule["alert"]
        for group in yaml.safe_load((PROMETHEUS_DIR / "alerts.yaml").read_text())["groups"]
        for rule in group["rules"]
    }

    def evaluated() -> dict[str, str]:
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=5).json()["data"]["groups"]
        return {
            rule["name"]: rule["health"]
            for group in groups
            for rule in group["rules"]
            if not rule["lastEvaluation"].startswith("0001-")
        }

    eventually(evaluated, dict.fromkeys(shipped, "ok"))
    assert not query(prometheus, 'ALERTS{alertname=~"HookbusNoDispatchers|HookbusRedisDown"}')


# -- the platform's own endpoint ------------------------------------------------------------------


def exported(mixed: Mixed) -> set[str]:
    samples = exposition_samples(httpx.get(mixed.metrics_url, timeout=5).content)
    return metric_names(name for name, _ in samples)


#: Families with a series per audit pipeline (``group``): none before a ``hookbus audit follow``
#: runs, and the sinks' own are served by the follower, not the gateway.
AUDIT_PIPELINE_FAMILIES = frozenset(
    {
        "hookbus_audit_consumer_lag_seconds",
        "hookbus_audit_trimmed_unread_total",
        "hookbus_audit_sink_records_total",
        "hookbus_audit_sink_errors_total",
        "hookbus_audit_sink_dead_letters_total",
        "hookbus_audit_sink_lag_seconds",
    }
)


def test_every_metric_of_the_dashboard_exists_after_the_mixed_run(mixed: Mixed) -> None:
    # no panel silently shows "no data" (but the audit pipelines', while none runs)
    assert dashboard_metric_names() - AUDIT_PIPELINE_FAMILIES - exported(mixed) == set()


def test_every_metric_of_the_alerts_exists_after_the_mixed_run(mixed: Mixed) -> None:
    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yaml").read_text())["groups"]
    used = metric_names(rule["expr"] for group in rules for rule in group["rules"])
    assert used - AUDIT_PIPELINE_FAMILIES - exported(mixed) == set()


def test_the_gateway_metrics_under_up_pass_promtool(mixed: Mixed) -> None:
    result = promtool("check", "metrics", cwd=REPO, stdin=httpx.get(mixed.metrics_url, timeout=5).text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr


def test_up_prints_where_the_metrics_are(mixed: Mixed) -> None:
    assert f"metrics of every role on {mixed.metrics_url}" in mixed.stdout.read_text()


def test_up_starts_with_no_metrics_of_a_previous_run(mixed: Mixed) -> None:
    samples = exposition_samples(httpx.get(mixed.metrics_url, timeout=5).content)
    deny = frozenset({("event", "PreToolUse"), ("decision", "deny")})
    assert samples[("hookbus_decisions_total", deny)] == 3  # not 1003


def role_pids(state_dir: Path) -> dict[str, list[int]]:
    state = json.loads((state_dir / "hookbus.json").read_text())
    pids: dict[str, list[int]] = {}
    for role in state["roles"]:
        if role["pid"]:
            pids.setdefault(role["role"], []).append(role["pid"])
    return pids


def test_a_restarted_role_keeps_its_counts_and_drops_its_gauges(mixed: Mixed) -> None:
    # Last in the module: it restarts the dispatcher.
    def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        return exposition_samples(httpx.get(mixed.metrics_url, timeout=5).content)

    def info_pids() -> set[str]:
        return {dict(labels)["pid"] for name, labels in scrape() if name == "hookbus_policy_info"}

    def handler_decisions() -> float:
        return sum(v for (name, _), v in scrape().items() if name == "hookbus_handler_decisions_total")

    (old,) = role_pids(mixed.state_dir)["dispatcher"]
    assert str(old) in info_pids()
    assert handler_decisions() == 9  # counted in the dispatcher's process
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: role_pids(mixed.state_dir).get("dispatcher", [old]) != [old], timeout_s=30, interval_s=0.1)
    (new,) = role_pids(mixed.state_dir)["dispatcher"]
    wait_for(lambda: str(new) in info_pids(), timeout_s=30, interval_s=0.1)
    assert str(old) not in info_pids()  # a dead process's gauges go
    assert handler_decisions() == 9  # its counters stay
    samples = scrape()
    assert samples[("hookbus_role_restarts_total", frozenset({("role", "dispatcher")}))] == 1
    wait_for(lambda: ready(mixed.port), timeout_s=30, interval_s=0.1)
