"""``hookbus install opencode``: the plugin it writes where, what it keeps, its warnings, and its errors.

Every test runs the real command line (``hookbus.cli.main``, or ``python -m hookbus`` as a
subprocess) on real files in ``tmp_path``; OpenCode's per-user and managed folders are moved
there with the variables OpenCode itself reads (``XDG_CONFIG_HOME``, ``OPENCODE_CONFIG_DIR``,
``OPENCODE_TEST_MANAGED_CONFIG_DIR``). That OpenCode loads and obeys what is written is proven
by the real CLI in ``tests/agents/test_opencode.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hookbus.cli import main
from hookbus.install.opencode import MARKER
from tests.conftest import REPO

URL = "http://127.0.0.1:8787"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project folder as the working directory, OpenCode's user and managed folders in tmp_path."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("OPENCODE_TEST_MANAGED_CONFIG_DIR", str(tmp_path / "etc-opencode"))
    for name in ("OPENCODE_CONFIG_DIR", "OPENCODE_PURE", "OPENCODE_DISABLE_PROJECT_CONFIG", "HOOKBUS_URL"):
        monkeypatch.delenv(name, raising=False)
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def install(*argv: str) -> int:
    return main(["install", "opencode", "--no-check", *argv])


def plugin_of(project: Path) -> Path:
    return project / ".opencode" / "plugins" / "hookbus.js"


def test_a_project_install_writes_the_plugin_with_the_url_baked_in_and_no_token(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKBUS_TOKEN", "tok-secret")
    assert install("--url", URL) == 0
    text = plugin_of(project).read_text()
    assert text.startswith(MARKER)
    assert 'const HOOKBUS_URL = "http://127.0.0.1:8787/v1/hooks"' in text
    assert "const FAIL_CLOSED = false" in text and "const TIMEOUT_MS = 10000" in text
    assert "tok-secret" not in text and "process.env.HOOKBUS_TOKEN" in text
    assert "__HOOKBUS_" not in text  # every placeholder filled in
    out = capsys.readouterr().out
    assert "OpenCode plugin for 9 events" in out and "$HOOKBUS_TOKEN" in out


def test_a_second_run_changes_nothing_a_change_keeps_a_backup_and_uninstall_removes_only_the_plugin(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / ".opencode" / "plugins").mkdir(parents=True)
    mine = project / ".opencode" / "plugins" / "mine.js"
    mine.write_text("export const Mine = async () => ({})\n")
    assert install("--url", URL) == 0
    first = plugin_of(project).read_text()
    capsys.readouterr()
    assert install("--url", URL) == 0
    assert "already up to date" in capsys.readouterr().out
    assert not plugin_of(project).with_name("hookbus.js.bak").exists()
    assert install("--url", URL, "--fail-closed", "--timeout", "2.5") == 0
    assert "const FAIL_CLOSED = true" in plugin_of(project).read_text()
    assert "const TIMEOUT_MS = 2500" in plugin_of(project).read_text()
    assert plugin_of(project).with_name("hookbus.js.bak").read_text() == first
    assert install("--uninstall") == 0
    assert not plugin_of(project).exists()
    assert mine.read_text() == "export const Mine = async () => ({})\n"
    capsys.readouterr()
    assert install("--uninstall") == 0
    assert "nothing to change" in capsys.readouterr().out


def test_events_narrow_what_the_plugin_posts_by_either_name(project: Path) -> None:
    assert install("--url", URL, "--events", "PreToolUse", "chat.message") == 0
    assert 'new Set(["tool.execute.before", "chat.message"])' in plugin_of(project).read_text()


def test_dry_run_prints_a_diff_and_writes_nothing(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install("--url", URL, "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith("--- /dev/null\n+++ ") and '+const HOOKBUS_URL = "http://127.0.0.1:8787/v1/hooks"' in out
    assert not (project / ".opencode").exists()


def test_user_scope_honours_xdg_config_home_then_opencode_config_dir(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert install("--url", URL, "--scope", "user") == 0
    assert (tmp_path / "xdg" / "opencode" / "plugins" / "hookbus.js").read_text().startswith(MARKER)
    monkeypatch.setenv("OPENCODE_CONFIG_DIR", str(tmp_path / "custom"))
    assert install("--url", URL, "--scope", "user") == 0
    assert (tmp_path / "custom" / "plugins" / "hookbus.js").is_file()
    assert not plugin_of(project).exists()


def test_managed_scope_lists_the_plugin_in_the_managed_config_and_uninstall_restores_it_exactly(
    project: Path, tmp_path: Path
) -> None:
    managed = tmp_path / "etc-opencode"
    managed.mkdir()
    config = managed / "opencode.json"
    original = '{\n    "plugin": ["opencode-wakatime"],\n    "share": "disabled"\n}\n'
    config.write_text(original)
    assert install("--url", URL, "--scope", "managed") == 0
    entry = (managed / "plugins" / "hookbus.js").resolve().as_uri()
    assert json.loads(config.read_text()) == {"plugin": ["opencode-wakatime", entry], "share": "disabled"}
    assert config.with_name("opencode.json.bak").read_text() == original
    assert install("--url", URL, "--scope", "managed") == 0  # idempotent: one entry
    assert json.loads(config.read_text())["plugin"] == ["opencode-wakatime", entry]
    assert install("--scope", "managed", "--uninstall") == 0
    assert config.read_text() == original
    assert not (managed / "plugins" / "hookbus.js").exists()


def test_a_managed_config_the_install_made_goes_with_the_uninstall(project: Path, tmp_path: Path) -> None:
    assert install("--url", URL, "--scope", "managed") == 0
    assert (tmp_path / "etc-opencode" / "opencode.json").is_file()
    assert install("--scope", "managed", "--uninstall") == 0
    assert not (tmp_path / "etc-opencode" / "opencode.json").exists()


def test_traps_that_would_silently_skip_the_plugin_are_warned_about(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENCODE_PURE", "1")
    monkeypatch.setenv("OPENCODE_DISABLE_PROJECT_CONFIG", "true")
    assert install("--url", URL) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hookbus: warning: ")]
    text = "\n".join(warned)
    for trap in ("OPENCODE_PURE", "--pure", "OPENCODE_DISABLE_PROJECT_CONFIG", "npm_config_offline", "only logs"):
        assert trap in text, trap
    (project / ".opencode" / "node_modules" / "@opencode-ai" / "plugin").mkdir(parents=True)
    monkeypatch.delenv("OPENCODE_PURE")
    monkeypatch.delenv("OPENCODE_DISABLE_PROJECT_CONFIG")
    assert install("--url", URL, "--timeout", "3") == 0
    err = capsys.readouterr().err
    assert "npm_config_offline" not in err and "OPENCODE_PURE" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--url", "ftp://x"], "--url must be an http(s) URL"),
        (["--url", URL, "--timeout", "0"], "--timeout must be more than 0 seconds"),
        (["--url", URL, "--events", "Nope"], "not events hookbus's OpenCode plugin posts: Nope"),
        (["--url", URL, "--shim"], "--shim does not apply to OpenCode"),
        (["--url", URL, "--hook-command", "hb"], "--hook-command does not apply to OpenCode"),
        (["--url", URL, "--settings-file", "missing/dir/hookbus.js"], "does not exist (a typo?)"),
        (["--url", URL, "--settings-file", "theirs.js"], "is not hookbus's plugin"),
    ],
)
def test_bad_input_is_one_clear_line(
    project: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    (project / "theirs.js").write_text("export const Theirs = async () => ({})\n")
    assert install(*argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err, err
    assert (project / "theirs.js").read_text() == "export const Theirs = async () => ({})\n"


def test_settings_file_with_create_writes_that_file(project: Path) -> None:
    target = project / "somewhere" / "plugins" / "hookbus.js"
    assert install("--url", URL, "--settings-file", str(target), "--create") == 0
    assert target.read_text().startswith(MARKER)


@pytest.mark.system
@pytest.mark.timeout(60)
def test_a_subprocess_install_ships_the_plugin_from_package_data(project: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKBUS_")}
    result = subprocess.run(
        [sys.executable, "-m", "hookbus", "install", "opencode", "--url", URL, "--no-check"],
        cwd=project,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert plugin_of(project).read_text().startswith(MARKER)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"install/opencode_plugin.js"' in pyproject  # `pip install .` ships it


@pytest.mark.system
def test_check_alone_reports_an_unreachable_gateway_and_writes_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["install", "opencode", "--check", "--url", "http://127.0.0.1:9"]) == 1
    assert "check failed" in capsys.readouterr().err
    assert not (project / ".opencode").exists()
