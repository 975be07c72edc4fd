"""Hostile inputs through a real ``hookbus up`` with two tenants.

Tenant ``mallory`` sends every hostile shape (commands under and over the command limit,
detector prefixes at the body limit, JSON nested around the depth limit) while tenant
``alice`` sends ``rm -rf /`` over and over. Every one of mallory's events is denied (by the
policy, or because it cannot be judged), every one of alice's is denied, none fails open, and
every answered event has exactly one record.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import redis as redis_sync

from bus.redis.keys import Keyspace
from tests.conftest import REPO, wait_for
from tests.hostile.inputs import COMMAND_UNITS, OPEN_UNITS, SECRET_UNITS, command, fill, nested_json
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.timeout(600), pytest.mark.alone]

TOKENS = {"HOOKBUS_TOKENS": "alice:tok-alice,mallory:tok-mallory"}


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    with running_up(tmp_path, REPO / "examples" / "policy.yaml", TOKENS) as platform:
        yield platform


def bash(session: str, text: str) -> bytes:
    return orjson.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "cwd": "/work",
            "tool_name": "Bash",
            "tool_input": {"command": text},
        }
    )


#: The gateway's body limit, less room for the JSON around the command.
BODY_BYTES = 1_048_576 - 512


def within_body(unit: str, size: int) -> bytes:
    """The Bash event of :func:`command` (``unit``, ``size``), shrunk until its JSON fits the body limit."""
    body = bash("m-cmd", command(unit, size))
    while len(body) > BODY_BYTES:  # quotes and newlines take two bytes in JSON
        size = size * BODY_BYTES // len(body) - 64
        body = bash("m-cmd", command(unit, size))
    return body


def hostile_bodies() -> Iterator[tuple[str, bytes, str]]:
    """``(name, body, expected)``: expected ``deny`` by the policy, or the reason it was refused (and denied)."""
    for size in (60 * 1024, BODY_BYTES):
        for name, unit in {**COMMAND_UNITS, **OPEN_UNITS}.items():
            yield f"{name} at {size}", within_body(unit, size), "deny"
    for name, unit in SECRET_UNITS.items():
        yield f"{name} in a command", bash("m-sec", fill(unit, 900_000) + "\n$(rm -rf /)"), "deny"
    for depth in (60, 62, 63, 64, 65, 200, 254, 255, 990, 1023, 1030):
        body = (
            b'{"hook_event_name": "PreToolUse", "session_id": "m-deep", "tool_name": "Bash", '
            b'"tool_input": {"command": "rm -rf /", "pad": ' + nested_json(depth - 2) + b"}}"
        )
        # The object is depth 1, tool_input 2, the pad's lists the rest: this body is ``depth`` deep.
        # Past the limit (64, then the parser's 1024) it cannot be judged: denied all the same.
        yield f"nested {depth}", body, "deny" if depth <= 64 else ("too_deep" if depth <= 1024 else "invalid_json")


def denies(reply: httpx.Response) -> bool:
    """Whether Claude Code denies the call on ``reply``: a PreToolUse deny or the top-level block."""
    answer = reply.json() if reply.status_code == 200 else {}
    return answer.get("decision") == "block" or answer.get("hookSpecificOutput", {}).get("permissionDecision") == "deny"


def send(client: httpx.Client, token: str, body: bytes) -> httpx.Response:
    return client.post(
        "/v1/hooks", content=body, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    )


def test_no_hostile_input_buys_a_fail_open_and_the_other_tenant_keeps_flowing(up: UpProcess) -> None:
    alice: list[httpx.Response] = []
    stop = threading.Event()

    def honest_tenant() -> None:
        with httpx.Client(base_url=up.url, timeout=30) as client:
            while not stop.is_set() and len(alice) < 100_000:
                alice.append(send(client, "tok-alice", bash("a-1", "rm -rf /")))

    honest = threading.Thread(target=honest_tenant, daemon=True)
    honest.start()
    mallory: list[tuple[str, str, httpx.Response]] = []
    try:
        with httpx.Client(base_url=up.url, timeout=30) as client:
            for name, body, expected in hostile_bodies():
                mallory.append((name, expected, send(client, "tok-mallory", body)))
    finally:
        stop.set()
        honest.join(timeout=60)

    wrong = []
    for name, expected, reply in mallory:
        if expected == "deny":
            answer = reply.json() if reply.is_success else {}
            decision = answer.get("hookSpecificOutput", {}).get("permissionDecision")
            if reply.headers.get("x-hookbus-outcome") != "decided" or decision != "deny":
                wrong.append(f"{name}: {reply.status_code} {reply.headers.get('x-hookbus-outcome')} {reply.text[:200]}")
        elif not reply.headers.get("x-hookbus-refused", "").startswith(f"{expected}: ") or not denies(reply):
            wrong.append(f"{name}: wanted a deny refusing {expected}, got {reply.status_code} {reply.text[:200]}")
    assert wrong == []
    assert len(alice) >= 10
    assert {
        (r.status_code, r.headers.get("x-hookbus-outcome"), r.json()["hookSpecificOutput"]["permissionDecision"])
        for r in alice
    } == {(200, "decided", "deny")}

    answered = [r.headers["x-hookbus-event-id"] for r in alice] + [
        r.headers["x-hookbus-event-id"] for _, _, r in mallory if r.is_success
    ]
    keys = Keyspace()
    with redis_sync.Redis.from_url(up.redis_url()) as redis:

        def all_recorded() -> bool:
            return int(redis.xlen(keys.decision_log(0))) >= len(answered)

        wait_for(all_recorded, timeout_s=60, interval_s=0.1)
        records = redis.xrange(keys.decision_log(0))
    ids = [orjson.loads(fields[b"r"])["id"] for _, fields in records]
    counts = {event_id: ids.count(event_id) for event_id in answered}
    assert {n for n in counts.values()} == {1}
    assert len(ids) == len(answered)
