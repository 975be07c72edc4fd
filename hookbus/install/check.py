"""``hookbus install claude --check``: can Claude Code reach the gateway, and is its token accepted?

It sends what Claude Code would send: a ``POST`` to the installed hooks URL with
``Authorization: Bearer $HOOKBUS_TOKEN``. The event is :data:`CHECK_EVENT`, a name no agent
fires: the gateway accepts an unknown event as non-blocking, records it (it shows in
``hookbus tail``) and runs no handler for it. Then ``GET /v1/whoami`` names the tenant the
token maps to. The answer is one line: the tenant, or the exact problem (unreachable, 401,
429, a URL that is not a hookbus hooks endpoint). Standard library only.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from hookbus.shim import hook_url

CHECK_EVENT = "HookbusInstallCheck"
TIMEOUT_S = 5.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # Claude Code's http hooks do not follow redirects either


def _request(
    method: str, url: str, token: str | None, body: dict[str, Any] | None, timeout_s: float
) -> tuple[int, dict[str, str], bytes]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method=method)  # noqa: S310 (http(s) only)
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read(65536)
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read(65536)


def _detail(raw: bytes) -> str:
    try:
        found = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:200]
    return str(found.get("detail") or found.get("error") or "") if isinstance(found, dict) else ""


def check_gateway(url: str, token: str | None = None, timeout_s: float = TIMEOUT_S) -> tuple[bool, str]:
    """``(True, "... reachable, token accepted as tenant T")`` or ``(False, the exact problem)``."""
    hooks = hook_url(url)
    token_name = "HOOKBUS_TOKEN"  # noqa: S105 (a variable name, not a secret)
    event = {
        "hook_event_name": CHECK_EVENT,
        "session_id": "hookbus-install-check",
        "cwd": os.getcwd(),
        "transcript_path": "",
    }
    try:
        status, headers, raw = _request("POST", hooks, token, event, timeout_s)
    except TimeoutError:
        return False, f"{hooks} did not answer within {timeout_s:g}s"
    except urllib.error.URLError as exc:
        return False, f"cannot reach {hooks}: {getattr(exc, 'reason', exc)} (is the gateway running there?)"
    except OSError as exc:
        return False, f"cannot reach {hooks}: {exc}"
    if status == 401:
        if not token:
            return False, f"the gateway wants a token (401) and {token_name} is not set here"
        return False, f"the gateway refused {token_name} (401): it is not one of the gateway's tokens"
    if status == 429:
        retry = headers.get("retry-after", "?")
        return False, f"the gateway is rate-limiting this token's tenant (429, retry after {retry}s)"
    if status in (404, 405) or (300 <= status < 400):
        return False, (
            f"{hooks} is not a hookbus hooks endpoint (HTTP {status}); give the gateway's base URL, "
            "e.g. http://hookbus.internal:8787"
        )
    if status != 200:
        return False, f"{hooks} answered HTTP {status}: {_detail(raw)}"
    if "x-hookbus-outcome" not in headers:
        return False, f"{hooks} answered, but not as a hookbus gateway does (no X-Hookbus-Outcome header)"
    base = hooks.split("?", 1)[0].removesuffix("/v1/hooks")
    try:
        status, _, raw = _request("GET", f"{base}/v1/whoami", token, None, timeout_s)
        who = json.loads(raw) if status == 200 else {}
    except (OSError, ValueError):
        who = {}
    tenant = who.get("tenant") if isinstance(who, dict) else None
    if not isinstance(tenant, str):
        return True, f"{hooks} reachable, token accepted"
    if who.get("tokens") is False:
        return True, f"{hooks} reachable; the gateway checks no tokens (tenant {tenant})"
    return True, f"{hooks} reachable, token accepted as tenant {tenant}"


__all__ = ["CHECK_EVENT", "check_gateway"]
