"""What a freeze covers, when it lifts, how its deny reads (no Redis)."""

from __future__ import annotations

import pytest

from bus.errors import ConfigError
from bus.freeze.freezes import STATE_CHANGING_TOOLS, Freeze, check_tools, parse_until_ms
from bus.hooks.merge import merge_results

NOW = 1_796_583_600_000  # 2026-12-06 19:00:00Z


@pytest.mark.parametrize(
    ("text", "until"),
    [
        ("45s", NOW + 45_000),
        ("30m", NOW + 30 * 60_000),
        ("2h", NOW + 2 * 3_600_000),
        ("1d", NOW + 86_400_000),
        ("2026-12-06T21:00:00Z", NOW + 2 * 3_600_000),
        ("2026-12-06T21:00:00", NOW + 2 * 3_600_000),  # no zone: UTC
        ("2026-12-06T22:00:00+01:00", NOW + 2 * 3_600_000),
        (None, None),
        ("", None),
    ],
)
def test_until_is_a_duration_or_a_time(text: str | None, until: int | None) -> None:
    assert parse_until_ms(text, NOW) == until


@pytest.mark.parametrize(
    ("text", "says"), [("10", "duration"), ("soon", "duration"), ("2020-01-01T00:00:00Z", "passed")]
)
def test_a_bad_or_past_until_is_a_clear_error(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_until_ms(text, NOW)


def test_the_default_tools_are_the_state_changing_ones() -> None:
    freeze = Freeze.new("acme")
    assert freeze.tools == STATE_CHANGING_TOOLS
    for tool in ("Bash", "PowerShell", "Write", "Edit", "MultiEdit", "NotebookEdit", "mcp__github__create_issue"):
        assert freeze.covers("PreToolUse", tool), tool
        assert freeze.covers("PermissionRequest", tool), tool
    for tool in ("Read", "Glob", "Grep", "WebFetch", "WebSearch", "Task", "BashOutput"):
        assert not freeze.covers("PreToolUse", tool), tool
    # Only the events a tool waits on: what ran already, or other events, are not denied.
    for event in ("PostToolUse", "UserPromptSubmit", "Stop", "SessionStart"):
        assert not freeze.covers(event, "Bash")
    assert not freeze.covers("PreToolUse", None)


def test_tools_are_hook_matchers() -> None:
    assert Freeze.new("acme", ["*"]).covers("PreToolUse", "Read")
    only = Freeze.new("acme", ["Write|Edit", "mcp__github__.*"])
    assert only.covers("PreToolUse", "Edit") and only.covers("PreToolUse", "mcp__github__push")
    assert not only.covers("PreToolUse", "Bash") and not only.covers("PreToolUse", "mcp__slack__post")
    with pytest.raises(ConfigError, match="tools"):
        check_tools(["(unclosed"])
    with pytest.raises(ConfigError, match="tools"):
        check_tools(["Bash", " "])
    with pytest.raises(ConfigError, match="tenant"):
        Freeze.new("no spaces allowed")


def test_the_deny_names_the_freeze_who_since_until_and_why() -> None:
    freeze = Freeze("acme", ("Bash",), "alice (org admin)", "credential leak", NOW, NOW + 3_600_000)
    reason = freeze.deny_reason
    for part in ("tenant acme is frozen", "(Bash)", "by alice (org admin)", "since 2026-12-06 19:00:00Z"):
        assert part in reason
    assert "until 2026-12-06 20:00:00Z: credential leak" in reason
    assert "until lifted" in Freeze("acme", ("Bash",), "bob", "", NOW).deny_reason
    merged = merge_results("PreToolUse", [freeze.result("PreToolUse")])
    assert merged.decision == "deny"
    assert merged.output["hookSpecificOutput"]["permissionDecisionReason"] == reason
    merged = merge_results("PermissionRequest", [freeze.result("PermissionRequest")])
    assert merged.decision == "deny"
    assert merged.output["hookSpecificOutput"]["decision"] == {"behavior": "deny", "message": reason}


def test_a_freeze_lifts_itself_at_until_and_survives_a_round_trip() -> None:
    freeze = Freeze("acme", ("Bash", "mcp__.*"), "alice", "why", NOW, NOW + 1000)
    assert freeze.active(NOW + 999) and not freeze.active(NOW + 1000)
    assert Freeze.decode(freeze.encode()) == freeze
    assert Freeze("acme", ("Bash",), "a", "", NOW).active(NOW + 10**12)
    with pytest.raises(ConfigError, match="passed"):
        Freeze.new("acme", until_ms=1)


def test_reason_and_by_are_one_bounded_line() -> None:
    freeze = Freeze.new("acme", reason="line one\nline two " + "x" * 1000, by="eve\r\nforged: yes")
    assert "\n" not in freeze.deny_reason and "\r" not in freeze.by
    assert len(freeze.reason) <= 300
