"""One policy for the whole fleet, in Claude Code's terms, and what every real-agent test shares.

:func:`write_policy` writes the policy each agent must obey: a central deny on
:data:`DENIED`, an allow of :data:`ALLOWED`, a rewrite, a Stop block and added context (the
last three from :mod:`tests.agents.central_hooks`, run by the dispatcher). :func:`records`
reads the decision log of a ``hookbus up``, :func:`session_records` the part one run's folder sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis as redis_sync

from bus.redis.keys import Keyspace
from bus.stream.protocol import LogRecord
from tests.agents.central_hooks import command
from tests.up import UpProcess

TOKEN = "tok-acme"
TOKENS = f"acme:{TOKEN}"
#: The shell command the policy denies, for every agent (the file must never appear).
DENIED = "touch forbidden.txt"
#: The shell command the policy allows (the file must appear).
ALLOWED = "touch allowed.txt"
#: The command the policy rewrites into :data:`tests.agents.central_hooks.REWRITTEN`.
TO_REWRITE = "touch rewrite-me.txt"
REASON = "hookbus fleet policy: no forbidden files"


def policy() -> dict[str, Any]:
    """The fleet's policy, as the policy file's JSON (YAML is a superset)."""
    return {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [
                        {"type": "rule", "reason": REASON, "deny": ["Bash(touch forbidden*)"]},
                        {"type": "rule", "reason": "hookbus fleet policy: allowed", "allow": ["Bash(touch allowed*)"]},
                        {"type": "command", "command": command("rewrite"), "if": "Bash(touch rewrite-me*)"},
                    ],
                }
            ],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": command("context")}]}],
            "Stop": [{"hooks": [{"type": "command", "command": command("stop")}]}],
        }
    }


def write_policy(folder: Path) -> Path:
    path = folder / "fleet-policy.json"
    path.write_text(json.dumps(policy(), indent=2))
    return path


def records(up: UpProcess) -> list[dict[str, Any]]:
    """Every decision-log record of ``up`` so far, oldest first, as ``hookbus tail --json`` shows them."""
    keys = Keyspace()
    with redis_sync.Redis.from_url(up.redis_url()) as redis:
        entries = redis.xrange(keys.decision_log(0))
    return [LogRecord.decode(fields).to_json() for _, fields in entries]


def session_records(up: UpProcess, cwd: Path) -> list[dict[str, Any]]:
    """The decision-log records of the events sent from ``cwd`` (one agent run's folder), oldest first."""
    return [record for record in records(up) if (record["input"] or {}).get("cwd") == str(cwd)]
