"""``hookbus install qwen``: what it writes where, what it keeps, its warnings, and its errors.

Every test runs the real command line (``hookbus.cli.main``) on real files in ``tmp_path``;
Qwen Code's per-user and system locations are moved there with its own variables
(``QWEN_HOME``, ``QWEN_CODE_SYSTEM_SETTINGS_PATH``). The end-to-end test sends what Qwen Code
would send with the installed handler (its ``${VAR}`` interpolation of the header) to a live
gateway.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.qwen import DEFAULT_EVENTS, OPT_IN_EVENTS, handler_url, settings_path
from tests.conftest import REPO

URL = "http://127.0.0.1:8787"
USER_SETTINGS: dict[str, Any] = {
    "model": {"name": "qwen3-coder-plus"},
    "security": {"auth": {"selectedType": "openai"}},
    "hooks": {
        "enabled": True,
        "disabled": ["old-guard"],
        "PreToolUse": [
            {
                "matcher": "^run_shell_command$",
                "hooks": [{"type": "command", "command": "~/bin/guard.sh", "timeout": 5}],
            }
        ],
        "Stop": [
            {"hooks": [{"type": "http", "url": "https://audit.example.com/stop", "headers": {"X-Key": "${AUDIT}"}}]}
        ],
    },
}


@pytest.fixture
def qwen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the working directory, with Qwen's user and system files moved into tmp_path."""
    monkeypatch.setenv("QWEN_HOME", str(tmp_path / "qwen-home"))
    monkeypatch.setenv("QWEN_CODE_SYSTEM_SETTINGS_PATH", str(tmp_path / "etc" / "qwen-code" / "settings.json"))
    for name in ("QWEN_CODE_SYSTEM_DEFAULTS_PATH", "QWEN_CODE_TRUSTED_FOLDERS_PATH", "HOOKBUS_URL", "HOOKBUS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


def install(*argv: str) -> int:
    return main(["install", "qwen", "--no-check", *argv])


def settings_of(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def ours(settings: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """hookbus's handlers in ``settings``, by event."""
    found: dict[str, list[dict[str, Any]]] = {}
    for event, groups in settings.get("hooks", {}).items():
        for group in groups if isinstance(groups, list) else ():
            for entry in group["hooks"] if isinstance(group, dict) else ():
                if handler_url(entry) is not None:
                    found.setdefault(event, []).append(entry)
    return found


def test_a_project_install_writes_http_hooks_with_the_token_from_the_environment(
    qwen: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install("--url", URL) == 0
    path = qwen / ".qwen" / "settings.json"
    written = settings_of(path)
    assert set(ours(written)) == set(DEFAULT_EVENTS) and not set(OPT_IN_EVENTS) & set(written["hooks"])
    for event, entries in ours(written).items():
        assert entries == [
            {
                "type": "http",
                "name": "hookbus",
                "url": f"{URL}/v1/hooks?dialect=qwen",
                "headers": {"Authorization": "Bearer ${HOOKBUS_TOKEN}"},
                "allowedEnvVars": ["HOOKBUS_TOKEN"],
                "timeout": 10,
            }
        ], event
    assert "tok" not in path.read_text().replace("HOOKBUS_TOKEN", "")  # no token value, only the variable
    out = capsys.readouterr()
    assert f"{len(DEFAULT_EVENTS)} http hooks -> {URL}/v1/hooks" in out.out and "$HOOKBUS_TOKEN" in out.out
    assert out.err == ""


def test_merge_keeps_everything_else_backs_up_is_idempotent_and_uninstalls_byte_for_byte(
    qwen: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = qwen / ".qwen" / "settings.json"
    path.parent.mkdir()
    original = json.dumps(USER_SETTINGS, indent=4) + "\n"  # not the two-space form hookbus writes
    path.write_text(original)
    assert install("--url", URL, "--events", "PreToolUse,Stop", "TaskCreated") == 0
    written = settings_of(path)
    assert (qwen / ".qwen" / "settings.json.bak").read_text() == original
    assert written["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    assert written["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    assert (written["hooks"]["enabled"], written["hooks"]["disabled"]) == (True, ["old-guard"])
    assert written["model"] == USER_SETTINGS["model"] and written["security"] == USER_SETTINGS["security"]
    assert set(ours(written)) == {"PreToolUse", "Stop", "TodoCreated"}  # Claude Code's TaskCreated
    after_first = path.read_text()
    capsys.readouterr()
    assert install("--url", URL, "--events", "PreToolUse", "Stop", "TodoCreated") == 0
    assert path.read_text() == after_first and "already up to date; nothing to change" in capsys.readouterr().out
    assert install("--url", URL, "--events", "PreToolUse", "Stop", "TodoCreated", "--timeout", "3.5") == 0
    moved = settings_of(path)
    assert [e["timeout"] for e in ours(moved)["PreToolUse"]] == [3.5]  # updated where it stood, seconds
    assert moved["hooks"]["PreToolUse"][1]["hooks"] == ours(moved)["PreToolUse"]
    assert main(["install", "qwen", "--uninstall"]) == 0
    assert path.read_text() == original  # byte for byte: the .bak held the same settings
    assert main(["install", "qwen", "--uninstall"]) == 0
    assert "already up to date" in capsys.readouterr().out


def test_an_uninstall_after_the_user_edited_removes_exactly_hookbus_handlers(qwen: Path) -> None:
    path = qwen / ".qwen" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER_SETTINGS))
    assert install("--url", URL) == 0
    edited = settings_of(path)
    edited["general"] = {"vimMode": True}
    edited["hooks"]["PreToolUse"].append({"matcher": "write_file", "hooks": [{"type": "command", "command": "lint"}]})
    path.write_text(json.dumps(edited))
    assert main(["install", "qwen", "--uninstall", "--url", "http://elsewhere:1"]) == 0
    assert ours(settings_of(path))  # --url narrows the uninstall to that gateway: nothing removed
    assert main(["install", "qwen", "--uninstall", "--url", URL]) == 0
    expected = json.loads(json.dumps(USER_SETTINGS))
    expected["general"] = {"vimMode": True}
    expected["hooks"]["PreToolUse"].append({"matcher": "write_file", "hooks": [{"type": "command", "command": "lint"}]})
    assert settings_of(path) == expected


def test_dry_run_prints_a_diff_and_writes_nothing(qwen: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--url", URL, "--events", "PreToolUse", "--dry-run") == 0
    out = capsys.readouterr().out
    assert (
        out.startswith("--- /dev/null\n+++ ")
        and '+            "url": "http://127.0.0.1:8787/v1/hooks?dialect=qwen",' in out
    )
    assert not (qwen / ".qwen").exists()


def test_shim_and_fail_closed_write_command_hooks_with_millisecond_timeouts(qwen: Path) -> None:
    assert install("--url", URL, "--events", "PreToolUse", "--fail-closed", "--hook-command", "/opt/hb/hookbus") == 0
    (entry,) = ours(settings_of(qwen / ".qwen" / "settings.json"))["PreToolUse"]
    assert entry == {
        "type": "command",
        "name": "hookbus",
        "command": f"/opt/hb/hookbus hook --agent qwen --url {URL}/v1/hooks --fail-closed",
        "timeout": 10000,
    }
    assert install("--url", URL, "--events", "PreToolUse", "--shim", "--timeout", "2", "--hook-command", "hookbus") == 0
    (entry,) = ours(settings_of(qwen / ".qwen" / "settings.json"))["PreToolUse"]
    assert entry["command"] == f"hookbus hook --agent qwen --url {URL}/v1/hooks --timeout 1.6"
    assert entry["timeout"] == 2000  # Qwen reads 1000 or more as milliseconds, in every version


def test_user_scope_honours_qwen_home_and_managed_scope_the_system_file(qwen: Path, tmp_path: Path) -> None:
    assert install("--scope", "user", "--url", URL, "--events", "Stop") == 0
    assert set(ours(settings_of(tmp_path / "qwen-home" / "settings.json"))) == {"Stop"}
    assert install("--scope", "managed", "--url", URL, "--events", "PreToolUse") == 0
    assert set(ours(settings_of(tmp_path / "etc" / "qwen-code" / "settings.json"))) == {"PreToolUse"}
    assert not (qwen / ".qwen").exists()
    os.environ.pop("QWEN_CODE_SYSTEM_SETTINGS_PATH")
    assert settings_path("managed") == Path(
        {"linux": "/etc/qwen-code/settings.json", "darwin": "/Library/Application Support/QwenCode/settings.json"}.get(
            "linux" if sys.platform.startswith("linux") else sys.platform, "C:\\ProgramData\\qwen-code\\settings.json"
        )
    )
    os.environ.pop("QWEN_HOME")
    assert settings_path("user") == Path.home() / ".qwen" / "settings.json"


@pytest.mark.parametrize(
    ("user", "project", "url", "warned"),
    [
        ({"disableAllHooks": True}, {}, URL, "sets disableAllHooks: true, so Qwen Code runs no hook"),
        ({}, {"disableAllHooks": True}, URL, "sets disableAllHooks: true"),
        (
            {"security": {"folderTrust": {"enabled": True}}},
            {},
            URL,
            "is not trusted, so Qwen Code skips its project hooks",
        ),
        ({"security": {"allowedHttpHookUrls": ["https://audit.example.com/*"]}}, {}, URL, "does not admit"),
        ({}, {"security": {"allowedHttpHookUrls": ["https://x/*"]}}, URL, "does not admit"),
        ({}, {}, "http://10.20.0.5:8787", "10.20.0.5 is a private-network address"),
        ({}, {"security": {"allowPrivateNetworkHooks": True}}, "http://192.168.1.9", "private-network address"),
        ({}, {}, "http://0.0.0.0:8787", "never call 0.0.0.0"),
        ({}, {}, "http://100.64.3.4:8787", "100.64.3.4 is a private-network address"),
        ({}, {}, "http://[fd00::5]:8787", "fd00::5 is a private-network address"),
    ],
)
def test_traps_that_would_silently_skip_the_hooks_are_warned_about(
    qwen: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    user: dict[str, Any],
    project: dict[str, Any],
    url: str,
    warned: str,
) -> None:
    (tmp_path / "qwen-home").mkdir()
    (tmp_path / "qwen-home" / "settings.json").write_text(json.dumps(user))
    (qwen / ".qwen").mkdir()
    (qwen / ".qwen" / "settings.json").write_text(json.dumps(project))
    assert install("--url", url, "--events", "PreToolUse") == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hookbus: warning: ") and warned in lines[0], err


@pytest.mark.parametrize(
    ("user", "trust"),
    [
        ({"security": {"allowedHttpHookUrls": ["http://127.0.0.1:8787/*"]}}, None),
        ({"security": {"allowPrivateNetworkHooks": True, "allowedHttpHookUrls": []}}, None),
        ({"security": {"folderTrust": {"enabled": True}}}, "TRUST_FOLDER"),
        ({"security": {"folderTrust": {"enabled": True}}}, "TRUST_PARENT"),
    ],
)
def test_settings_that_admit_the_hooks_give_no_warning(
    qwen: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], user: dict[str, Any], trust: str | None
) -> None:
    home = tmp_path / "qwen-home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps(user))
    if trust is not None:
        trusted = qwen if trust == "TRUST_FOLDER" else qwen / "some-child"
        (home / "trustedFolders.json").write_text(json.dumps({str(trusted): trust}))
    url = "http://10.0.0.7:8787" if user["security"].get("allowPrivateNetworkHooks") else URL
    assert install("--url", url, "--events", "PreToolUse") == 0
    assert capsys.readouterr().err == ""
    assert install("--url", "http://10.0.0.7:8787", "--events", "PreToolUse", "--shim") == 0
    assert "private-network" not in capsys.readouterr().err  # the shim is not Qwen's http client


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--events", "PreToolUse", "Nope"], "hookbus: not Qwen Code events: Nope (known: PreToolUse,"),
        (["--url", "ftp://x"], "hookbus: --url must be an http(s) URL"),
        (["--timeout", "0"], "hookbus: --timeout must be more than 0 seconds"),
        (["--settings-file", "no/such/dir/settings.json"], "does not exist (a typo?); pass --create to make it"),
        (["--scope", "project", "--settings-file", "broken.json"], "is not valid JSON"),
        (["--settings-file", "hooks-list.json"], "the settings file's 'hooks' is not an object; fix it by hand first"),
    ],
)
def test_bad_input_is_one_clear_line(
    qwen: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (qwen / "broken.json").write_text("{not json")
    (qwen / "hooks-list.json").write_text('{"hooks": []}')
    assert install("--url", URL, *argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err


def interpolate(value: str, allowed: list[str], env: dict[str, str]) -> str:
    """A header value as Qwen Code's http runner fills it in (``$VAR`` / ``${VAR}``, listed ones only)."""
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.get(m[1], "") if m[1] in allowed else "", value)


POLICY = """
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: rule, deny: ["Bash(git push --force *)"], reason: "no force pushes"}
"""


@pytest.mark.timeout(60)
async def test_installed_by_a_subprocess_the_hook_is_answered_by_a_live_gateway_in_qwens_terms(
    qwen: Path, platform: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    async with platform(POLICY) as p:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "hookbus",
                "install",
                "qwen",
                "--url",
                p.url,
                "--events",
                "PreToolUse",
                "--no-check",
            ],
            cwd=qwen,
            env={**env, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        (entry,) = ours(settings_of(qwen / ".qwen" / "settings.json"))["PreToolUse"]
        headers = {
            k: interpolate(v, entry["allowedEnvVars"], {"HOOKBUS_TOKEN": "tok"}) for k, v in entry["headers"].items()
        }
        assert headers == {"Authorization": "Bearer tok"}
        hook_input = {
            "session_id": "s-install",
            "cwd": str(qwen),
            "hook_event_name": "PreToolUse",
            "permission_mode": "yolo",
            "tool_name": "run_shell_command",
            "tool_input": {"command": "git push --force origin main"},
        }
        reply = await p.client.post(entry["url"], json=hook_input, headers=headers, timeout=entry["timeout"])
        capsys.readouterr()
        checked = await asyncio.to_thread(main, ["install", "qwen", "--check"])  # the installed URL, read back
    assert checked == 0 and capsys.readouterr().out.startswith("hookbus: check: ")
    assert reply.status_code == 200 and "application/json" in reply.headers["content-type"]  # Qwen parses only JSON
    decided = reply.json()["hookSpecificOutput"]
    assert decided["permissionDecision"] == "deny" and "no force pushes" in decided["permissionDecisionReason"]


@pytest.mark.system
def test_check_alone_reports_an_unreachable_gateway_and_writes_nothing(
    qwen: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install", "qwen", "--check", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("hookbus: check failed: cannot reach http://127.0.0.1:9/v1/hooks") and err.count("\n") == 1
    assert not (qwen / ".qwen").exists()
