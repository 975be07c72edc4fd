"""``hookbus freeze`` and ``hookbus unfreeze``: the kill switch, through a gateway's ``/v1/freeze``.

They go through the gateway, not straight to Redis, so the gateway checks who may: an org-admin
token, or the tenant's admin token, in ``$HOOKBUS_TOKEN`` (:mod:`gateway.freezes`).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from typing import Any

import httpx

from bus.errors import ConfigError, HookBusError
from hookbus.shim import hook_url

#: Seconds to wait for the gateway.
TIMEOUT_S = 10.0


def gateway_url(url: str | None) -> str:
    """The gateway's base URL for ``--url`` (default ``$HOOKBUS_URL``, then the local default)."""
    return hook_url(url).partition("?")[0].removesuffix("/v1/hooks")


def author_name() -> str:
    """Who runs this command: $HOOKBUS_AUTHOR, else the login name (may be "")."""
    try:
        return os.environ.get("HOOKBUS_AUTHOR") or getpass.getuser()
    except (KeyError, OSError):  # no user name in this environment
        return ""


def call_gateway(method: str, url: str, headers: dict[str, str] | None = None, **kwargs: Any) -> dict[str, Any]:
    """``method url`` on a gateway with ``$HOOKBUS_TOKEN``: its JSON object (HookBusError naming the
    gateway's refusal otherwise)."""
    headers = dict(headers or {})
    if token := os.environ.get("HOOKBUS_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    try:
        response = httpx.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)
    except httpx.HTTPError as exc:
        raise HookBusError(f"cannot reach the gateway at {url}: {exc}") from exc
    try:
        body = response.json()
    except ValueError:
        body = None
    if not response.is_success or not isinstance(body, dict):
        detail = body.get("detail") if isinstance(body, dict) else None
        raise HookBusError(f"{method} {url}: HTTP {response.status_code}: {detail or response.text[:200]}")
    return body


def _line(freeze: dict[str, Any]) -> str:
    until = f"until {freeze['until']}" if freeze.get("until") else "until lifted"
    reason = f"  ({freeze['reason']})" if freeze.get("reason") else ""
    tools = "|".join(freeze["tools"])
    return f"{freeze['tenant']}: {tools} frozen by {freeze['by']} since {freeze['since']}, {until}{reason}"


def freeze_command(args: argparse.Namespace) -> int:
    """Run ``hookbus freeze`` or ``hookbus unfreeze``."""
    url = f"{gateway_url(args.url)}/v1/freeze"
    if args.command == "unfreeze":
        body = call_gateway("DELETE", url, params={"tenant": args.tenant})
        lifted = body.get("lifted")
        print(f"unfroze {args.tenant}" if lifted else f"{args.tenant} was not frozen")
        return 0
    if args.list:
        found = call_gateway("GET", url)["freezes"]
        if args.json:
            print(json.dumps(found, indent=2))
        for freeze in [] if args.json else found:
            print(_line(freeze))
        if not found and not args.json:
            print("no tenant is frozen", file=sys.stderr)
        return 0
    if not args.tenant:
        raise ConfigError("freeze needs --tenant T (or --list)")
    request = {
        "tenant": args.tenant,
        "tools": args.tools,
        "until": args.until,
        "reason": args.reason,
        "by": author_name(),
    }
    freeze = call_gateway("POST", url, json=request)["freeze"]
    print(json.dumps(freeze, indent=2) if args.json else f"froze {_line(freeze)}")
    return 0


__all__ = ["author_name", "call_gateway", "freeze_command", "gateway_url"]
