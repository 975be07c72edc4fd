"""The console in Debian's chromium (Playwright), signed in: what the browser tests start from."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.sync_api import Page

#: Debian's package ``chromium``: no browser is downloaded.
CHROMIUM = Path("/usr/bin/chromium")


@contextlib.contextmanager
def console_page(
    pw: Any, url: str, token: str, viewport: dict[str, int] | None = None
) -> Iterator[tuple[Page, list[str]]]:
    """A page on the console of the gateway at ``url``, signed in with ``token``, and the errors
    its scripts raise (a test asserts there were none); the browser is closed on the way out."""
    from playwright.sync_api import expect

    browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
    try:
        page = browser.new_page(viewport=viewport or {"width": 1400, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(f"{url}/ui")
        expect(page.locator("#token-dialog")).to_be_visible(timeout=10_000)
        page.fill("#token-input", token)
        page.click("#token-ok")
        yield page, errors
    finally:
        browser.close()
