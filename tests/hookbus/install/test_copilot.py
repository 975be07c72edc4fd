"""``hookbus install copilot``: the hook file it writes for each scope, what it keeps, and its warnings.

Everything runs through ``hookbus.cli.main`` on real files in ``tmp_path``; the check after an
install is skipped (``--no-check``) except in the one test that runs a real gateway-less check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hookbus.cli import main
from hookbus.install.copilot import DEFAULT_EVENTS, entry_url, hooks_path
from hookbus.platform.redis_server import free_port

URL = "http://127.0.0.1:8787"
HOOK_URL = f"{URL}/v1/hooks?dialect=copilot"
MINE: dict[str, Any] = {
    "version": 1,
    "disableAllHooks": False,
    "hooks": {
        "PreToolUse": [
            {"type": "command", "bash": "./guard.sh", "timeoutSec": 5},
            {"matcher": "Bash", "hooks": [{"type": "command", "bash": "./bash-only.sh"}]},
        ],
        "agentStop": [{"type": "http", "url": "https://audit.internal/stop"}],
    },
}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the current directory, with its own ``COPILOT_HOME``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COPILOT_HOME", str(tmp_path / "copilot-home"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HOOKBUS_URL", raising=False)
    return tmp_path


def install(*args: str) -> int:
    return main(["install", "copilot", "--url", URL, "--no-check", *args])


def hookbus_entries(config: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        event: [e for e in entries if entry_url(e) is not None]
        for event, entries in config["hooks"].items()
        if any(entry_url(e) is not None for e in entries)
    }


def test_by_default_every_event_gets_the_shim_which_fails_open(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install("--hook-command", "/opt/hb/hookbus") == 0
    path = project / ".github" / "hooks" / "hookbus.json"
    config = json.loads(path.read_text())
    assert config["version"] == 1 and list(config["hooks"]) == list(DEFAULT_EVENTS)
    for event in DEFAULT_EVENTS:
        assert config["hooks"][event] == [
            {"type": "command", "bash": f"/opt/hb/hookbus hook --agent copilot --url {URL}/v1/hooks", "timeoutSec": 10}
        ]
    captured = capsys.readouterr()
    assert f"{path}: 12 command hooks (hookbus hook) -> {URL}/v1/hooks" in captured.out
    assert "note:" not in captured.out
    warnings = [line for line in captured.err.splitlines() if line.startswith("hookbus: warning: ")]
    assert len(warnings) == 1 and "trusted folder" in warnings[0]  # no http rules for a command hook


@pytest.mark.system
@pytest.mark.parametrize(("flags", "code"), [((), 0), (("--fail-closed",), 2)])
def test_the_installed_command_fails_open_unless_fail_closed(project: Path, flags: tuple[str, ...], code: int) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens: the gateway is down
    assert (
        main(["install", "copilot", "--url", down, "--no-check", "--events", "PreToolUse", "--timeout", "2", *flags])
        == 0
    )
    (entry,) = json.loads((project / ".github" / "hooks" / "hookbus.json").read_text())["hooks"]["PreToolUse"]
    event = {
        "hook_event_name": "PreToolUse",
        "session_id": "s",
        "cwd": str(project),
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
    }
    done = subprocess.run(
        ["bash", "-c", entry["bash"]], input=json.dumps(event), capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == code, done.stderr  # Copilot denies a PreToolUse command hook's exit 2
    assert ("failing closed" if code else "failing open") in done.stderr
    assert done.stdout.strip() == ("" if code else "{}")


def test_http_writes_native_http_hooks_for_every_event(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--http") == 0
    path = project / ".github" / "hooks" / "hookbus.json"
    config = json.loads(path.read_text())
    assert config["version"] == 1 and list(config["hooks"]) == list(DEFAULT_EVENTS)
    for event in DEFAULT_EVENTS:
        assert config["hooks"][event] == [
            {
                "type": "http",
                "url": HOOK_URL,
                "headers": {"Authorization": "Bearer ${HOOKBUS_TOKEN}"},
                "allowedEnvVars": ["HOOKBUS_TOKEN"],
                "timeoutSec": 10,
            }
        ]
    assert "tok" not in path.read_text().lower().replace("hookbus_token", "")  # no token value in the file
    captured = capsys.readouterr()
    assert f"{path}: 12 http hooks -> {URL}/v1/hooks" in captured.out
    assert "note: Copilot denies tool calls while the gateway cannot be reached or refuses the token" in captured.out
    warnings = [line for line in captured.err.splitlines() if line.startswith("hookbus: warning: ")]
    assert any("COPILOT_HOOK_ALLOW_LOCALHOST=1" in line for line in warnings)
    assert any("trusted folder" in line for line in warnings)
    assert len(warnings) == 2 and "Traceback" not in captured.err


def test_merges_is_idempotent_and_uninstalls_byte_for_byte(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / ".github" / "hooks" / "hookbus.json"
    path.parent.mkdir(parents=True)
    original = json.dumps(MINE, indent=4) + "\n"  # not hookbus's formatting
    path.write_text(original)
    assert install("--events", "PreToolUse,Stop") == 0 and path.read_text() != original
    assert main(["install", "copilot", "--uninstall"]) == 0
    assert path.read_text() == original  # byte for byte, from the .bak
    assert install("--events", "PreToolUse,Stop") == 0
    merged = json.loads(path.read_text())
    assert merged["disableAllHooks"] is False and merged["version"] == 1
    assert merged["hooks"]["PreToolUse"][:2] == MINE["hooks"]["PreToolUse"]  # the user's own stay first
    assert merged["hooks"]["agentStop"] == MINE["hooks"]["agentStop"]
    assert set(hookbus_entries(merged)) == {"PreToolUse", "Stop"}
    assert (path.parent / "hookbus.json.bak").read_text() == original
    written = path.read_text()
    capsys.readouterr()
    assert install("--events", "PreToolUse,Stop") == 0
    assert path.read_text() == written and "already up to date; nothing to change" in capsys.readouterr().out
    assert install("--events", "Stop", "--timeout", "3") == 0  # narrowed: PreToolUse's entry goes
    narrowed = json.loads(path.read_text())
    assert set(hookbus_entries(narrowed)) == {"Stop"} and narrowed["hooks"]["Stop"][0]["timeoutSec"] == 3
    assert narrowed["hooks"]["PreToolUse"] == MINE["hooks"]["PreToolUse"]
    assert main(["install", "copilot", "--uninstall"]) == 0
    assert json.loads(path.read_text()) == MINE
    assert main(["install", "copilot", "--uninstall"]) == 0
    assert "nothing to change" in capsys.readouterr().out


def test_uninstall_deletes_a_file_that_held_only_hookbus(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / ".github" / "hooks" / "hookbus.json"
    assert install() == 0 and path.exists()
    other = path.parent / "team.json"
    other.write_text('{"version": 1, "hooks": {}}')
    assert main(["install", "copilot", "--uninstall"]) == 0
    assert not path.exists() and other.read_text() == '{"version": 1, "hooks": {}}'
    assert "which held only hookbus's hooks" in capsys.readouterr().out
    assert json.loads((path.parent / "hookbus.json.bak").read_text())["version"] == 1  # a .bak, not a .json


def test_uninstall_narrowed_to_one_gateway(project: Path) -> None:
    path = project / "hooks.json"
    path.write_text(json.dumps({"version": 1, "hooks": {}}))
    assert install("--http", "--settings-file", str(path), "--events", "Stop") == 0
    other = json.loads(path.read_text())
    other["hooks"]["Stop"].append({**other["hooks"]["Stop"][0], "url": "https://b.internal/v1/hooks?dialect=copilot"})
    path.write_text(json.dumps(other))
    assert main(["install", "copilot", "--settings-file", str(path), "--uninstall", "--url", "https://b.internal"]) == 0
    assert [e["url"] for e in json.loads(path.read_text())["hooks"]["Stop"]] == [HOOK_URL]


def test_dry_run_prints_a_diff_and_writes_nothing(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / ".github" / "hooks" / "hookbus.json"
    assert install("--http", "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"--- /dev/null\n+++ {path}\n") and f'+        "url": "{HOOK_URL}",' in out
    assert not path.exists() and not path.parent.exists()
    assert install("--http") == 0
    before = path.read_text()
    capsys.readouterr()
    assert install("--dry-run") == 0
    diff = capsys.readouterr().out
    assert diff.startswith(f"--- {path}\n+++ {path}\n") and '+        "type": "command",' in diff
    assert path.read_text() == before and not (path.parent / "hookbus.json.bak").exists()


def test_shim_and_fail_closed_write_command_hooks(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        install("--fail-closed", "--hook-command", "/opt/hb/hookbus", "--events", "PreToolUse", "--timeout", "4") == 0
    )
    config = json.loads((project / ".github" / "hooks" / "hookbus.json").read_text())
    assert config["hooks"]["PreToolUse"] == [
        {
            "type": "command",
            "bash": f"/opt/hb/hookbus hook --agent copilot --url {URL}/v1/hooks --timeout 3.2 --fail-closed",
            "timeoutSec": 4,
        }
    ]
    captured = capsys.readouterr()
    assert "COPILOT_HOOK_ALLOW_LOCALHOST" not in captured.err  # a command hook has no http rules
    assert "note:" not in captured.out
    assert install("--shim", "--hook-command", "/opt/hb/hookbus", "--events", "PreToolUse") == 0
    shim = json.loads((project / ".github" / "hooks" / "hookbus.json").read_text())["hooks"]["PreToolUse"]
    assert shim == [
        {"type": "command", "bash": f"/opt/hb/hookbus hook --agent copilot --url {URL}/v1/hooks", "timeoutSec": 10}
    ]
    assert install("--http", "--events", "PreToolUse") == 0  # to http, in place
    back = json.loads((project / ".github" / "hooks" / "hookbus.json").read_text())["hooks"]["PreToolUse"]
    assert len(back) == 1 and back[0]["type"] == "http"


def test_user_scope_honours_copilot_home(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert install("--scope", "user", "--events", "Stop") == 0
    assert (project / "copilot-home" / "hooks" / "hookbus.json").is_file()
    assert not (project / ".github").exists()
    monkeypatch.delenv("COPILOT_HOME")
    assert hooks_path("user") == project / "home" / ".copilot" / "hooks" / "hookbus.json"
    assert hooks_path("project", cwd=Path("/r")) == Path("/r/.github/hooks/hookbus.json")


def test_managed_scope_is_copilots_policy_folder(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert hooks_path("managed") == Path("/etc/github-copilot/policy.d/hookbus.json")
    assert install("--http", "--scope", "managed", "--dry-run", "--url", "https://hookbus.corp") == 0
    captured = capsys.readouterr()
    assert "+++ /etc/github-copilot/policy.d/hookbus.json" in captured.out
    assert '"url": "https://hookbus.corp/v1/hooks?dialect=copilot"' in captured.out
    assert "warning" not in captured.err  # https, and policy hooks ignore folder trust


def test_warnings_for_what_would_skip_the_hooks(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo_settings = project / ".github" / "copilot" / "settings.json"
    repo_settings.parent.mkdir(parents=True)
    repo_settings.write_text(json.dumps({"disableAllHooks": True}))
    assert install("--http", "--scope", "user", "--url", "http://hookbus.corp:8787", "--events", "Stop") == 0
    err = capsys.readouterr().err
    assert "use an https:// URL, or leave out --http" in err
    assert f"{repo_settings} sets disableAllHooks: true, so Copilot runs no hook in {project}" in err
    assert "trusted folder" not in err  # user hooks always load
    assert err.count("hookbus: warning: ") == 2
    claude = project / ".claude" / "settings.json"
    assert main(["install", "claude", "--url", URL, "--no-check", "--events", "PreToolUse"]) == 0 and claude.is_file()
    capsys.readouterr()
    assert install("--events", "Stop") == 0
    err = capsys.readouterr().err
    assert f"Copilot also runs the hooks in {claude} (in a trusted folder)" in err
    own = project / "own.json"
    own.write_text(json.dumps({"version": 1, "disableAllHooks": True, "hooks": {}}))
    repo_settings.write_text("{}")
    assert install("--settings-file", str(own), "--url", "https://hookbus.corp") == 0
    err = capsys.readouterr().err
    assert err.count("hookbus: warning: ") == 1 and f"{own} sets disableAllHooks: true" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--events", "Nope,Stop"], "not Copilot CLI events: Nope"),
        (["--url", "ftp://x"], "--url must be an http(s) URL"),
        (["--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["--settings-file", "/nonexistent-dir/x.json"], "/nonexistent-dir does not exist (a typo?)"),
        (["--http", "--fail-closed"], "--http and --fail-closed do not go together"),
        (["--http", "--shim"], "--http and --shim do not go together"),
    ],
)
def test_bad_input_is_one_clear_line(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert install(*args) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_broken_files_are_refused_and_left_alone(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / "broken.json"
    path.write_text('{"hooks": {,}')
    assert install("--settings-file", str(path)) == 1
    assert "not valid JSON" in capsys.readouterr().err and path.read_text() == '{"hooks": {,}'
    path.write_text('{"hooks": []}')
    assert install("--settings-file", str(path)) == 1
    assert "'hooks' is not an object" in capsys.readouterr().err


@pytest.mark.system
def test_the_console_command_and_its_check(project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookbus", "install", "copilot", "--url", "http://127.0.0.1:9", "--events", "Stop"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr  # written; the gateway may simply not run yet
    assert (
        "hookbus: warning: check failed: the installed command runs but does not reach the gateway: gateway "
        "unreachable at http://127.0.0.1:9/v1/hooks?dialect=copilot"
    ) in done.stderr
    assert (project / ".github" / "hooks" / "hookbus.json").is_file()
    checked = subprocess.run(
        [sys.executable, "-m", "hookbus", "install", "copilot", "--check"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 1
    assert "check failed: the installed command runs but does not reach the gateway: gateway unreachable at " in (
        checked.stderr
    )
