"""Each new pending approval is sent to ``hookbus.approvals.webhook``: signed, with a chat-ready ``text``."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.conftest import async_wait_for
from tests.gateway.approvals.helpers import TOKENS, approvals_policy, asking, pending
from tests.workers.jobs.async_harness import Sink

pytestmark = pytest.mark.timeout(60)
SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


async def test_a_new_approval_is_announced_once_signed_with_text_a_chat_shows(
    platform: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPROVALS_WEBHOOK_SECRET", SECRET)
    async with Sink() as sink:
        text = approvals_policy(webhook=sink.url(), webhookSecret="$APPROVALS_WEBHOOK_SECRET")
        text = text.replace("hookbus:\n", "hookbus:\n  http: {allowedNetworks: ['127.0.0.0/8']}\n", 1)
        async with platform(text, dispatchers=2, **TOKENS) as p, asking(p):
            [approval] = await pending(p)
            await async_wait_for(lambda: sink.requests, timeout_s=10)
            [request] = sink.requests
            Webhook(SECRET).verify(request.body, request.headers)  # raises when the signature is wrong
            notice = json.loads(request.body)
            assert notice["type"] == "hookbus.approval.pending" and request.headers["webhook-id"] == approval["id"]
            assert notice["data"]["id"] == approval["id"]
            assert "git push origin main" in notice["text"] and f"approve {approval['id']}" in notice["text"]


async def test_the_ssrf_guard_keeps_the_webhook_off_loopback_unless_allowed(platform: Callable[..., Any]) -> None:
    async with Sink() as sink:
        async with platform(approvals_policy(webhook=sink.url()), **TOKENS) as p, asking(p):
            await pending(p)
            with pytest.raises(AssertionError):
                await async_wait_for(lambda: sink.requests, timeout_s=2)


async def test_a_notice_the_receiver_refuses_is_tried_three_times_then_counted_failed(
    platform: Callable[..., Any],
) -> None:
    async with Sink(default=500) as sink:
        text = approvals_policy(webhook=sink.url())
        text = text.replace("hookbus:\n", "hookbus:\n  http: {allowedNetworks: ['127.0.0.0/8']}\n", 1)
        async with platform(text, **TOKENS) as p, asking(p):
            await pending(p)
            notices = p.metrics.approvals.notices
            await async_wait_for(lambda: notices.labels("failed")._value.get() == 1, timeout_s=20)
            assert len(sink.requests) == 3 and notices.labels("sent")._value.get() == 0
