"""``hookbus approvals list|show|approve|deny``: a person answers an agent's ``ask`` from the shell.

Through a gateway's ``/v1/approvals`` (:mod:`gateway.approvals.routes`) with ``$HOOKBUS_TOKEN``:
an approver token of the tenant, or an org-admin token. ``$HOOKBUS_AUTHOR`` (else the login name)
names the person in the decision record. ``approve --for always`` first pushes a version of the
tenant's policy whose ``hookbus.approvals.approved`` lists the command or path (signed with
``--sign``, shown by ``hookbus policy versions``), then answers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from typing import Any

import yaml

from bus.approvals.asking import always_rule
from bus.errors import ConfigError, HookBusError
from bus.redis.keys import Keyspace
from hookbus.freeze import author_name, call_gateway, gateway_url

#: The file of a tenant's policy version that "approve always" keeps its rules in.
ALWAYS_FILE = "approved-always.yaml"
#: How long ``--for always`` waits for the gateway to run the version it pushed.
ALWAYS_WAIT_S = 10.0


def _headers() -> dict[str, str]:
    name = author_name()
    return {"X-Hookbus-Approver": name} if name else {}


def _line(approval: dict[str, Any]) -> str:
    tool_input = approval.get("tool_input")
    what = ""
    if isinstance(tool_input, dict):
        what = str(tool_input.get("command") or tool_input.get("file_path") or json.dumps(tool_input))[:80]
    return (
        f"{approval['id']}  {approval['tenant']}  {approval['agent']}  {approval['tool_name']}: {what}  "
        f"(until {approval['deadline']}; {approval['reason']})"
    )


def approvals_command(args: argparse.Namespace, store_for: Callable[[], tuple[str, Keyspace]]) -> int:
    """Run ``hookbus approvals ...``; ``store_for`` gives the Redis and keyspace ``--for always`` pushes to."""
    base = f"{gateway_url(args.url)}/v1/approvals"
    action = args.approvals_command
    if action == "list":
        found = call_gateway("GET", base, params={"tenant": args.tenant} if args.tenant else None)["approvals"]
        if args.json:
            print(json.dumps(found, indent=2))
            return 0
        for approval in found:
            print(_line(approval))
        if not found:
            print("no approval is pending", file=sys.stderr)
        return 0
    url = f"{base}/{args.id}"
    if action == "show":
        print(json.dumps(call_gateway("GET", url), indent=2))
        return 0
    if action == "deny":
        answered = call_gateway("POST", f"{url}/deny", _headers(), json={"reason": args.reason})
        print(f"denied {answered['id']}: {args.reason or 'no reason given'}")
        return 0
    body: dict[str, Any] = {"for": args.scope}
    if args.input is not None:
        try:
            body["input"] = json.loads(args.input)
        except ValueError as exc:
            raise ConfigError(f"--input is not JSON: {exc}") from exc
    if args.scope == "always":
        body["version"] = _push_always(args, call_gateway("GET", url), store_for)
    answered = _approve(f"{url}/approve", body, ALWAYS_WAIT_S if args.scope == "always" else 0.0)
    pending = answered.get("status") == "pending"
    print(f"{'approved (one more approver is needed)' if pending else 'approved'} {answered['id']} for {args.scope}")
    return 0


def _approve(url: str, body: dict[str, Any], wait_s: float) -> dict[str, Any]:
    """POST the approval; with ``wait_s``, again while the gateway does not run the pushed version yet."""
    until = time.monotonic() + wait_s
    while True:
        try:
            return call_gateway("POST", url, _headers(), json=body)
        except HookBusError as exc:
            if "HTTP 409" not in str(exc) or "does not approve" not in str(exc) or time.monotonic() > until:
                raise
        time.sleep(0.2)


def _push_always(
    args: argparse.Namespace, approval: dict[str, Any], store_for: Callable[[], tuple[str, Keyspace]]
) -> str:
    try:
        rule = always_rule(approval["tool_name"], approval["tool_input"])
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    redis_url, keys = store_for()
    return asyncio.run(_push(args, approval, rule, redis_url, keys))


async def _push(args: argparse.Namespace, approval: dict[str, Any], rule: str, redis_url: str, keys: Keyspace) -> str:
    from bus.policy.signing import load_private_key
    from bus.policy.store import PolicyStore, scope_for
    from bus.redis.connection import connect

    tenant = approval["tenant"]
    redis = connect(redis_url)
    try:
        store = PolicyStore(redis, keys, redis_url)
        current = await store.current(scope_for(tenant))
        files = list(current.files) if current else []
        approved: list[str] = []
        for name, text in files:
            if name == ALWAYS_FILE:
                approved = list(
                    (yaml.safe_load(text) or {}).get("hookbus", {}).get("approvals", {}).get("approved", [])
                )
        if rule not in approved:
            approved.append(rule)
        text = yaml.safe_dump({"hookbus": {"approvals": {"approved": approved}}})
        files = [(name, body) for name, body in files if name != ALWAYS_FILE] + [(ALWAYS_FILE, text)]
        key = load_private_key(args.sign) if args.sign else None
        message = f"approve always: {rule} (approval {approval['id']})"
        version, _ = await store.push(files, tenant, message=message, author=author_name() or None, signing_key=key)
    finally:
        await redis.aclose()
    print(f"tenant:{tenant}: version {version.id} approves {rule}{' (signed)' if version.signed_by else ''}")
    return version.id


__all__ = ["ALWAYS_FILE", "approvals_command"]
