"""A scripted fake of the OpenAI Chat Completions API (``POST /v1/chat/completions``).

A test gives :class:`FakeOpenAIChat` a *script*: a function from the request body (as the
CLI sent it) to the reply, built with :func:`text` or :func:`tool_call`. Every request is
kept in :attr:`FakeOpenAIChat.requests`, so a test can assert on exactly what the agent sent
back to the model (a tool result, a hook's reason, added context). Streaming requests get
``chat.completion.chunk`` server-sent events ending in ``data: [DONE]``, others one
``chat.completion`` object. Standard library only; serve it with
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
MODEL = "gpt-fake-1"


@dataclasses.dataclass(frozen=True)
class Reply:
    """One assistant message: its text and the tool calls it makes (``id, name, arguments``)."""

    content: str = ""
    calls: tuple[tuple[str, str, dict[str, Any]], ...] = ()

    @property
    def finish_reason(self) -> str:
        return "tool_calls" if self.calls else "stop"


def text(words: str) -> Reply:
    """An assistant message that only says ``words`` (ends the turn)."""
    return Reply(words)


def tool_call(name: str, arguments: dict[str, Any], call_id: str = "call_fake_1") -> Reply:
    """An assistant message that calls the function ``name`` with ``arguments``."""
    return Reply("Running it.", ((call_id, name, arguments),))


Script = Callable[[dict[str, Any]], Reply]


def content_text(content: Any) -> str:
    """A message's content as text (a string, or a list of ``{"type": "text"}`` parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def tool_results(request: dict[str, Any]) -> dict[str, str]:
    """``tool_call_id -> the result's text`` for every ``role: tool`` message in ``request``."""
    return {
        str(message.get("tool_call_id")): content_text(message.get("content"))
        for message in request.get("messages") or ()
        if isinstance(message, dict) and message.get("role") == "tool"
    }


def user_text(request: dict[str, Any]) -> str:
    """Every user message's text in ``request``, joined by newlines."""
    return "\n".join(
        content_text(message.get("content"))
        for message in request.get("messages") or ()
        if isinstance(message, dict) and message.get("role") == "user"
    )


def all_text(request: dict[str, Any]) -> str:
    """Every message's text (system, user, assistant, tool) in ``request``."""
    return "\n".join(
        content_text(message.get("content")) for message in request.get("messages") or () if isinstance(message, dict)
    )


def one_tool_call(name: str, arguments: dict[str, Any], done: str = "All done.") -> Script:
    """A script that calls ``name`` once, then (its result seen) says ``done``."""

    def script(request: dict[str, Any]) -> Reply:
        return text(done) if "call_fake_1" in tool_results(request) else tool_call(name, arguments)

    return script


class FakeOpenAIChat:
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
                if not self.path.split("?")[0].endswith("/chat/completions") or not isinstance(request, dict):
                    self._send(404, "application/json", b'{"error":{"type":"not_found","message":"no such path"}}')
                    return
                reply, number = fake.answer(request)
                completion_id = f"chatcmpl-fake-{number}"
                if request.get("stream"):
                    self._send(200, "text/event-stream", b"".join(sse(completion_id, reply)))
                else:
                    self._send(200, "application/json", json.dumps(whole(completion_id, reply)).encode())

            def do_GET(self) -> None:
                if self.path.split("?")[0].endswith("/models"):
                    models = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "fake"}]}
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
    return {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        for call_id, name, arguments in reply.calls
    ]


def whole(completion_id: str, reply: Reply) -> dict[str, Any]:
    """``reply`` as one non-streaming ``chat.completion``."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.calls:
        message["tool_calls"] = _calls(reply)
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
        "usage": _usage(),
    }


def _chunk(completion_id: str, choices: list[dict[str, Any]], **more: Any) -> bytes:
    data = {"id": completion_id, "object": "chat.completion.chunk", "created": 0, "model": MODEL, "choices": choices}
    return f"data: {json.dumps({**data, **more})}\n\n".encode()


def _delta(completion_id: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _chunk(completion_id, [{"index": 0, "delta": delta, "finish_reason": finish}])


def sse(completion_id: str, reply: Reply) -> Iterator[bytes]:
    """``reply`` as the Chat Completions stream of ``chat.completion.chunk`` events."""
    yield _delta(completion_id, {"role": "assistant", "content": ""})
    if reply.content:
        yield _delta(completion_id, {"content": reply.content})
    for index, call in enumerate(_calls(reply)):
        yield _delta(completion_id, {"tool_calls": [{"index": index, **call}]})
    yield _delta(completion_id, {}, reply.finish_reason)
    yield _chunk(completion_id, [], usage=_usage())
    yield b"data: [DONE]\n\n"


__all__ = [
    "MODEL",
    "FakeOpenAIChat",
    "Reply",
    "Script",
    "all_text",
    "content_text",
    "one_tool_call",
    "text",
    "tool_call",
    "tool_results",
    "user_text",
    "whole",
]
