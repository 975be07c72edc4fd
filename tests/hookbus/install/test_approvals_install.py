"""``hookbus install claude --approvals``: the approval events fail closed and wait for a person."""

from __future__ import annotations

import shlex

from bus.policy.approvals import APPROVAL_EVENTS
from hookbus.install import settings_file
from hookbus.install.settings_file import InstallPlan


def test_with_approvals_on_the_approval_events_use_the_shim_that_fails_closed_and_waits_long() -> None:
    plan = InstallPlan(url="http://127.0.0.1:8787", approval_timeout_s=600.0)
    for event in ("PreToolUse", "PermissionRequest"):
        handler = plan.handler(event)
        # An http hook whose connection drops lets the tool run: a fault would be an allow.
        assert handler["type"] == "command" and handler["timeout"] == 600
        words = shlex.split(handler["command"])
        assert "--fail-closed" in words
        assert float(words[words.index("--timeout") + 1]) == 480  # answers before Claude Code's timeout does
    assert plan.handler("PostToolUse")["type"] == "http"  # other events as before
    without = InstallPlan(url="http://127.0.0.1:8787")
    assert without.handler("PreToolUse")["type"] == "http"


def test_the_installer_knows_the_approval_events_of_the_policy() -> None:
    assert settings_file.APPROVAL_EVENTS == APPROVAL_EVENTS
