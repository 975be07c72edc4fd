"""Why a handler failed, as the async worker reads it: ``retryable`` and ``retry_after_s`` set by the
``http`` runner (against real servers on 127.0.0.1) and the ``command`` runner (real processes)."""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import json
import time
from typing import Any

import pytest
from standardwebhooks import Webhook

from bus.hooks.results import Outcome
from bus.policy.loading import Policy, policy_from_text
from bus.policy.schema import CommandHandler
from bus.stream.protocol import Request, now_ms
from tests.loopback import LoopbackServer, reply
from workers.handlers.command import run_command
from workers.handlers.context import HookContext
from workers.handlers.http import retry_after_s, run
from workers.services import Services

NOTE = {"hook_event_name": "Notification", "session_id": "s-r", "message": "done"}
PAYLOAD = json.dumps(NOTE).encode()
SECRET = "whsec_" + base64.b64encode(b"retryable-test-secret-0123456789").decode()


def policy(url: str, **handler: Any) -> Policy:
    hook = {"type": "http", "url": url, **handler}
    return policy_from_text(
        json.dumps(
            {"hookbus": {"http": {"allowedNetworks": ["127.0.0.0/8"]}}, "hooks": {"Notification": [{"hooks": [hook]}]}}
        )
    )


def ctx(p: Policy, services: Services, delivery_id: str = "") -> HookContext:
    request = Request("ev-r", "Notification", "default", PAYLOAD, now_ms())
    return HookContext(request, NOTE, p.entries("Notification")[0], p, 5.0, services, delivery_id=delivery_id)


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (500, True),
        (502, True),
        (503, True),
        (408, True),
        (429, True),
        (400, False),
        (401, False),
        (404, False),
        (410, False),
        (302, False),
    ],
)
@pytest.mark.system
async def test_5xx_408_and_429_are_worth_another_try_other_statuses_are_not(
    services: Services, status: int, retryable: bool
) -> None:
    async with LoopbackServer(reply(status, "no")) as server:
        result = await run(ctx(policy(server.url()), services))
    assert result.outcome is Outcome.ERROR
    assert result.retryable is retryable, (status, result.reason)


@pytest.mark.system
async def test_retry_after_in_seconds_or_as_a_date_is_read(services: Services) -> None:
    async with LoopbackServer(reply(429, headers={"Retry-After": "7"})) as server:
        result = await run(ctx(policy(server.url()), services))
    assert result.retry_after_s == 7.0
    later = email.utils.formatdate(time.time() + 120, usegmt=True)
    assert 100 < (retry_after_s(later) or 0) <= 120
    assert retry_after_s("soon") is None and retry_after_s(None) is None


@pytest.mark.system
async def test_a_refused_connection_is_retryable_and_a_blocked_address_is_not(services: Services) -> None:
    async with LoopbackServer(reply(200)) as server:
        url = server.url()
    refused = await run(ctx(policy(url), services))  # the server is gone
    assert (refused.outcome, refused.retryable) == (Outcome.ERROR, True)
    guarded = policy_from_text(json.dumps({"hooks": {"Notification": [{"hooks": [{"type": "http", "url": url}]}]}}))
    blocked = await run(ctx(guarded, services))  # 127.0.0.1 is not in allowedNetworks
    assert (blocked.outcome, blocked.retryable) == (Outcome.ERROR, False)
    listed = dataclasses.replace(policy(url), allowed_http_hook_urls=("https://elsewhere/*",))
    assert (await run(ctx(listed, services))).retryable is False


@pytest.mark.system
async def test_an_async_delivery_counts_any_2xx_and_carries_the_webhook_headers(services: Services) -> None:
    async with LoopbackServer(reply(200, "ok")) as server:
        p = policy(server.url(), headers={"webhook-id": "forged"})
        as_hook = await run(ctx(p, services))
        delivered = await run(ctx(p, services, delivery_id="ev-r:h1"))
    assert as_hook.outcome is Outcome.ERROR  # a blocking hook's "ok" body is not an answer (Claude Code's rule)
    assert delivered.outcome is Outcome.OK and delivered.output is None
    first, second = server.requests
    assert "webhook-id" not in first.headers  # a policy cannot set it
    assert second.headers["webhook-id"] == "ev-r:h1" and "webhook-signature" not in second.headers


@pytest.mark.system
async def test_a_hook_with_a_secret_is_signed_even_when_it_is_not_async(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RETRY_TEST_SECRET", SECRET)
    async with LoopbackServer(reply(200, "")) as server:
        p = policy(server.url(), secret="$RETRY_TEST_SECRET")
        result = await run(ctx(p, services))
    assert result.outcome is Outcome.OK
    [request] = server.requests
    assert Webhook(SECRET).verify(request.body, request.headers) == NOTE
    assert request.headers["webhook-id"] == f"ev-r:{p.entries('Notification')[0].handler_id}"


@pytest.mark.parametrize(
    ("script", "outcome", "retryable"),
    [
        ("echo nope >&2; exit 1", Outcome.ERROR, True),
        ("echo refused >&2; exit 2", Outcome.BLOCK, False),
        ("exit 0", Outcome.OK, True),
    ],
)
@pytest.mark.system
async def test_a_commands_exit_2_is_final_and_other_failures_are_not(
    script: str, outcome: Outcome, retryable: bool
) -> None:
    handler = CommandHandler(type="command", command=f"cat >/dev/null; {script}")
    result = await run_command(handler, "Notification", PAYLOAD, NOTE, timeout_s=5, event_id="ev-r")
    assert (result.outcome, result.retryable) == (outcome, retryable)


@pytest.mark.system
async def test_a_command_that_does_not_exist_is_final() -> None:
    handler = CommandHandler.model_validate({"type": "command", "command": "/nonexistent/hook", "args": []})
    result = await run_command(handler, "Notification", PAYLOAD, NOTE, timeout_s=5, event_id="ev-r")
    assert (result.outcome, result.retryable) == (Outcome.ERROR, False)
