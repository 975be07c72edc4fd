"""``hookbus install claude --check``: against a live gateway, every answer is one precise line."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bus.runtime.settings import Tokens
from hookbus.cli import main
from hookbus.install.check import CHECK_EVENT, MINIMAL_PATH, check_gateway
from hookbus.platform.redis_server import free_port
from tests.conftest import DENY_RM, BusProbe, async_wait_for


@pytest.fixture(autouse=True)
def _no_hookbus_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOOKBUS_URL", "HOOKBUS_TOKEN"):
        monkeypatch.delenv(name, raising=False)


async def check(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``hookbus install claude ARGS`` in a thread (the gateway runs on this test's loop)."""
    code = await asyncio.to_thread(main, ["install", "claude", *args])
    out, err = capsys.readouterr()
    return code, out, err


async def test_a_good_token_is_named_by_its_tenant_and_the_event_is_recorded(
    platform: Callable[..., Any], bus: BusProbe, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-1")
    async with platform(DENY_RM, tokens=Tokens.parse("fleet:tok-1")) as p:
        code, out, err = await check("--check", "--url", p.url, capsys=capsys)
        assert (code, err) == (0, "")
        assert out == f"hookbus: check: {p.url}/v1/hooks reachable, token accepted as tenant fleet\n"

        async def recorded() -> bool:
            return any(r.event == CHECK_EVENT for r in await bus.log())

        await async_wait_for(recorded, timeout_s=10)
    record = next(r for r in await bus.log() if r.event == CHECK_EVENT)
    assert (record.tenant, record.outcome, record.decision) == ("fleet", "recorded", "none")


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        (None, "the gateway wants a token (401) and HOOKBUS_TOKEN is not set here"),
        ("tok-2", "the gateway refused HOOKBUS_TOKEN (401): it is not one of the gateway's tokens"),
    ],
)
async def test_a_missing_or_wrong_token_is_said_exactly(
    platform: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    token: str | None,
    problem: str,
) -> None:
    if token:
        monkeypatch.setenv("HOOKBUS_TOKEN", token)
    async with platform(DENY_RM, tokens=Tokens.parse("fleet:tok-1")) as p:
        code, out, err = await check("--check", "--url", p.url, capsys=capsys)
    assert (code, out, err) == (1, "", f"hookbus: check failed: {problem}\n")


async def test_rate_limits_wrong_urls_and_open_gateways(platform: Callable[..., Any]) -> None:
    async with platform(DENY_RM, rate_limit_per_s=0.001, rate_limit_burst=1) as p:
        await p.post({"hook_event_name": "Notification", "session_id": "s"})  # spends the only token
        ok, message = await asyncio.to_thread(check_gateway, p.url)
        assert not ok and message.startswith("the gateway is rate-limiting this token's tenant (429, retry after ")
    async with platform(DENY_RM) as p:
        ok, message = await asyncio.to_thread(check_gateway, f"{p.url}/hookbus")
        assert (ok, message) == (
            False,
            f"{p.url}/hookbus/v1/hooks is not a hookbus hooks endpoint (HTTP 404); "
            "give the gateway's base URL, e.g. http://hookbus.internal:8787",
        )
        ok, message = await asyncio.to_thread(check_gateway, p.url, "any-token")
        assert (ok, message) == (True, f"{p.url}/v1/hooks reachable; the gateway checks no tokens (tenant default)")


