"""A fault never turns a pending approval into an allow: the gateway killed while an agent waits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from hookbus.platform.redis_server import free_port
from tests.conftest import REPO, clean_env, hookbus_process, pre_tool_use, ready, wait_for
from tests.gateway.approvals.helpers import approvals_policy

pytestmark = pytest.mark.timeout(120)
APPROVER = {"Authorization": "Bearer approver-a"}


def _shim(port: int, session: str) -> subprocess.Popen[str]:
    """``hookbus hook --fail-closed`` as ``hookbus install claude --approvals`` installs it, for one git push."""
    shim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hookbus",
            "hook",
            "--url",
            f"http://127.0.0.1:{port}/v1/hooks",
            "--timeout",
            "60",
            "--fail-closed",
        ],
        env=clean_env(HOOKBUS_TOKEN="agent-a"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert shim.stdin is not None
    shim.stdin.write(json.dumps(pre_tool_use("git push origin main", session)))
    shim.stdin.close()
    return shim


def _finish(shim: subprocess.Popen[str]) -> tuple[int, str, str]:
    with shim:  # closes its pipes
        shim.wait(timeout=30)
        assert shim.stdout is not None and shim.stderr is not None
        out, err = shim.stdout.read(), shim.stderr.read()
    return shim.returncode, out, err


def _pending(port: int) -> list[dict[str, object]]:
    response = httpx.get(f"http://127.0.0.1:{port}/v1/approvals", headers=APPROVER, timeout=5)
    return list(response.json()["approvals"]) if response.status_code == 200 else []


def test_killing_the_gateway_while_approvals_wait_runs_no_tool_and_loses_no_approval(
    redis_url: str, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(approvals_policy(holdSeconds=60))
    env = clean_env(
        HOOKBUS_REDIS_URL=redis_url,
        HOOKBUS_KEY_PREFIX=f"faults-{free_port()}:",
        HOOKBUS_TOKENS="acme:agent-a",
        HOOKBUS_APPROVER_TOKENS="acme:approver-a",
    )
    port = free_port()

    def gateway() -> subprocess.Popen[bytes]:
        process = hookbus_process("gateway", "--config", str(policy), "--port", str(port), env=env)
        children.append(process)
        return process

    first = gateway()
    children.append(hookbus_process("dispatcher", "--config", str(policy), env=env))
    wait_for(lambda: ready(port) or first.poll() is not None, timeout_s=30, interval_s=0.05)
    shims = [_shim(port, f"s-{n}") for n in range(3)]
    waiting = wait_for(lambda: len(found := _pending(port)) == 3 and found, timeout_s=20, interval_s=0.05)
    first.kill()
    first.wait(timeout=10)
    for shim in shims:
        code, out, err = _finish(shim)
        # Exit 2 blocks the tool in Claude Code; no output says allow.
        assert code == 2, (out, err)
        assert "allow" not in out
    second = gateway()  # the approvals outlived the gateway
    wait_for(lambda: ready(port) or second.poll() is not None, timeout_s=30, interval_s=0.05)
    assert sorted(str(a["id"]) for a in _pending(port)) == sorted(str(a["id"]) for a in waiting)
    session_of = {a["session_id"]: a["id"] for a in waiting}
    approved = httpx.post(
        f"http://127.0.0.1:{port}/v1/approvals/{session_of['s-0']}/approve", headers=APPROVER, json={}
    )
    assert approved.status_code == 200
    # The agent's retry of the approved call gets the answer; the others still wait (and fail closed).
    retry = _shim(port, "s-0")
    code, out, _ = _finish(retry)
    assert code == 0 and json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "allow"
