"""``hookbus install codex``: what it writes into Codex CLI's hook files, what it keeps, where, and its warnings.

Every test runs the real command (``hookbus.cli.main``, or ``python -m hookbus`` where the
output and exit code of a whole process matter) on real files in ``tmp_path``. That Codex CLI
itself runs what is written is shown by ``tests/agents/test_codex.py``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.codex import DEFAULT_EVENTS, FAIL_CLOSED_EVENTS
from hookbus.install.settings_file import default_hook_command, is_hookbus_handler
from tests.conftest import REPO

URL = "http://127.0.0.1:8787/v1/hooks"
#: A user's own Codex hooks.json, with four-space indents (hookbus writes two).
USER_HOOKS: dict[str, Any] = {
    "description": "team hooks",
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "~/bin/audit.sh", "timeout": 5}]},
        ],
    },
}
USER_TEXT = json.dumps(USER_HOOKS, indent=4) + "\n"
USER_TOML = """# the fleet's requirements
allowed_approval_policies = ["on-request"]

[[hooks.PreToolUse]]
matcher = "Bash"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "/opt/audit"
"""


@pytest.fixture(autouse=True)
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as cwd, a Codex home that trusts it, and no Codex or hookbus variables."""
    for name in list(os.environ):
        if name.startswith(("CODEX_", "HOOKBUS_")):
            monkeypatch.delenv(name)
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(f'[projects."{folder}"]\ntrust_level = "trusted"\n')
    monkeypatch.setenv("CODEX_HOME", str(home))
    return folder


def install(*args: str) -> int:
    return main(["install", "codex", "--no-check", "--url", "http://127.0.0.1:8787", *args])


