"""One tenant's costly commands never change another tenant's verdicts, through a real ``hookbus up``.

Tenant ``mallory`` sends, on several connections at once, the commands that cost the most to
judge: 64 KiB of subcommands ending in an expansion (which once made every rule be tried over
every subcommand, seconds on the dispatcher's event loop) and 64 KiB of backticks (which filled
one shared thread queue). Meanwhile tenant ``alice`` sends ``rm -rf /``, an 8 KiB ``echo`` and a
``Write`` of ``.env`` with 70 KB of content. Every one of alice's events keeps its verdict and
is decided (none fails open), and every one of mallory's is denied or refused as cannot be
judged. The latency alice sees meanwhile is measured in ``bench/tenants.py``, not here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.conftest import REPO
from tests.up import UpProcess, running_up

pytestmark = [pytest.mark.timeout(300), pytest.mark.alone]

TOKENS = {"HOOKBUS_TOKENS": "alice:tok-alice,mallory:tok-mallory"}
#: How many rounds of alice's three events: enough to overlap mallory's flood throughout.
ROUNDS = 15
MALLORY_CONNECTIONS = 6


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    with running_up(tmp_path, REPO / "examples" / "policy.yaml", TOKENS) as platform:
        yield platform


def event(session: str, tool: str, tool_input: dict[str, Any]) -> bytes:
    return orjson.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "cwd": "/work",
            "tool_name": tool,
            "tool_input": tool_input,
        }
    )


def mallory_commands(n: int) -> str:
    """The costly shapes in turn, each a little different (nothing is answered from a cache)."""
    shapes = ("HEAD;" + "a;" * 32_700 + f"a $x{n}", "`a` " * 16_000 + f"b{n}", "a | " * 16_000 + f"a $y{n}")
    return shapes[n % len(shapes)]


def post(client: httpx.Client, token: str, body: bytes) -> httpx.Response:
    return client.post("/v1/hooks", content=body, headers={"Authorization": f"Bearer {token}"})


def decision(reply: httpx.Response) -> str | None:
    if not reply.is_success:
        return f"HTTP {reply.status_code}"
    found: str | None = reply.json().get("hookSpecificOutput", {}).get("permissionDecision")
    return found


def test_a_flood_of_costly_commands_leaves_the_other_tenant_its_verdicts(up: UpProcess) -> None:
    stop = threading.Event()
    mallory: list[httpx.Response] = []
    sent = iter(range(1_000_000))
    lock = threading.Lock()

    def flood() -> None:
        with httpx.Client(base_url=up.url, timeout=30) as client:
            while not stop.is_set():
                with lock:
                    n = next(sent)
                if n >= 2_000:  # bounded, whatever happens to the other side
                    return
                mallory.append(
                    post(client, "tok-mallory", event(f"m-{n % 4}", "Bash", {"command": mallory_commands(n)}))
                )

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(MALLORY_CONNECTIONS)]
    for thread in flooders:
        thread.start()
    wrong: list[str] = []
    try:
        with httpx.Client(base_url=up.url, timeout=30) as client:
            assert post(client, "tok-alice", event("a-0", "Bash", {"command": "ls"})).is_success
            while len(mallory) < MALLORY_CONNECTIONS:  # the flood is on before alice's first round
                post(client, "tok-alice", event("a-0", "Bash", {"command": "ls"}))
            for i in range(ROUNDS):
                cases = (
                    ("rm -rf /", "deny", event(f"a-{i}", "Bash", {"command": "rm -rf /"})),
                    ("8 KiB echo", None, event(f"a-{i}", "Bash", {"command": "echo " + "x" * 8192})),
                    (
                        "Write .env",
                        "deny",
                        event(f"a-{i}", "Write", {"file_path": "/work/.env", "content": "K=v\n" * 17_500}),
                    ),
                )
                for name, expected, body in cases:
                    reply = post(client, "tok-alice", body)
                    outcome = reply.headers.get("x-hookbus-outcome")
                    if outcome != "decided" or decision(reply) != expected:
                        wrong.append(f"round {i} {name}: {outcome} {decision(reply)} {reply.text[:300]}")
    finally:
        stop.set()
        for thread in flooders:
            thread.join(timeout=60)
    assert wrong == []
    assert len(mallory) >= MALLORY_CONNECTIONS * 2
    assert {(r.headers.get("x-hookbus-outcome"), decision(r)) for r in mallory} == {("decided", "deny")}
