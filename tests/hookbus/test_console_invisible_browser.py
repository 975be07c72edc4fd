"""The console in a real browser (Debian's ``chromium`` via Playwright, against a running ``hookbus up``):
agent-chosen text with bidi overrides and other invisible controls is shown with a visible marker.

A session id, a tool name and a command carrying U+202E (RIGHT-TO-LEFT OVERRIDE) and friends must
render as ``⟨U+202E⟩`` in the feed, the lanes, their tooltips and the detail pane, and no raw
control may reach the page's text.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.hookbus.console_page import console_page
from tests.hookbus.test_console_browser import _chromium
from tests.up import UpProcess, running_up

RAW = ("\u202e", "\u2066", "\u200f", "\u061c", "\x1b", "\u200b", "\U000e0041")
SESSION = "acme-\u202egpj.exe"
TOOL = "Bash\u2066x"
COMMAND = "echo \u202eok\x1b[2J\u200b\U000e0041"


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"hooks": {}}))
    with running_up(tmp_path, policy, {"HOOKBUS_TOKENS": "acme:tok-acme"}) as platform:
        yield platform


@pytest.mark.timeout(120)
def test_bidi_and_invisible_controls_render_as_visible_markers(up: UpProcess) -> None:
    _chromium()
    from playwright.sync_api import expect, sync_playwright

    hook_input = {
        "hook_event_name": "PreToolUse",
        "session_id": SESSION,
        "tool_name": TOOL,
        "tool_input": {"command": COMMAND},
        "cwd": "/srv/app",
    }
    up.emit("tok-acme", hook_input)
    with sync_playwright() as pw, console_page(pw, up.url, "tok-acme") as (page, errors):
        expect(page.locator("#status")).to_have_text("live", timeout=10_000)
        row = page.locator("#feed li").first
        expect(row).to_contain_text("acme/acme-⟨U+202E⟩gpj.exe", timeout=10_000)
        expect(row).to_contain_text("PreToolUse(Bash⟨U+2066⟩x)")
        expect(row).to_have_attribute("title", "echo ⟨U+202E⟩ok⟨U+001B⟩[2J⟨U+200B⟩⟨U+E0041⟩")
        lane = page.locator(".lane-name").first
        expect(lane).to_have_text("acme/acme-⟨U+202E⟩gpj.exe", timeout=5_000)
        expect(lane).to_have_attribute("title", "acme/acme-⟨U+202E⟩gpj.exe")
        row.click()
        detail = page.locator("#detail")
        expect(detail).to_contain_text("acme-⟨U+202E⟩gpj.exe")
        expect(detail).to_contain_text('"command": "echo ⟨U+202E⟩ok\\u001b[2J⟨U+200B⟩⟨U+E0041⟩"')
        expect(detail).to_contain_text('"tool_name": "Bash⟨U+2066⟩x"')
        # Nothing raw in what the page renders: its text, its tooltips, the filter suggestions.
        shown = page.evaluate(
            """() => [document.body.innerText,
              ...[...document.querySelectorAll("[title]")].map((node) => node.title),
              ...[...document.querySelectorAll("option")].map((node) => node.value)]"""
        )
        assert any("⟨U+202E⟩" in item for item in shown[1:])
        for char in RAW:
            assert not [item for item in shown if char in item], f"raw U+{ord(char):04X} on the page"
        # A filter typed as shown (or pasted raw) still finds the session.
        page.fill("#f-session", "acme-⟨U+202E⟩")
        expect(page.locator("#feed li")).to_have_count(1)
        page.fill("#f-session", "acme-\u202e")
        expect(page.locator("#feed li")).to_have_count(1)
        page.fill("#f-session", "acme-x")
        expect(page.locator("#feed li")).to_have_count(0)
        assert errors == []