@pytest.mark.system
def test_an_unreachable_gateway(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert main(["install", "claude", "--check", "--url", url]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"hookbus: check failed: cannot reach {url}/v1/hooks: ")
    assert err.endswith("(is the gateway running there?)\n") and err.count("\n") == 1


def test_a_server_that_is_not_hookbus(silent_port: int) -> None:
    ok, message = check_gateway(f"http://127.0.0.1:{silent_port}", timeout_s=0.3)
    assert (ok, message) == (False, f"http://127.0.0.1:{silent_port}/v1/hooks did not answer within 0.3s")


async def test_every_install_ends_with_the_check_and_check_alone_reads_the_installed_url(
    platform: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "settings.json"
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-1")
    async with platform(DENY_RM, tokens=Tokens.parse("fleet:tok-1")) as p:
        code, out, _ = await check("--settings-file", str(path), "--url", p.url, "--events", "Stop", capsys=capsys)
        assert code == 0
        assert out.splitlines()[-1] == f"hookbus: check: {p.url}/v1/hooks reachable, token accepted as tenant fleet"
        before = path.read_text()
        code, out, _ = await check("--settings-file", str(path), "--check", capsys=capsys)  # no --url
        assert (code, out.splitlines()) == (
            0,
            [f"hookbus: check: {p.url}/v1/hooks reachable, token accepted as tenant fleet"],
        )
        assert path.read_text() == before  # --check writes nothing
    assert json.loads(before)["hooks"]["Stop"][0]["hooks"][0]["url"] == f"{p.url}/v1/hooks"
    # The gateway is gone: the install still succeeds, and says what it could not check.
    code, _, err = await check("--settings-file", str(path), "--url", p.url, "--events", "Stop", capsys=capsys)
    assert code == 0 and err.startswith(f"hookbus: warning: check failed: cannot reach {p.url}/v1/hooks")
    with pytest.raises(httpx.ConnectError):
        httpx.get(p.url)


# -- the installed command, run as the agent runs it ---------------------------------------------


async def test_the_check_runs_the_installed_command_with_a_minimal_path(
    platform: Callable[..., Any],
    bus: BusProbe,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "settings.json"
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-1")
    async with platform(DENY_RM, tokens=Tokens.parse("fleet:tok-1")) as p:
        code, out, err = await check("--settings-file", str(path), "--check", "--url", p.url, capsys=capsys)
        assert (code, out) == (0, f"hookbus: check: {p.url}/v1/hooks reachable, token accepted as tenant fleet\n")
        args = ("--settings-file", str(path), "--url", p.url, "--events", "SessionStart", "Stop")
        code, out, err = await check(*args, capsys=capsys)
        assert (code, err) == (0, "")
        assert out.splitlines()[-2:] == [
            f"hookbus: check: the installed command runs with PATH={MINIMAL_PATH} and reaches the gateway",
            f"hookbus: check: {p.url}/v1/hooks reachable, token accepted as tenant fleet",
        ]

        async def checks() -> int:  # the first --check (no command yet), then the command's and the gateway's
            return len([r for r in await bus.log() if r.event == CHECK_EVENT])

        async def all_in() -> bool:
            return await checks() >= 3

        await async_wait_for(all_in, timeout_s=10)
    assert await checks() == 3


@pytest.mark.system
def test_a_command_the_agent_cannot_find_fails_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `hookbus` is on the installer's PATH, not on the agent's.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "hookbus").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m hookbus "$@"\n')
    (bin_dir / "hookbus").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert not any((Path(d) / "hookbus").exists() for d in MINIMAL_PATH.split(":"))
    path = tmp_path / "settings.json"
    url = f"http://127.0.0.1:{free_port()}"
    args = ["install", "claude", "--settings-file", str(path), "--url", url, "--events", "SessionStart"]
    assert main([*args, "--hook-command", "hookbus"]) == 1  # written, but it would never run
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("hookbus: warning: --hook-command starts with 'hookbus', not an absolute path")
    assert err[1].startswith(f"hookbus: check failed: the installed command cannot start with PATH={MINIMAL_PATH} (")
    assert "not found" in err[1] and len(err) == 2
    assert main(["install", "claude", "--settings-file", str(path), "--check"]) == 1
    assert capsys.readouterr().err == "\n".join(err[1:]) + "\n"
    # The default command is absolute: it starts, and says that it does not reach the gateway.
    assert main(args) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("hookbus: warning: check failed: the installed command runs but does not reach the gateway")
    assert main(["install", "claude", "--settings-file", str(path), "--check"]) == 1
