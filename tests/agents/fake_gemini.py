"""A scripted fake of the Gemini API, as Gemini CLI speaks it with ``GOOGLE_GEMINI_BASE_URL``.

Gemini CLI 0.61.0 (auth type ``gemini-api-key``, one fixed model) sends one
``POST /v1beta/models/<model>:streamGenerateContent?alt=sse`` per model turn. The fake
answers each with the next scripted reply as one SSE event (a ``functionCall`` part or text),
and a plain "done." once the script runs out, so a run always ends. ``generateContent``
(without streaming) gets the same replies as one JSON object. Every request body is kept, so
a test can read what the model was sent back (``functionResponse`` parts, prompts).
"""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

MODEL = "gemini-2.5-flash"


def call(name: str, **args: Any) -> dict[str, Any]:
    """A scripted reply: the model calls tool ``name`` with ``args``."""
    return {"functionCall": {"name": name, "args": args}}


def text(words: str) -> dict[str, Any]:
    """A scripted reply: the model answers ``words`` and ends its turn."""
    return {"text": words}


class FakeGemini:
    """The script and the requests the CLI sent, shared with the handler threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []

    def script(self, *replies: dict[str, Any]) -> None:
        """Start a new scenario: these replies in order, and no requests seen yet."""
        with self._lock:
            self._script = list(replies)
            self.requests = []

    def next_reply(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests.append(body)
            return self._script.pop(0) if self._script else text("done.")

    def function_responses(self) -> list[dict[str, Any]]:
        """Every ``functionResponse`` the model was sent, in order."""
        found = []
        for body in self.requests:
            for content in body.get("contents", []):
                for part in content.get("parts", []):
                    if "functionResponse" in part and part["functionResponse"] not in found:
                        found.append(part["functionResponse"])
        return found

    def user_texts(self) -> list[str]:
        """Every user text part the model was sent, in order, without repeats."""
        found: list[str] = []
        for body in self.requests:
            for content in body.get("contents", []):
                if content.get("role") != "user":
                    continue
                for part in content.get("parts", []):
                    if isinstance(part.get("text"), str) and part["text"] not in found:
                        found.append(part["text"])
        return found

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        """A request handler class bound to this fake."""
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                path = self.path.split("?")[0]
                if not path.endswith((":streamGenerateContent", ":generateContent")):
                    self.send_error(404, f"the fake Gemini API has no {path}")
                    return
                answer = {
                    "candidates": [
                        {"content": {"role": "model", "parts": [fake.next_reply(body)]}, "finishReason": "STOP"}
                    ],
                    "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
                    "modelVersion": MODEL,
                }
                if path.endswith(":streamGenerateContent"):
                    data = f"data: {json.dumps(answer)}\n\n".encode()
                    content_type = "text/event-stream"
                else:
                    data = json.dumps(answer).encode()
                    content_type = "application/json"
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True

        return Handler


__all__ = ["MODEL", "FakeGemini", "call", "text"]