def handlers(document: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Every event's handlers, in order."""
    return {
        event: [handler for group in groups for handler in group["hooks"]]
        for event, groups in document.get("hooks", {}).items()
    }


def test_a_project_install_writes_one_shim_handler_per_event(project: Path) -> None:
    os.environ["HOOKBUS_TOKEN"] = "tok-secret-value"
    try:
        assert install() == 0
    finally:
        del os.environ["HOOKBUS_TOKEN"]
    path = project / ".codex" / "hooks.json"
    text = path.read_text()
    found = handlers(json.loads(text))
    assert list(found) == list(DEFAULT_EVENTS) and "Interrupt" not in found
    for event, (handler, *more) in found.items():
        assert more == [] and is_hookbus_handler(handler, URL)
        argv = shlex.split(handler["command"])
        assert argv[:5] == [*shlex.split(default_hook_command()), "hook"]  # python -I -S .../shim_start.py hook
        assert argv[5:9] == ["--agent", "codex", "--url", URL] and "--fail-closed" not in argv
        assert handler["type"] == "command" and handler["timeout"] == (3 if event == "SessionEnd" else 10)
    assert "--timeout 2.4" in found["SessionEnd"][0]["command"]  # under Codex's 3 s cap
    assert "tok-secret-value" not in text and "TOKEN" not in text


def test_the_users_file_is_merged_backed_up_kept_idempotent_and_restored(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / ".codex" / "hooks.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install("--events", "PreToolUse,Stop") == 0
    written = json.loads(path.read_text())
    assert written["description"] == "team hooks"
    pre = written["hooks"]["PreToolUse"]
    assert pre[0] == USER_HOOKS["hooks"]["PreToolUse"][0] and is_hookbus_handler(pre[1]["hooks"][0])
    assert list(handlers(written)) == ["PreToolUse", "Stop"]
    assert (path.parent / "hooks.json.bak").read_text() == USER_TEXT
    before = path.read_bytes()
    capsys.readouterr()
    assert install("--events", "PreToolUse", "Stop") == 0
    assert "already up to date" in capsys.readouterr().out and path.read_bytes() == before
    assert main(["install", "codex", "--uninstall"]) == 0
    assert path.read_text() == USER_TEXT  # byte for byte, four-space indents included


def test_uninstall_without_a_backup_removes_exactly_hookbuss_handlers(project: Path) -> None:
    path = project / ".codex" / "hooks.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install("--events", "PreToolUse") == 0
    assert install("--events", "PreToolUse", "--url", "http://10.0.0.9:8787") == 0  # a second gateway
    (path.parent / "hooks.json.bak").unlink()
    assert main(["install", "codex", "--uninstall", "--url", "http://10.0.0.9:8787"]) == 0
    assert json.loads(path.read_text()) == USER_HOOKS
    assert main(["install", "codex", "--uninstall"]) == 0
    assert "hookbus" not in path.read_text()


def test_dry_run_prints_a_diff_and_writes_nothing(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--dry-run", "--events", "Stop") == 0
    out = capsys.readouterr().out
    assert out.startswith("--- /dev/null\n+++ ") and '+    "Stop": [' in out
    assert not (project / ".codex").exists()


def test_user_scope_follows_codex_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--scope", "user") == 0
    path = tmp_path / "codex-home" / "hooks.json"
    assert list(handlers(json.loads(path.read_text()))) == list(DEFAULT_EVENTS)
    err = capsys.readouterr().err
    assert "hookbus: warning: Codex runs the hooks in" in err and "--dangerously-bypass-hook-trust" in err
    assert "until the project is trusted" not in err


def test_fail_closed_only_where_codex_blocks_on_exit_2(project: Path) -> None:
    assert install("--fail-closed", "--timeout", "2.5") == 0
    found = handlers(json.loads((project / ".codex" / "hooks.json").read_text()))
    closed = {event for event, (handler,) in found.items() if handler["command"].endswith("--fail-closed")}
    assert closed == FAIL_CLOSED_EVENTS
    assert found["PreToolUse"][0]["timeout"] == 3 and "--timeout 2 " in found["PreToolUse"][0]["command"]


def test_managed_requirements_get_a_toml_block_that_joins_the_admins_hooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "etc" / "requirements.toml"
    path.parent.mkdir()
    path.write_text(USER_TOML)
    assert install("--scope", "managed", "--settings-file", str(path), "--events", "PreToolUse", "Stop") == 0
    parsed = tomllib.loads(path.read_text())
    assert parsed["allowed_approval_policies"] == ["on-request"]
    pre = parsed["hooks"]["PreToolUse"]
    assert pre[0]["hooks"][0]["command"] == "/opt/audit" and is_hookbus_handler(pre[1]["hooks"][0], URL)
    assert parsed["hooks"]["Stop"][0]["hooks"][0]["timeout"] == 10
    err = capsys.readouterr().err
    assert "trusted" not in err  # managed hooks need no trust
    before = path.read_bytes()
    assert install("--scope", "managed", "--settings-file", str(path), "--events", "PreToolUse", "Stop") == 0
    assert path.read_bytes() == before
    assert install("--scope", "managed", "--settings-file", str(path), "--events", "PreToolUse") == 0
    assert "Stop" not in tomllib.loads(path.read_text())["hooks"]  # replaced in place
    (path.parent / "requirements.toml.bak").unlink()
    assert main(["install", "codex", "--scope", "managed", "--settings-file", str(path), "--uninstall"]) == 0
    assert path.read_text() == USER_TOML


def test_warnings_name_what_would_keep_the_hooks_from_running(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "codex-home" / "config.toml"
    config.write_text("[features]\nhooks = false\n")
    (project / ".codex").mkdir()
    (project / ".codex" / "hooks.json").write_text('{"hooks": {}, "$schema": "x"}')
    assert install() == 0
    err = capsys.readouterr().err.splitlines()
    assert all(line.startswith("hookbus: warning: ") for line in err)
    assert any("until the project is trusted" in line and str(project) in line for line in err)
    assert any(f"{config} sets [features] hooks = false" in line for line in err)
    assert any("fields Codex refuses ($schema)" in line for line in err)
    requirements = tmp_path / "requirements.toml"
    requirements.write_text("[features]\ncodex_hooks = false\n")
    assert install("--scope", "managed", "--settings-file", str(requirements)) == 0
    assert f"{requirements} sets [features] hooks = false" in capsys.readouterr().err


@pytest.mark.system
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--events", "BeforeTool"], "not Codex hook events: BeforeTool"),
        (["--url", "ftp://x"], "--url must be an http(s) URL"),
        (["--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["--settings-file", "missing/hooks.json"], "does not exist (a typo?); pass --create"),
        (["--settings-file", "bad.json"], "is not valid JSON"),
        (["--settings-file", "bad.toml"], "is not valid TOML"),
        (["--settings-file", "inline.toml"], "cannot join"),
    ],
)
def test_bad_input_is_one_clear_line(project: Path, args: list[str], message: str) -> None:
    (project / "bad.json").write_text("{not json")
    (project / "bad.toml").write_text("a = = 1\n")
    (project / "inline.toml").write_text('hooks = { PreToolUse = [{ hooks = [{ type = "command", command = "x" }] }] }')
    argv = [sys.executable, "-m", "hookbus", "install", "codex", "--no-check", "--url", "http://127.0.0.1:1", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=project, env=_env())
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and message in done.stderr and "Traceback" not in done.stderr


@pytest.mark.system
def test_create_makes_the_folder_and_check_reports_a_dead_gateway(project: Path) -> None:
    target = project / "deep" / "hooks.json"
    assert install("--settings-file", str(target), "--create", "--events", "PreToolUse") == 0
    assert list(handlers(json.loads(target.read_text()))) == ["PreToolUse"]
    argv = [sys.executable, "-m", "hookbus", "install", "codex", "--check", "--settings-file", str(target)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=project, env=_env())
    assert done.returncode == 1 and "hookbus: check failed:" in done.stderr and "Traceback" not in done.stderr


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    env["PYTHONPATH"] = str(REPO)
    return env
