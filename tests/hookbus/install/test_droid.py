"""``hookbus install droid``: what it writes into Factory Droid's hook files, what it keeps, where, and its warnings.

Every test runs the real command (``hookbus.cli.main``, or ``python -m hookbus`` where the
output and exit code of a whole process matter) on real files in ``tmp_path``. That Droid
itself runs what is written is shown by ``tests/agents/test_droid.py``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.droid import DEFAULT_EVENTS, FAIL_CLOSED_EVENTS
from hookbus.install.settings_file import default_hook_command, is_hookbus_handler
from tests.conftest import REPO

URL = "http://127.0.0.1:8787/v1/hooks"
#: A user's own Droid hooks.json (the event map itself), with four-space indents (hookbus writes two).
USER_HOOKS: dict[str, Any] = {
    "PreToolUse": [{"matcher": "Execute", "hooks": [{"type": "command", "command": "~/bin/audit.sh", "timeout": 5}]}],
}
USER_TEXT = json.dumps(USER_HOOKS, indent=4) + "\n"


@pytest.fixture(autouse=True)
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as cwd, a Factory home override, and no managed settings or hookbus variables."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("FACTORY_HOME_OVERRIDE", str(tmp_path / "home"))
    monkeypatch.setenv("FACTORY_ORG_MANAGED_SETTINGS_LOCAL_PATH", str(tmp_path / "managed" / "settings.json"))
    for name in ("HOOKBUS_URL", "HOOKBUS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return folder


def install(*more: str) -> int:
    return main(["install", "droid", "--url", "http://127.0.0.1:8787", "--no-check", *more])


def hookbus_handlers(hook_map: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        event: [h for group in groups for h in group["hooks"] if is_hookbus_handler(h)]
        for event, groups in hook_map.items()
        if isinstance(groups, list)
    }


def test_a_project_install_writes_the_flat_event_map_droid_reads(project: Path) -> None:
    assert install() == 0
    written = json.loads((project / ".factory" / "hooks.json").read_text())
    assert "hooks" not in written and set(written) == set(DEFAULT_EVENTS)
    for handlers in hookbus_handlers(written).values():
        [handler] = handlers
        argv = shlex.split(handler["command"])
        assert argv[:5] == [*shlex.split(default_hook_command()), "hook"]  # python -I -S .../shim_start.py hook
        assert argv[5:9] == ["--agent", "droid", "--url", URL]
        assert handler["type"] == "command" and handler["timeout"] == 10  # whole seconds, as Droid expects
        assert ("--fail-closed" in argv) is False
    assert "HOOKBUS_TOKEN" not in json.dumps(written).replace("$HOOKBUS_TOKEN", "")


def test_merge_keeps_the_users_hooks_backup_idempotent_and_uninstall_restores_them_byte_for_byte(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / ".factory" / "hooks.json"
    path.parent.mkdir()
    path.write_text(USER_TEXT)
    assert install("--events", "PreToolUse,Stop") == 0
    written = json.loads(path.read_text())
    assert written["PreToolUse"][0] == USER_HOOKS["PreToolUse"][0] and set(written) == {"PreToolUse", "Stop"}
    assert (project / ".factory" / "hooks.json.bak").read_text() == USER_TEXT
    after_first = path.read_text()
    capsys.readouterr()
    assert install("--events", "PreToolUse,Stop") == 0
    assert path.read_text() == after_first and "already up to date" in capsys.readouterr().out
    assert main(["install", "droid", "--uninstall"]) == 0
    assert path.read_text() == USER_TEXT


def test_uninstall_removes_a_hooks_json_hookbus_created(project: Path) -> None:
    assert install() == 0
    assert main(["install", "droid", "--uninstall"]) == 0
    assert not (project / ".factory" / "hooks.json").exists()


def test_fail_closed_goes_where_droid_blocks_on_exit_2_and_timeouts_are_whole_seconds(project: Path) -> None:
    assert install("--fail-closed", "--timeout", "2.5") == 0
    written = json.loads((project / ".factory" / "hooks.json").read_text())
    for event, [handler] in hookbus_handlers(written).items():
        argv = shlex.split(handler["command"])
        assert ("--fail-closed" in argv) == (event in FAIL_CLOSED_EVENTS), event
        assert handler["timeout"] == 3 and argv[argv.index("--timeout") + 1] == "2"
    assert FAIL_CLOSED_EVENTS == {"PreToolUse", "UserPromptSubmit"}  # never Stop: exit 2 there loops


def test_dry_run_prints_a_diff_and_writes_nothing(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--dry-run", "--events", "PreToolUse") == 0
    out = capsys.readouterr().out
    assert out.startswith("--- /dev/null\n+++ ") and '+  "PreToolUse": [' in out
    assert not (project / ".factory").exists()


def test_user_scope_honours_the_factory_home_override(tmp_path: Path, project: Path) -> None:
    assert install("--scope", "user", "--events", "PreToolUse") == 0
    assert set(json.loads((tmp_path / "home" / ".factory" / "hooks.json").read_text())) == {"PreToolUse"}
    assert not (project / ".factory").exists()


def test_hooks_already_in_settings_json_get_hookbus_there_so_no_hooks_json_hides_them(tmp_path: Path) -> None:
    settings = tmp_path / "home" / ".factory" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"enableDroidShield": False, "hooks": USER_HOOKS}))
    assert install("--scope", "user", "--events", "PreToolUse") == 0
    written = json.loads(settings.read_text())
    assert written["enableDroidShield"] is False and written["hooks"]["PreToolUse"][0] == USER_HOOKS["PreToolUse"][0]
    assert len(hookbus_handlers(written["hooks"])["PreToolUse"]) == 1
    assert not (settings.parent / "hooks.json").exists()


def test_managed_scope_writes_the_hooks_of_the_managed_settings(tmp_path: Path) -> None:
    managed = tmp_path / "managed" / "settings.json"
    managed.parent.mkdir()
    managed.write_text(json.dumps({"allowManagedHooksOnly": True}))
    assert install("--scope", "managed", "--events", "PreToolUse") == 0
    written = json.loads(managed.read_text())
    assert written["allowManagedHooksOnly"] is True and list(hookbus_handlers(written["hooks"])) == ["PreToolUse"]
    assert main(["install", "droid", "--scope", "managed", "--uninstall"]) == 0
    assert json.loads(managed.read_text()) == {"allowManagedHooksOnly": True}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "hookbus", "install", "droid", "--url", "http://127.0.0.1:8787", "--no-check"]
    return subprocess.run([*argv, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.system
def test_warnings_name_what_would_keep_the_hooks_from_running(tmp_path: Path, project: Path) -> None:
    (project / ".factory").mkdir()
    (project / ".factory" / "hooks.json").write_text(json.dumps({"hooksDisabled": True, "hooks": USER_HOOKS}))
    (project / ".factory" / "settings.json").write_text(json.dumps({"hooks": USER_HOOKS}))
    (tmp_path / "managed").mkdir()
    (tmp_path / "managed" / "settings.json").write_text(json.dumps({"allowManagedHooksOnly": True}))
    result = run_cli(cwd=project)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert all(line.startswith("hookbus: warning: ") for line in lines) and len(lines) == 5, lines
    for expected in ("hooksDisabled: true", "'hooks' wrapper", "ignores the hooks in", "allowManagedHooksOnly"):
        assert any(expected in line for line in lines), expected
    assert any("sends no UserPromptSubmit" in line for line in lines)
    quiet = run_cli("--events", "PreToolUse", cwd=tmp_path)
    assert quiet.returncode == 0 and "allowManagedHooksOnly" in quiet.stderr
    assert "UserPromptSubmit" not in quiet.stderr and "hooksDisabled" not in quiet.stderr


@pytest.mark.system
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--events", "BeforeTool"], "not Factory Droid hook events: BeforeTool"),
        (["--url", "ftp://x"], "--url must be an http(s) URL"),
        (["--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["--settings-file", "/nonexistent-dir/hooks.json"], "does not exist (a typo?)"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.system
def test_a_broken_hooks_json_is_one_clear_line(project: Path) -> None:
    (project / ".factory").mkdir()
    (project / ".factory" / "hooks.json").write_text("{not json")
    result = run_cli(cwd=project)
    assert result.returncode != 0 and "is not valid JSON" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.system
def test_the_installed_shim_command_runs(tmp_path: Path) -> None:
    """The command written resolves to this checkout's hookbus (``--hook-command`` overrides it)."""
    assert install("--events", "PreToolUse", "--hook-command", f"{sys.executable} -m hookbus") == 0
    written = json.loads((Path.cwd() / ".factory" / "hooks.json").read_text())
    [handler] = hookbus_handlers(written)["PreToolUse"]
    command = shlex.split(handler["command"])
    assert command[:3] == [sys.executable, "-m", "hookbus"]
    done = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60, cwd=REPO, check=False)
    assert done.returncode == 0 and "--agent" in done.stdout


@pytest.mark.system
def test_check_reads_the_installed_url_and_reports_an_unreachable_gateway(project: Path) -> None:
    assert main(["install", "droid", "--url", "http://127.0.0.1:9", "--no-check", "--events", "PreToolUse"]) == 0
    argv = [sys.executable, "-m", "hookbus", "install", "droid", "--check"]
    result = subprocess.run(argv, cwd=project, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("hookbus: check failed: ") and "127.0.0.1:9" in result.stderr
