"""``hookbus freeze`` and ``hookbus unfreeze`` against a real ``hookbus up`` on a free port."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.ci import missing
from tests.conftest import pre_tool_use, run_hookbus, wait_for
from tests.up import UpProcess, running_up

pytestmark = pytest.mark.system
CHROMIUM = Path("/usr/bin/chromium")

ENV = {
    "HOOKBUS_TOKENS": "acme:tok-a,beta:tok-b",
    "HOOKBUS_TENANT_ADMIN_TOKENS": "acme:tok-a-admin",
    "HOOKBUS_ADMIN_TOKENS": "tok-org",
}


def decision(up: UpProcess, token: str, command: str = "ls") -> str:
    answer = up.emit(token, pre_tool_use(command))
    return str(answer.get("hookSpecificOutput", {}).get("permissionDecision", "none"))


def test_freeze_denies_within_a_second_unfreeze_allows_and_until_lifts_it(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    policy = write_policy(
        "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - {type: rule, ask: ['Bash(git push *)']}\n"
    )
    with running_up(tmp_path, policy, ENV) as up:

        def cli(token: str, *args: str) -> tuple[int, str]:
            done = run_hookbus(*args, "--url", up.url, HOOKBUS_TOKEN=token, HOOKBUS_AUTHOR="alice")
            return done.returncode, done.stdout + done.stderr

        assert decision(up, "tok-a") == "none"
        code, out = cli("tok-org", "freeze", "--tenant", "acme", "--reason", "credential leak")
        assert code == 0 and "froze acme" in out and "alice (org admin)" in out
        wait_for(lambda: decision(up, "tok-a") == "deny", timeout_s=1.0, interval_s=0.02)
        assert decision(up, "tok-b") == "none"  # the other tenant runs
        answer = up.emit("tok-a", pre_tool_use("ls"))
        assert "tenant acme is frozen" in answer["hookSpecificOutput"]["permissionDecisionReason"]
        code, out = cli("tok-a-admin", "freeze", "--list")
        assert code == 0 and out.startswith("acme: Bash|") and "credential leak" in out

        # An agent's token cannot lift it, nor a tenant admin freeze another tenant: a clear one-line message.
        code, out = cli("tok-a", "unfreeze", "--tenant", "acme")
        assert code == 1 and "HTTP 403" in out and "needs an org-admin token" in out and len(out.splitlines()) == 1
        code, out = cli("tok-a-admin", "freeze", "--tenant", "beta")
        assert code == 1 and "HTTP 403" in out and "tenant acme's admin" in out
        assert decision(up, "tok-b") == "none"

        code, out = cli("tok-a-admin", "unfreeze", "--tenant", "acme")
        assert code == 0 and "unfroze acme" in out
        wait_for(lambda: decision(up, "tok-a") == "none", timeout_s=1.0, interval_s=0.02)
        code, out = cli("tok-org", "unfreeze", "--tenant", "acme")
        assert code == 0 and "acme was not frozen" in out

        # --until: it lifts itself.
        code, out = cli("tok-org", "freeze", "--tenant", "acme", "--tools", "Bash", "--until", "2s")
        assert code == 0 and "until 20" in out
        assert decision(up, "tok-a") == "deny"
        wait_for(lambda: decision(up, "tok-a") == "none", timeout_s=10, interval_s=0.05)
        code, out = cli("tok-org", "freeze", "--list")
        assert code == 0 and "no tenant is frozen" in out
        code, out = cli("tok-org", "freeze", "--tenant", "acme", "--until", "soon")
        assert code == 1 and "invalid_freeze" not in out and "duration" in out


@pytest.mark.timeout(120)
def test_the_console_shows_a_banner_while_the_tenant_is_frozen(
    tmp_path: Path, write_policy: Callable[..., Path]
) -> None:
    if not CHROMIUM.exists():
        missing("no /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    policy = write_policy(
        "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - {type: rule, deny: ['Bash(rm *)']}\n"
    )
    with running_up(tmp_path, policy, ENV) as up, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{up.url}/ui")
            page.fill("#token-input", "tok-a")  # the tenant's agent token sees its own tenant's freeze
            page.click("#token-ok")
            banner = page.locator("#freeze-banner")
            expect(page.locator("#status")).to_have_text("live", timeout=10_000)
            expect(banner).to_be_hidden()
            org = {"Authorization": "Bearer tok-org"}
            freeze = {"tenant": "acme", "reason": "incident 42", "by": "alice"}
            assert httpx.post(f"{up.url}/v1/freeze", json=freeze, headers=org, timeout=10).status_code == 200
            expect(banner).to_be_visible(timeout=10_000)
            expect(banner).to_contain_text("tenant acme")
            expect(banner).to_contain_text("by alice (org admin)")
            expect(banner).to_contain_text("incident 42")
            httpx.delete(f"{up.url}/v1/freeze", params={"tenant": "acme"}, headers=org, timeout=10)
            expect(banner).to_be_hidden(timeout=10_000)
            assert errors == []
        finally:
            browser.close()
