"""``hookbus install cline``: the hook scripts it writes into Cline's hooks folders, what it keeps, its warnings.

Every test runs the real command (``hookbus.cli.main``, or ``python -m hookbus`` where the
output and exit code of a whole process matter) on real files in ``tmp_path``. That Cline
itself runs what is written is shown by ``tests/agents/test_cline.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hookbus.cli import main
from hookbus.install.cline import AWAITED, CLINE_HOOK_EVENTS, MARKER, is_hookbus_script, script_url
from tests.conftest import REPO

URL = "http://127.0.0.1:8787/v1/hooks"
USER_HOOK = '#!/bin/bash\necho \'{"context": "my own hook"}\'\n'


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as cwd, a throwaway HOME, and no Cline or hookbus variables."""
    for name in list(os.environ):
        if name.startswith(("CLINE_", "HOOKBUS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return project


def install(*args: str) -> int:
    return main(["install", "cline", "--no-check", "--url", "http://127.0.0.1:8787", *args])


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mode & 0o777) for p in sorted(folder.iterdir())}


def test_project_install_writes_one_executable_script_per_event(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install() == 0
    hooks = isolated / ".cline" / "hooks"
    assert sorted(p.name for p in hooks.iterdir()) == sorted(CLINE_HOOK_EVENTS)
    for event in CLINE_HOOK_EVENTS:
        path = hooks / event
        lines = path.read_text().splitlines()
        assert lines[:2] == ["#!/bin/sh", MARKER] and len(lines) == 3
        assert lines[2].startswith("exec ") and f"hook --agent cline --url {URL} --timeout 10" in lines[2]
        assert os.access(path, os.X_OK) and script_url(path.read_text()) == URL
    out, err = capsys.readouterr()
    assert "9 hook scripts" in out and "export $HOOKBUS_TOKEN" in out
    assert not any("HOOKBUS_TOKEN" in p.read_text() or "Bearer" in p.read_text() for p in hooks.iterdir())
    assert "hookbus: warning: Cline runs UserPromptSubmit, TaskStart" in err and "detached" in err


@pytest.mark.system
def test_the_script_passes_stdin_through_to_the_shim_and_prints_its_answer(isolated: Path) -> None:
    assert install("--events", "PreToolUse", "--hook-command", f"{sys.executable} -m hookbus") == 0
    done = subprocess.run(
        [str(isolated / ".cline" / "hooks" / "PreToolUse")],
        input=json.dumps({"hookName": "tool_call", "taskId": "t"}),
        env={**os.environ, "PYTHONPATH": str(REPO), "HOOKBUS_TOKEN": "x"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # nothing listens on 8787 in the test: the shim fails open with {}
    assert (done.returncode, done.stdout) == (0, "{}\n") and "failing open" in done.stderr


@pytest.mark.system
def test_fail_closed_makes_the_pre_tool_use_script_print_a_cancel(isolated: Path) -> None:
    assert (
        install(
            "--events", "PreToolUse", "PostToolUse", "--fail-closed", "--hook-command", f"{sys.executable} -m hookbus"
        )
        == 0
    )
    hooks = isolated / ".cline" / "hooks"
    assert "--fail-closed" not in (hooks / "PostToolUse").read_text()  # Cline reads no cancel there
    done = subprocess.run(
        [str(hooks / "PreToolUse")],
        input="{}",
        env={**os.environ, "PYTHONPATH": str(REPO), "HOOKBUS_URL": ""},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    answer = json.loads(done.stdout)
    assert answer["cancel"] is True and "failing closed" in answer["errorMessage"]
    assert "failing closed" in done.stderr


def test_the_users_own_hooks_are_kept_and_never_overwritten(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hooks = isolated / ".cline" / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "PreToolUse.sh").write_text(USER_HOOK)
    (hooks / "notes.txt").write_text("mine")
    before = snapshot(hooks)
    assert install("--events", "PreToolUse") == 0
    assert (hooks / "PreToolUse.sh").read_text() == USER_HOOK and is_hookbus_script((hooks / "PreToolUse").read_text())
    assert main(["install", "cline", "--uninstall"]) == 0
    assert snapshot(hooks) == before
    (hooks / "TaskStart").write_text(USER_HOOK)
    capsys.readouterr()
    assert install("--events", "TaskStart") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "TaskStart is not hookbus's; rename it (e.g. to TaskStart.sh" in err[0]
    assert (hooks / "TaskStart").read_text() == USER_HOOK


def test_a_second_install_changes_nothing_and_says_so(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install() == 0
    hooks = isolated / ".cline" / "hooks"
    before = snapshot(hooks)
    capsys.readouterr()
    assert install() == 0
    assert "already up to date; nothing to change" in capsys.readouterr().out
    assert snapshot(hooks) == before


def test_a_changed_install_keeps_a_backup_cline_does_not_run_and_uninstall_removes_both(isolated: Path) -> None:
    assert install("--events", "PreToolUse") == 0
    hooks = isolated / ".cline" / "hooks"
    first = (hooks / "PreToolUse").read_text()
    assert main(["install", "cline", "--no-check", "--url", "http://gw.internal:9000", "--events", "PreToolUse"]) == 0
    assert (hooks / "PreToolUse.bak").read_text() == first
    assert script_url((hooks / "PreToolUse").read_text()) == "http://gw.internal:9000/v1/hooks"
    (hooks / "PostToolUse.py").write_text("print('{}')\n")
    assert main(["install", "cline", "--uninstall"]) == 0
    assert [p.name for p in hooks.iterdir()] == ["PostToolUse.py"]


def test_uninstall_with_a_url_removes_only_that_gateways_scripts(isolated: Path) -> None:
    assert install("--events", "PreToolUse") == 0
    assert main(["install", "cline", "--no-check", "--url", "http://other:1", "--events", "PostToolUse"]) == 0
    assert main(["install", "cline", "--uninstall", "--url", "http://other:1"]) == 0
    assert sorted(p.name for p in (isolated / ".cline" / "hooks").iterdir()) == ["PreToolUse"]


def test_dry_run_prints_a_diff_and_writes_nothing(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--dry-run", "--events", "PreToolUse", "Stop") == 0
    out = capsys.readouterr().out
    assert not (isolated / ".cline").exists()
    assert out.count("--- /dev/null") == 2 and "+++ " + str(isolated / ".cline" / "hooks" / "TaskComplete") in out
    assert install("--events", "PreToolUse") == 0
    capsys.readouterr()
    assert main(["install", "cline", "--uninstall", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "+++ /dev/null" in out and f"-{MARKER}" in out and (isolated / ".cline" / "hooks" / "PreToolUse").exists()


def test_user_scope_follows_cline_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install("--scope", "user", "--events", "PreToolUse") == 0
    assert (tmp_path / "home" / ".cline" / "hooks" / "PreToolUse").exists()
    monkeypatch.setenv("CLINE_DIR", str(tmp_path / "cline-dir"))
    capsys.readouterr()
    assert install("--scope", "user", "--events", "PreToolUse") == 0
    assert is_hookbus_script((tmp_path / "cline-dir" / "hooks" / "PreToolUse").read_text())
    assert "only when run with the same CLINE_DIR" in capsys.readouterr().err


def test_a_folder_cline_does_not_read_is_written_with_a_warning(
    isolated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "elsewhere" / "hooks"
    assert install("--settings-file", str(target), "--create", "--events", "PreToolUse") == 0
    assert (target / "PreToolUse").exists()
    err = capsys.readouterr().err
    assert f"Cline does not read hooks from {target} (its --hooks-dir flag has no effect in 3.0.65)" in err
    assert (
        install("--settings-file", str(isolated / ".clinerules" / "hooks"), "--create", "--events", "PreToolUse") == 0
    )
    assert "does not read" not in capsys.readouterr().err


def test_events_take_cline_or_claude_names_and_only_awaited_ones_do_not_warn(
    isolated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert install("--events", "SessionStart,Stop", "SessionEnd") == 0
    names = sorted(p.name for p in (isolated / ".cline" / "hooks").iterdir())
    assert names == ["SessionShutdown", "TaskComplete", "TaskResume", "TaskStart"]
    capsys.readouterr()
    assert install("--events", *AWAITED) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_script_that_lost_its_exec_bit_is_fixed(isolated: Path) -> None:
    assert install("--events", "PreToolUse") == 0
    path = isolated / ".cline" / "hooks" / "PreToolUse"
    path.chmod(0o644)
    assert install("--events", "PreToolUse") == 0
    assert os.access(path, os.X_OK)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scope", "managed"], "Cline has no managed or system-wide hooks folder"),
        (["--events", "Nope"], "not Cline hook events: Nope"),
        (["--events", "PreCompact"], "never runs it"),
        (["--url", "ftp://x"], "--url must be an http(s) URL"),
        (["--timeout", "120"], "--timeout must be below 120 s"),
        (["--settings-file", "/nonexistent/hooks"], "does not exist (a typo?); pass --create"),
    ],
)
def test_bad_input_is_one_clear_line(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert main(["install", "cline", "--no-check", *args]) == 1
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and lines[0].startswith("hookbus: ") and message in lines[0], err


def test_a_file_where_the_folder_should_be_is_refused(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (isolated / ".cline").mkdir()
    (isolated / ".cline" / "hooks").write_text("x")
    assert install() == 1
    assert "is not a folder" in capsys.readouterr().err


@pytest.mark.system
def test_a_bad_install_exits_1_with_no_traceback(isolated: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hookbus", "install", "cline", "--no-check", "--events", "Nope"],
        cwd=isolated,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith("hookbus: not Cline hook events: Nope") and "Traceback" not in done.stderr


@pytest.mark.system
def test_check_reports_an_unreachable_gateway(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--events", "PreToolUse") == 0
    capsys.readouterr()
    assert main(["install", "cline", "--check"]) == 1  # the URL comes from the installed script
    assert "check failed" in capsys.readouterr().err
