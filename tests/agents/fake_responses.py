"""A scripted fake of the OpenAI Responses API (``POST /v1/responses``), as Codex CLI streams it.

A test gives :class:`FakeResponses` a *script*: a function from the request body (as Codex
sent it) to the reply, built with :func:`text` or :func:`shell`. Every request is kept in
:attr:`FakeResponses.requests`, so a test can assert on exactly what the agent sent back to the
model: a tool's output (a hook's deny reason), a developer message (added context), a user
message (a Stop hook's prompt). Replies are server-sent events: ``response.created``,
``response.output_item.added`` / ``.done`` for the one output item, ``response.completed``.
Standard library only; serve it with :func:`tests.agents.harness.serve_http` on a socket
inside the namespace.
"""

from __future__ import annotations

import dataclasses
import http.server
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

#: The model name Codex is configured with (one Codex has no metadata for: it offers ``exec_command``).
MODEL = "gpt-fake-codex"


@dataclasses.dataclass(frozen=True)
class Reply:
    """One output item: an assistant message (``words``) or a shell call (``command``)."""

    words: str = ""
    command: str | None = None


def text(words: str) -> Reply:
    """An assistant message that says ``words`` (ends the turn)."""
    return Reply(words=words)


def shell(command: str) -> Reply:
    """A call of Codex's shell tool running ``command``."""
    return Reply(command=command)


Script = Callable[[dict[str, Any]], Reply]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def items(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's input items."""
    found = request.get("input")
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def messages(request: dict[str, Any], role: str) -> list[str]:
    """The text of every ``role`` message (``user``, ``developer``, ``assistant``) in the request."""
    return [
        _content_text(item.get("content"))
        for item in items(request)
        if item.get("type", "message") == "message" and item.get("role") == role
    ]


def tool_outputs(request: dict[str, Any]) -> list[str]:
    """The text of every ``function_call_output`` in the request (what the tools returned)."""
    outputs = []
    for item in items(request):
        if item.get("type") == "function_call_output":
            output = item.get("output")
            outputs.append(output if isinstance(output, str) else _content_text(output) or json.dumps(output))
    return outputs


def last_is_tool_output(request: dict[str, Any]) -> bool:
    """Whether the model is being told a tool's result (rather than a new prompt)."""
    found = items(request)
    return bool(found) and found[-1].get("type") == "function_call_output"


def tool_names(request: dict[str, Any]) -> list[str]:
    return [str(t.get("name")) for t in request.get("tools") or () if isinstance(t, dict)]


class FakeResponses:
    """The fake server's state: the script and every request it was sent."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def record(self, request: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(request)

    def events(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """The server-sent events that answer ``request``."""
        reply = self.script(request)
        n = self.next_id()
        item: dict[str, Any]
        arguments: dict[str, Any]
        if reply.command is not None:
            if "exec_command" in tool_names(request) or not tool_names(request):
                name, arguments = "exec_command", {"cmd": reply.command}
            else:
                name, arguments = "shell", {"command": ["bash", "-lc", reply.command]}
            item = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        else:
            item = {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": reply.words, "annotations": []}],
            }
        response = {"id": f"resp_{n}", "object": "response", "model": MODEL, "status": "in_progress", "output": []}
        yield {"type": "response.created", "response": response}
        yield {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress"}}
        yield {"type": "response.output_item.done", "output_index": 0, "item": item}
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15,
        }
        yield {"type": "response.completed", "response": {**response, "status": "completed", "usage": usage}}

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        """A request handler class bound to this fake."""
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    request = {}
                if not self.path.rstrip("/").endswith("/responses") or not isinstance(request, dict):
                    self.send_error(404)
                    return
                fake.record(request)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in fake.events(request):
                    chunk = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                    self.wfile.write(chunk.encode())
                self.wfile.flush()
                self.close_connection = True

            def do_GET(self) -> None:
                self.send_error(404)

        return Handler


__all__ = [
    "MODEL",
    "FakeResponses",
    "Reply",
    "Script",
    "items",
    "last_is_tool_output",
    "messages",
    "shell",
    "text",
    "tool_names",
    "tool_outputs",
]
