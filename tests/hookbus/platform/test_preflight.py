"""Importing the policy's Python callables before they are needed, in a child interpreter."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bus.policy.loading import policy_from_text
from hookbus.platform.preflight import import_errors, import_problems

pytestmark = pytest.mark.system  # starts processes (or servers) itself


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with a few modules in it (found the way `hookbus up`'s roles find them)."""
    (tmp_path / "good_hooks.py").write_text("def check(hook_input):\n    return None\nLIMIT = 3\n")
    (tmp_path / "noisy_hooks.py").write_text("print('hello from import')\ndef check(x):\n    return None\n")
    (tmp_path / "exiting_hooks.py").write_text("raise SystemExit(3)\n")
    (tmp_path / "broken_hooks.py").write_text("import no_such_dependency_zz\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_import_errors_say_why(modules: Path) -> None:
    found = import_errors(
        [
            "good_hooks:check",
            "noisy_hooks:check",
            "good_hooks:LIMIT",
            "good_hooks:nope",
            "exiting_hooks:check",
            "broken_hooks:check",
            "missing_hooks",
            "good_hooks",
        ]
    )
    assert found == {
        "good_hooks:LIMIT": "not callable (it is int)",
        "good_hooks:nope": "AttributeError: module 'good_hooks' has no attribute 'nope'",
        "exiting_hooks:check": "SystemExit: 3",
        "broken_hooks:check": "ModuleNotFoundError: No module named 'no_such_dependency_zz'",
        "missing_hooks": "ModuleNotFoundError: No module named 'missing_hooks'",
    }
    assert import_errors([]) == {}


def test_the_search_path_is_the_working_directory(modules: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    assert import_errors(["good_hooks:check"], cwd=str(elsewhere)) == {
        "good_hooks:check": "ModuleNotFoundError: No module named 'good_hooks'"
    }
    assert import_errors(["good_hooks:check"], cwd=os.getcwd()) == {}


def test_import_problems_locate_functions_and_plugins(modules: Path) -> None:
    policy = policy_from_text(
        """
hookbus:
  plugins: [good_hooks, missing_plugin]
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - {type: function, function: "good_hooks:check"}
        - {type: function, function: "good_hooks:nope"}
""",
        "policy.yaml",
    )
    assert [str(p) for p in import_problems(policy)] == [
        "policy.yaml: hookbus.plugins[1]: cannot import plugin 'missing_plugin': "
        "ModuleNotFoundError: No module named 'missing_plugin'",
        "policy.yaml: hooks.PreToolUse[0].hooks[1].function: cannot import 'good_hooks:nope': "
        "AttributeError: module 'good_hooks' has no attribute 'nope'",
    ]
