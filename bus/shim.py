"""``hookbus hook``: the agent-side command shim (stdlib only: it starts on every tool call).

Reads one hook input JSON on stdin, asks the gateway, writes the Claude Code hook output
on stdout and exits as Claude Code expects. When the gateway is down, slow, or answers
with a fail-open outcome: exit 0 with no output (fail open), or with ``--fail-closed`` exit
2 with the reason on stderr (Claude Code then blocks the action on blocking events).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

DEFAULT_URL = "http://127.0.0.1:8787/v1/hooks"


def _fail(reason: str, fail_closed: bool) -> int:
    if fail_closed:
        sys.stderr.write(f"hookbus: {reason} (failing closed)\n")
        return 2
    sys.stderr.write(f"hookbus: {reason} (failing open)\n")
    return 0


def run_hook(url: str | None, timeout_s: float, fail_closed: bool, stdin: bytes | None = None) -> int:
    """Forward stdin to the gateway; returns the exit code to use."""
    url = url or os.environ.get("HOOKBUS_URL") or DEFAULT_URL
    if not url.rstrip("/").endswith("/v1/hooks"):
        url = url.rstrip("/") + "/v1/hooks"
    body = sys.stdin.buffer.read() if stdin is None else stdin
    headers = {"Content-Type": "application/json"}
    token = os.environ.get("HOOKBUS_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            outcome = response.headers.get("X-Hookbus-Outcome", "")
            answer = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        return _fail(f"gateway answered {exc.code}: {detail}", fail_closed)
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return _fail(f"gateway unreachable at {url}: {reason}", fail_closed)
    if outcome == "fail-open":
        return _fail("gateway could not decide in time", fail_closed)
    try:
        output = json.loads(answer) if answer.strip() else {}
    except ValueError:
        return _fail("gateway sent a reply that is not JSON", fail_closed)
    if output:
        sys.stdout.write(json.dumps(output))
        sys.stdout.write("\n")
    return 0


__all__ = ["run_hook"]
