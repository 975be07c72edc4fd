"""A scripted fake of the Anthropic Messages API (``POST /v1/messages``), for agent CLIs that speak it.

A test gives :class:`FakeAnthropic` a *script*: a function from the request body (as the CLI
sent it) to the reply, built with :func:`text` or :func:`tool_use`. Every request is kept in
:attr:`FakeAnthropic.requests`, so a test can assert on exactly what the agent sent back to
the model (a tool result, a hook's reason, added context). Streaming requests get the
Messages API's server-sent events (``message_start``, ``content_block_*``, ``message_delta``,
``message_stop``), others one JSON message. Standard library only; serve it with
:func:`tests.agents.harness.serve_http` on a socket inside the namespace.
"""

from __future__ import annotations

import dataclasses
import http.server
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: The model name the fake reports (the CLI is configured with it).
MODEL = "claude-fake-1"


@dataclasses.dataclass(frozen=True)
class Reply:
    """One assistant message: its content blocks and stop reason."""

    blocks: tuple[dict[str, Any], ...]
    stop_reason: str = "end_turn"


def text(words: str) -> Reply:
    """An assistant message that only says ``words`` (ends the turn)."""
    return Reply(({"type": "text", "text": words},))


def tool_use(name: str, tool_input: dict[str, Any], call_id: str = "toolu_fake_1") -> Reply:
    """An assistant message that calls the tool ``name`` with ``tool_input``."""
    block = {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
    return Reply(({"type": "text", "text": "Running it."}, block), "tool_use")


Script = Callable[[dict[str, Any]], Reply]


def blocks_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (a plain string is one text block)."""
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or () if isinstance(block, dict)]


def flatten(value: Any) -> str:
    """All text inside ``value`` (blocks, tool results, nested lists) joined by newlines."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(flatten(item) for item in value)
    if isinstance(value, dict):
        if value.get("type") == "text":
            return str(value.get("text", ""))
        if value.get("type") == "tool_result":
            return flatten(value.get("content"))
        return "\n".join(flatten(item) for item in value.values() if isinstance(item, str | list | dict))
    return ""


def tool_results(request: dict[str, Any]) -> dict[str, str]:
    """``tool_use_id -> the result's text`` for every tool result in ``request``'s conversation."""
    found: dict[str, str] = {}
    for message in request.get("messages") or ():
        for block in blocks_of(message):
            if block.get("type") == "tool_result":
                found[str(block.get("tool_use_id"))] = flatten(block.get("content"))
    return found


def user_text(request: dict[str, Any]) -> str:
    """Every user message's text (not tool results) in ``request``, joined by newlines."""
    parts = []
    for message in request.get("messages") or ():
        if message.get("role") == "user":
            parts += [str(b.get("text", "")) for b in blocks_of(message) if b.get("type") == "text"]
    return "\n".join(parts)


def one_tool_call(name: str, tool_input: dict[str, Any], done: str = "All done.") -> Script:
    """A script that calls ``name`` once, then (its result seen) says ``done``."""

    def script(request: dict[str, Any]) -> Reply:
        return text(done) if "toolu_fake_1" in tool_results(request) else tool_use(name, tool_input)

    return script


def tool_calls(*calls: tuple[str, dict[str, Any]], done: str = "All done.") -> Script:
    """A script that makes ``calls`` (name, input) one after the other, ids ``toolu_fake_1``, ``_2``...,
    each once the previous one's result is back, then says ``done``."""

    def script(request: dict[str, Any]) -> Reply:
        seen = tool_results(request)
        for number, (name, tool_input) in enumerate(calls, 1):
            if f"toolu_fake_{number}" not in seen:
                return tool_use(name, tool_input, f"toolu_fake_{number}")
        return text(done)

    return script


class FakeAnthropic:
    """The fake API's state: the current script and every request received."""

    def __init__(self) -> None:
        self.script: Script = lambda request: text("Nothing to do.")
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def reset(self, script: Script) -> None:
        """Answer with ``script`` from now on, with an empty request list."""
        with self._lock:
            self.script = script
            self.requests = []

    def tool_result(self, call_id: str = "toolu_fake_1") -> str:
        """What the model was sent back for its tool call ``call_id`` (the last request that has it)."""
        for request in reversed(self.requests):
            if call_id in (found := tool_results(request)):
                return found[call_id]
        raise AssertionError(f"the model never got a result for {call_id}: {len(self.requests)} requests")

    def answer(self, request: dict[str, Any]) -> tuple[Reply, int]:
        with self._lock:
            self.requests.append(request)
            script = self.script
            number = next(self._ids)
        return script(request), number

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        """A request handler class bound to this fake (for ``serve_http``)."""
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return  # keep the test output clean

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    request = {}
                if not self.path.split("?")[0].endswith("/messages") or not isinstance(request, dict):
                    self._send(404, "application/json", b'{"type":"error","error":{"type":"not_found_error"}}')
                    return
                reply, number = fake.answer(request)
                message_id = f"msg_fake_{number}"
                if request.get("stream"):
                    body = b"".join(sse(message_id, reply))
                    self._send(200, "text/event-stream", body)
                else:
                    self._send(200, "application/json", json.dumps(whole(message_id, reply)).encode())

            def do_GET(self) -> None:
                if self.path.split("?")[0].endswith("/models"):
                    models = {"data": [{"id": MODEL, "type": "model", "display_name": MODEL}], "has_more": False}
                    self._send(200, "application/json", json.dumps(models).encode())
                    return
                self._send(404, "application/json", b"{}")

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True

        return Handler


def _usage() -> dict[str, int]:
    return {"input_tokens": 10, "output_tokens": 5}


def whole(message_id: str, reply: Reply) -> dict[str, Any]:
    """``reply`` as one non-streaming Messages API response."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": list(reply.blocks),
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": _usage(),
    }


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def sse(message_id: str, reply: Reply) -> Iterator[bytes]:
    """``reply`` as the Messages API's stream of server-sent events."""
    start = {**whole(message_id, Reply(())), "content": [], "stop_reason": None}
    yield _event("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(reply.blocks):
        if block["type"] == "tool_use":
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            opening = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": block["text"]}
        yield _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
        yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    ending = {"stop_reason": reply.stop_reason, "stop_sequence": None}
    yield _event("message_delta", {"type": "message_delta", "delta": ending, "usage": {"output_tokens": 5}})
    yield _event("message_stop", {"type": "message_stop"})


__all__ = [
    "MODEL",
    "FakeAnthropic",
    "Reply",
    "Script",
    "blocks_of",
    "flatten",
    "one_tool_call",
    "sse",
    "text",
    "tool_calls",
    "tool_results",
    "tool_use",
    "user_text",
    "whole",
]
