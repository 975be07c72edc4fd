"""``promtool check metrics`` is clean for the metrics port of a dispatcher and of the worker,
each after real work (the gateway under ``hookbus up``: ``test_prometheus_e2e``)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from hookbus.platform.redis_server import free_port
from tests.conftest import (
    DENY_RM,
    REPO,
    BusProbe,
    async_wait_for,
    clean_env,
    exposition_samples,
    logged,
    policy_yaml,
    port_open,
    rm_rf,
    wait_for,
)
from tests.deploy.promtool import promtool

ASYNC_HOOK = policy_yaml({"PostToolUse": [{"hooks": [{"type": "command", "command": "true", "async": True}]}]})


def start_role(role: str, policy: Path, redis_url: str, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hookbus",
                role,
                "--config",
                str(policy),
                "--redis-url",
                redis_url,
                "--metrics-port",
                str(port),
            ],
            env=clean_env(),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    wait_for(lambda: port_open(port) or process.poll() is not None, timeout_s=30)
    assert process.poll() is None, log.read_text()
    return process, port


def scrape(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def check_metrics(text: str) -> None:
    result = promtool("check", "metrics", cwd=REPO, stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr  # no lint


@pytest.mark.timeout(90)
async def test_a_dispatchers_metrics_port_passes_promtool(
    platform: Callable[..., Any],
    bus: BusProbe,
    redis_url: str,
    write_policy: Callable[..., Path],
    tmp_path: Path,
    children: list[subprocess.Popen[bytes]],
) -> None:
    async with platform(DENY_RM, dispatchers=0) as p:  # only the dispatcher process decides
        process, port = start_role("dispatcher", write_policy(DENY_RM), redis_url, tmp_path / "dispatcher.log")
        children.append(process)
        answer = await p.post(rm_rf("s-promtool"))
        await logged(bus, answer)
    assert answer.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
    text = scrape(port)
    samples = exposition_samples(text)
    decided = {
        dict(labels)["decision"]: value
        for (name, labels), value in samples.items()
        if name == "hookbus_handler_decisions_total"
    }
    assert decided == {"deny": 1}
    assert samples[("hookbus_dispatch_batch_size_count", frozenset())] >= 1
    check_metrics(text)


@pytest.mark.timeout(90)
async def test_the_workers_metrics_port_passes_promtool(
    platform: Callable[..., Any],
    redis_url: str,
    write_policy: Callable[..., Path],
    tmp_path: Path,
    children: list[subprocess.Popen[bytes]],
) -> None:
    process, port = start_role("worker", write_policy(ASYNC_HOOK, "async.yaml"), redis_url, tmp_path / "worker.log")
    children.append(process)
    async with platform(ASYNC_HOOK) as p:
        await p.post(
            {
                "hook_event_name": "PostToolUse",
                "session_id": "s-async",
                "tool_name": "Bash",
                "tool_input": {"command": "ls"},
                "tool_response": {},
            }
        )

        def succeeded() -> bool:
            samples = exposition_samples(scrape(port))
            return samples.get(("hookbus_async_jobs_total", frozenset({("status", "succeeded")}))) == 1

        await async_wait_for(succeeded, timeout_s=30, interval_s=0.1)
    check_metrics(scrape(port))
