"""``hookbus_audit_trimmed_unread_total`` on a real ``hookbus up`` (its embedded Redis 6.2): a real
``hookbus audit follow`` process reads, stops, falls behind the decision log's retention
(``maxLength: 5``) and the gateway's ``/metrics`` counts exactly the records trimmed before it read them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import redis as redis_sync

from bus.redis.keys import Keyspace
from tests.conftest import REPO, clean_env, exposition_samples, policy_yaml, pre_tool_use, wait_for
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]
ENV = {"HOOKBUS_TOKENS": "acme:tok-a"}
GROUP = frozenset({("group", "siem")})


def follow(up: UpProcess, path: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "hookbus", "audit", "follow", "--redis-url", up.redis_url(), "--group", "siem"]
    args += ["--sink", f"jsonl:{path}"]
    return subprocess.Popen(args, cwd=REPO, env=clean_env(), stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(child: subprocess.Popen[bytes]) -> None:
    child.send_signal(signal.SIGTERM)
    assert child.wait(30) == 0


def lines(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines()] if path.exists() else []


def metrics(up: UpProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return exposition_samples(httpx.get(f"{up.url}/metrics", timeout=5).text)


def test_a_follower_behind_the_retention_of_hookbus_up_is_counted_exactly(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    hooks = {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "rule", "deny": ["Bash(rm -rf *)"]}]}]}
    policy = write_policy(policy_yaml(hooks, decisionLog={"maxLength": 5}))
    path = tmp_path / "audit.jsonl"
    with running_up(tmp_path, policy, ENV) as up:
        redis = redis_sync.Redis.from_url(up.redis_url())
        log = Keyspace().decision_log()
        try:
            ids = [f"tu-{n:02d}" for n in range(15)]
            for n in range(3):
                up.emit("tok-a", pre_tool_use(f"echo {n}", tool_use_id=ids[n]))
            child = follow(up, path)
            try:
                wait_for(lambda: len(lines(path)) == 3, timeout_s=30)
            finally:
                stop(child)
            # The gateway's observer has looked at the group (its lag is 0) before the follower falls behind.
            wait_for(lambda: metrics(up).get(("hookbus_audit_consumer_lag", GROUP)) == 0, timeout_s=30)
            for n in range(3, 15):
                up.emit("tok-a", pre_tool_use(f"echo {n}", tool_use_id=ids[n]))
            wait_for(lambda: redis.xlen(log) == 5, timeout_s=30)  # the janitor's exact trim: 7 unread gone
            wait_for(lambda: metrics(up).get(("hookbus_audit_trimmed_unread_total", GROUP)) == 7, timeout_s=30)
            child = follow(up, path)
            try:
                wait_for(lambda: len(lines(path)) == 8, timeout_s=30)
            finally:
                stop(child)
            wait_for(lambda: metrics(up).get(("hookbus_audit_consumer_lag", GROUP)) == 0, timeout_s=30)
            assert metrics(up)[("hookbus_audit_trimmed_unread_total", GROUP)] == 7
        finally:
            redis.close()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["tool_use_id"] for e in events] == ids[:3] + ids[10:]
