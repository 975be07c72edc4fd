"""A Messages-API-shaped LLM server on 127.0.0.1 for ``prompt`` and ``agent`` hook tests.

:func:`serve_llm` records every request and answers from a script. A hanging reply waits on an
event the server sets when it stops, so nothing synchronises with sleeps.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import yaml

from bus.policy.loading import policy_from_text
from bus.stream.protocol import Request, now_ms
from workers.handlers.context import HookContext, default_timeout_s
from workers.services import Services

KEY_ENV = "TEST_LLM_API_KEY"
SECRET = "sk-test-not-a-real-key-0123456789"
REASON = "the tests were not run"

# ---- the fake Messages API ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Scripted:
    """One scripted answer: a status and body, or a hang until the server stops."""

    status: int = 200
    body: bytes = b""
    hang: bool = False


def message(*blocks: dict[str, Any], stop_reason: str = "end_turn") -> Scripted:
    return Scripted(
        body=orjson.dumps(
            {
                "id": f"msg_{uuid.uuid4().hex[:8]}",
                "type": "message",
                "role": "assistant",
                "model": "fake-model",
                "content": list(blocks),
                "stop_reason": stop_reason,
                "usage": {"input_tokens": 1, "output_tokens": 1},
            }
        )
    )


def text(reply: str) -> Scripted:
    return message({"type": "text", "text": reply})


def answer(**verdict: Any) -> Scripted:
    return text(json.dumps(verdict))


def tool_call(name: str, tool_input: dict[str, Any] | None = None, call_id: str = "toolu_1") -> Scripted:
    return message({"type": "tool_use", "id": call_id, "name": name, "input": tool_input or {}}, stop_reason="tool_use")


HANG = Scripted(hang=True)


@dataclasses.dataclass
class Seen:
    """One request the fake server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        """The first user message's text."""
        content = self.body["messages"][0]["content"]
        assert isinstance(content, str)
        return content


class FakeLlm:
    """An HTTP/1.1 server that records ``POST /v1/messages`` requests and answers from ``script``, then ``always``."""

    def __init__(self) -> None:
        self.url = ""
        self.seen: list[Seen] = []
        self.script: collections.deque[Scripted] = collections.deque()
        self.always: Scripted | None = None
        self.released = asyncio.Event()
        self.connections: dict[asyncio.StreamWriter, asyncio.Task[Any]] = {}

    def reply(self, *replies: Scripted) -> None:
        self.script.extend(replies)

    async def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Scripted:
        if (method, path) != ("POST", "/v1/messages"):
            return Scripted(404, b'{"type":"error","error":{"type":"not_found_error","message":"no such route"}}')
        self.seen.append(Seen(path, headers, json.loads(body)))
        scripted = self.script.popleft() if self.script else self.always
        if scripted is None:
            return Scripted(500, b'{"type":"error","error":{"type":"test_error","message":"no scripted reply left"}}')
        if scripted.hang:
            await self.released.wait()
        return scripted

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One keep-alive connection: requests with a Content-Length body, one after another."""
        self.connections[writer] = asyncio.current_task()  # type: ignore[assignment]
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                request_line, *lines = head.strip().split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                scripted = await self.answer(method, path, headers, body)
                phrase = "OK" if scripted.status == 200 else "Scripted"
                writer.write(
                    f"HTTP/1.1 {scripted.status} {phrase}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(scripted.body)}\r\n\r\n".encode()
                    + scripted.body
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            self.connections.pop(writer, None)
            writer.close()


@contextlib.asynccontextmanager
async def serve_llm() -> AsyncIterator[FakeLlm]:
    """A :class:`FakeLlm` on a free 127.0.0.1 port; on exit hangs are released and every connection closed."""
    fake = FakeLlm()
    server = await asyncio.start_server(fake.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        fake.released.set()
        server.close()
        for writer in list(fake.connections):
            writer.close()
        await asyncio.gather(*fake.connections.values(), return_exceptions=True)
        await server.wait_closed()


def llm_policy(
    url: str,
    event: str,
    handler: dict[str, Any],
    *,
    networks: tuple[str, ...] = ("127.0.0.0/8",),
    extra_hooks: dict[str, Any] | None = None,
) -> str:
    """A policy YAML with one handler on ``event`` and the LLM at ``url``."""
    return yaml.safe_dump(
        {
            "hookbus": {
                "http": {"allowedNetworks": list(networks)},
                "llm": {"baseUrl": url, "apiKeyEnv": KEY_ENV, "model": "default-test-model"},
            },
            "hooks": {event: [{"hooks": [handler]}], **(extra_hooks or {})},
        }
    )


def event_input(event: str, session: str = "s-prompt", **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"session_id": session, "hook_event_name": event, "cwd": "/repo"}
    if event in ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PermissionDenied"):
        base |= {"tool_name": "Bash", "tool_input": {"command": "git push --force"}}
    return base | fields


def context(policy_text: str, event: str, services: Services, hook_input: dict[str, Any] | None = None) -> HookContext:
    """The HookContext the engine would build for the policy's first handler on ``event``."""
    policy = policy_from_text(policy_text)
    entry = policy.entries(event)[0]
    hook_input = event_input(event) if hook_input is None else hook_input
    request = Request(
        event_id=f"evt-{uuid.uuid4().hex[:8]}",
        event=event,
        tenant="default",
        payload=orjson.dumps(hook_input),
        received_ms=now_ms(),
    )
    timeout_s = entry.handler.timeout or default_timeout_s(entry.handler.type, event)
    return HookContext(request, hook_input, entry, policy, timeout_s, services)
