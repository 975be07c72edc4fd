"""A small client for the Anthropic Messages API, used by ``prompt`` and ``agent`` hooks.

One call is ``POST {baseUrl}/v1/messages`` with the headers ``x-api-key`` (read from the
environment variable the policy names in ``hookbus.llm.apiKeyEnv``), ``anthropic-version:
2023-06-01`` and ``content-type: application/json``, and the body ``{model, max_tokens,
system, messages, tools?}``. The reply's ``content`` blocks (``text``, ``tool_use``; others
are kept as received) and ``stop_reason`` come back as an :class:`LlmReply`.

Requests go through the platform's one outbound client (:func:`workers.outbound.client.guarded_request`
over :func:`~workers.outbound.client.outbound_client`), so the SSRF guard and the response size cap
(``hookbus.http.maxResponseBytes``) apply to ``baseUrl`` as to any ``http`` hook: a loopback
or private LLM endpoint must be listed in ``hookbus.http.allowedNetworks``. The httpx client
is asked for per request and never kept, as :mod:`workers.outbound.client` requires (a client
replaced after a policy change is closed).

Every failure is a :class:`LlmError` (a non-blocking :class:`~bus.errors.HookError`): a
missing API key, a refused or failed connection, a non-2xx status, a reply that is not the
Messages API shape. Timeouts are :class:`~bus.errors.LlmTimeout`. The API key never appears
in a repr, a log line or an error message.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson

from bus.errors import HookError, HookTimeout, LlmError, LlmTimeout
from bus.policy.loading import Policy
from bus.redis.urls import mask_url
from workers.outbound.client import guarded_request
from workers.services import Services

logger = logging.getLogger("hookbus.llm")

ANTHROPIC_VERSION: Final = "2023-06-01"
MESSAGES_PATH: Final = "/v1/messages"
#: How much of an error body is quoted in an error message.
ERROR_TEXT_CHARS: Final = 300


@dataclasses.dataclass(frozen=True, slots=True)
class ToolUse:
    """A ``tool_use`` content block: the model asks for tool ``name`` with ``input``."""

    id: str
    name: str
    input: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class LlmReply:
    """One Messages API reply. ``content`` holds the blocks as received (to echo them back)."""

    content: list[dict[str, Any]]
    stop_reason: str | None
    model: str = ""

    @property
    def text(self) -> str:
        """The text of every ``text`` block, joined."""
        return "".join(block["text"] for block in self.content if block.get("type") == "text")

    @property
    def tool_uses(self) -> list[ToolUse]:
        """The ``tool_use`` blocks, in order."""
        return [ToolUse(b["id"], b["name"], b["input"]) for b in self.content if b.get("type") == "tool_use"]


def _error_text(body: bytes) -> str:
    """The API's ``error.message``, else the start of the body."""
    try:
        message = orjson.loads(body)["error"]["message"]
        if isinstance(message, str):
            return message[:ERROR_TEXT_CHARS]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        pass
    return body[:ERROR_TEXT_CHARS].decode("utf-8", "replace").strip() or "(empty body)"


def parse_reply(body: bytes) -> LlmReply:
    """An :class:`LlmReply` from a 2xx response body; :class:`LlmError` if it is not one."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise LlmError(f"LLM API reply is not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("type") == "error":
        raise LlmError("LLM API reply is not a message object")
    content = data.get("content")
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise LlmError("LLM API reply has no list of content blocks")
    for block in content:
        kind = block.get("type")
        if kind == "text" and not isinstance(block.get("text"), str):
            raise LlmError("LLM API reply has a text block without text")
        if kind == "tool_use" and not (
            isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
            and isinstance(block.get("input"), dict)
        ):
            raise LlmError("LLM API reply has a malformed tool_use block")
    stop_reason = data.get("stop_reason")
    model = data.get("model")
    return LlmReply(
        content, stop_reason if isinstance(stop_reason, str) else None, model if isinstance(model, str) else ""
    )


class LlmClient:
    """Calls the Messages API endpoint of one policy with one API key, through the SSRF guard."""

    def __init__(self, services: Services | None, policy: Policy, api_key: str) -> None:
        self.services = services
        self.policy = policy
        self.base_url = policy.settings.llm.base_url.rstrip("/")
        self.model = policy.settings.llm.model
        self._api_key = api_key

    def __repr__(self) -> str:
        return f"LlmClient(base_url={mask_url(self.base_url)!r}, model={self.model!r}, api_key='***')"

    @classmethod
    def for_policy(
        cls, services: Services | None, policy: Policy, environ: Mapping[str, str] | None = None
    ) -> LlmClient:
        """The client ``policy``'s ``hookbus.llm`` section describes; :class:`LlmError` without an API key."""
        key_env = policy.settings.llm.api_key_env
        api_key = (os.environ if environ is None else environ).get(key_env, "")
        if not api_key:
            raise LlmError(f"no LLM API key: environment variable {key_env} is not set (hookbus.llm.apiKeyEnv)")
        return cls(services, policy, api_key)

    async def create(
        self,
        *,
        system: str,
        messages: Sequence[Mapping[str, Any]],
        model: str | None = None,
        max_tokens: int = 1024,
        tools: Sequence[Mapping[str, Any]] | None = None,
        timeout_s: float = 30.0,
    ) -> LlmReply:
        """Send one Messages API request (bounded by ``timeout_s`` in all) and return the parsed reply."""
        body: dict[str, Any] = {
            "model": model or self.model,
            "max_tokens": max_tokens,
            "system": system,
            "messages": list(messages),
        }
        if tools:
            body["tools"] = list(tools)
        headers = {
            "x-api-key": self._api_key,
            "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json",
        }
        started = time.perf_counter()
        try:
            response = await guarded_request(
                self.services,
                self.policy,
                "POST",
                self.base_url + MESSAGES_PATH,
                timeout_s=timeout_s,
                content=orjson.dumps(body),
                headers=headers,
            )
        except HookTimeout as exc:
            raise LlmTimeout(f"LLM call timed out: {exc}") from exc
        except HookError as exc:
            raise LlmError(f"LLM call failed: {exc}") from exc
        if not response.ok:
            raise LlmError(f"LLM API answered {response.status_code}: {_error_text(response.body)}")
        reply = parse_reply(response.body)
        logger.debug(
            "LLM %s answered in %.3fs (stop_reason %s)", body["model"], time.perf_counter() - started, reply.stop_reason
        )
        return reply


__all__ = ["ANTHROPIC_VERSION", "LlmClient", "LlmError", "LlmReply", "LlmTimeout", "ToolUse", "parse_reply"]
